// nifti.h - reading and writing 3-D NIfTI-1 volumes (.nii, .nii.gz) through nifticlib.
//
// Layout: a NIfTI file stores voxels with x fastest, then y, then z. halfgrad keeps that order and
// names the tensor's dimensions (D, H, W) = (z, y, x), so `data` is the file's buffer reinterpreted,
// never transposed. The affine maps voxel indices (i, j, k) = (x, y, z) to world millimetres, as in
// the NIfTI standard; `spacing` is listed in the tensor's (z, y, x) order.
//
// Intensities: any real scalar datatype the header names (uint8, int8, int16, uint16, int32, uint32,
// int64, uint64, float32, float64) is converted to float32 after applying the header's scaling
//     value = stored * scl_slope + scl_inter      (scl_slope == 0 or non-finite: no scaling at all)
// which is the NIfTI-1 rule. (The reference reader, ../shared/reference/torch_hippo_train.py, applies
// scl_inter even when scl_slope is 0; no file in the hippocampus set has slope 0, so both agree there.)
//
// Errors: every failure throws halfgrad::Error whose message starts "read_nifti: <path>:" (or
// "write_nifti: <path>:") and says what was found and what was expected. Truncated files, files that
// are not NIfTI-1, 4-D series, complex/RGB data and NaN/inf voxels are all reported this way; the
// reader checks the header itself before handing it to nifticlib, so a short or corrupt file is an
// error, never a crash. nifticlib parses the header and writes files; the voxel bytes are read here
// (zlib), because nifticlib's loader silently zero-fills a truncated file and sets NaN/inf to 0.
#pragma once
#include <array>
#include <string>

#include "core/tensor.h"

namespace halfgrad::io {

/// A 3-D image or label map with its geometry.
struct Volume {
  /// (D, H, W) = (z, y, x), dense, x fastest. float32 for images, int64 for label maps.
  Tensor data;
  /// Voxel size in millimetres, in the tensor's (z, y, x) order.
  std::array<double, 3> spacing{1.0, 1.0, 1.0};
  /// Row-major 4x4: world (x, y, z, 1) in mm = affine * (i, j, k, 1), where i indexes x (W), j y (H)
  /// and k z (D). Taken from the sform when the file has one, else from the qform (which nifticlib
  /// builds from pixdim when the file has neither). Keep it consistent with `spacing` when writing.
  std::array<double, 16> affine{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
};

/// Reads a 3-D NIfTI-1 image (.nii or .nii.gz) as float32 of shape (D, H, W) = (z, y, x).
///
/// Any real scalar datatype is accepted and scl_slope/scl_inter are applied (see the file comment).
/// Extents after the third must be 1 (a 4-D file with one volume is fine). Spacing and affine are
/// converted to millimetres from the header's xyz units (unknown units are taken as mm).
/// Throws halfgrad::Error naming `path` when the file is missing or unreadable, is not NIfTI-1
/// (wrong sizeof_hdr or magic; NIfTI-2 is not supported), has fewer or more than 3 non-trivial
/// dimensions, has a complex/RGB/binary/float128 datatype, is truncated, or holds NaN/inf (or a
/// value that overflows float32 after scaling); the message gives the voxel (z, y, x) for the last.
Volume read_nifti(const std::string& path);

/// Reads a label map: read_nifti, then each value rounded to the nearest integer (ties to even, as
/// numpy's rint) and returned as int64 of shape (D, H, W). Labels stored as float32 (0.0, 1.0, ...)
/// are therefore read exactly, as is any integer label below 2^24 (values pass through float32).
/// Throws as read_nifti does, and for a value too large for int64.
Volume read_label_nifti(const std::string& path);

/// Writes `vol` as a float32 NIfTI-1 file; `path` must end in .nii or .nii.gz (gzip-compressed).
///
/// vol.data: 3-D (D, H, W), any dtype (int64 labels are written as float32 values; exact below
/// 2^24). pixdim comes from vol.spacing (mm), sform and qform from vol.affine (code 1, scanner).
/// Throws halfgrad::Error naming `path` when the data is undefined or not 3-D, the extension is
/// wrong, the directory does not exist, or the file could not be written.
void write_nifti(const std::string& path, const Volume& vol);

}  // namespace halfgrad::io
