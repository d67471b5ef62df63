// nifti.h - reading and writing 3-D NIfTI-1 volumes (.nii, .nii.gz) through nifticlib.
//
// Layout: a NIfTI file stores voxels with x fastest, then y, then z. halfgrad keeps that order and
// names the tensor's dimensions (D, H, W) = (z, y, x), so `data` is the file's buffer reinterpreted,
// never transposed. The affine maps voxel indices (i, j, k) = (x, y, z) to world millimetres, as in
// the NIfTI standard; `spacing` is listed in the tensor's (z, y, x) order.
//
// Intensities: any real scalar datatype the header names (uint8, int8, int16, uint16, int32, uint32,
// int64, uint64, float32, float64) is converted to float32 after applying the header's scaling
//     value = stored * scl_slope + scl_inter      (scl_slope == 0: no scaling at all)
// which is the NIfTI-1 rule (a non-finite scl_slope or scl_inter is an error). Label maps
// (read_label_nifti) are scaled the same way in double precision and must come out integral. (The reference reader, ../shared/reference/torch_hippo_train.py, applies
// scl_inter even when scl_slope is 0; no file in the hippocampus set has slope 0, so both agree there.)
//
// Errors: every failure throws halfgrad::Error whose message starts "read_nifti: <path>:" (or
// "read_label_nifti: <path>:", "write_nifti: <path>:") and says what was found and what was
// expected. A file is untrusted input: the header is checked field by field from its raw bytes
// before nifticlib sees it (sizeof_hdr, magic, dim count and extents, datatype against bitpix,
// pixdim, vox_offset an integer in [352, 2^26]: 64 MiB of header and extensions, and nifticlib cannot
// represent 2^31 or more at all; finite scl_slope/scl_inter and qform/sform), the
// voxel count is capped (NiftiReadOptions::max_voxels) before anything is allocated, and the file
// must hold exactly vox_offset + voxels x bytes: a plain file by its size, a gzip file while it is
// inflated (streaming: a stream longer than that stops at its first extra byte, and its trailer,
// CRC-32 and length, is checked). Truncated files, files that are not NIfTI-1, 4-D series,
// complex/RGB data and NaN/inf voxels are all reported this way, never a crash. nifticlib turns the
// checked header into its geometry and writes files; the voxel bytes are read here (zlib), because
// nifticlib's loader silently zero-fills a truncated file and sets NaN/inf to 0.
#pragma once
#include <array>
#include <string>
#include <vector>

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
  /// The qform's affine (same layout and units) when the file has a qform (qform_code > 0) beside
  /// the sform `affine` came from; check_same_geometry compares it too, since readers differ in which
  /// of the two they take (ITK, which nnU-Net reads through, may take the qform).
  bool has_qform = false;
  std::array<double, 16> qform{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  /// The file's 348-byte NIfTI-1 header as read (byte-swapped to native order when the file was
  /// big-endian; a nifti_1_header's bytes), so that a result can be written with exactly the input's
  /// geometry (write_label_nifti, write_probabilities_nifti). Empty for a Volume made in memory.
  std::vector<unsigned char> header;
};

/// Limits of the reader. max_voxels: 2^28 voxels (a 645^3 volume) by default, so that at most
/// 2^31 bytes of voxel data (float64) are read and 1 GiB of float32 is returned; a header that
/// claims more is an error before any allocation. Raise it for larger volumes.
struct NiftiReadOptions {
  int64_t max_voxels = int64_t{1} << 28;
};

/// Reads a 3-D NIfTI-1 image (.nii or .nii.gz) as float32 of shape (D, H, W) = (z, y, x).
///
/// Any real scalar datatype is accepted and scl_slope/scl_inter are applied (see the file comment).
/// Extents after the third must be 1 (a 4-D file with one volume is fine). Spacing and affine are
/// converted to millimetres from the header's xyz units (unknown units are taken as mm).
/// Throws halfgrad::Error naming `path` when the file is missing or unreadable, is not NIfTI-1
/// (wrong sizeof_hdr or magic; NIfTI-2 and .hdr/.img pairs are not supported), has fewer or more
/// than 3 non-trivial dimensions, a complex/RGB/binary/float128 datatype or a bitpix that does not
/// match it, a non-finite pixdim, scaling or qform/sform, a vox_offset outside [352, 2^26] or not an
/// integer, more than options.max_voxels voxels, a size other than vox_offset + the voxel bytes
/// (truncated, or longer), a corrupt gzip stream, or NaN/inf (or a value that overflows float32
/// after scaling); the message gives the voxel (z, y, x) for the last.
Volume read_nifti(const std::string& path, const NiftiReadOptions& options = {});

/// Reads a label map as int64 of shape (D, H, W): every value (after scl_slope/scl_inter, in double
/// precision, so every integer label below 2^53 is exact) must be an integer, and, when
/// num_classes > 0, in [0, num_classes). A label map is never rounded: a file stored with
/// scl_slope 0.5 would turn class 2 into 1 and 1 into background. Throws as read_nifti does, and
/// "read_label_nifti: <path>: voxel (i, j, k) = (x, y, z) holds 0.5; expected an integer class
/// label" (i indexes x, the file's fastest axis) for a non-integer or out-of-range value.
Volume read_label_nifti(const std::string& path, int64_t num_classes = 0, const NiftiReadOptions& options = {});

/// read_nifti / read_label_nifti of n bytes in memory (a .nii file's bytes, or a .nii.gz file's
/// gzip stream). `name` stands for the path in messages and must end in .nii or .nii.gz (gzip bytes
/// need .nii.gz). The same checks and errors; used by the fuzzer (fuzz/nifti_fuzz.cpp).
Volume read_nifti_buffer(const void* data, size_t n, const std::string& name, const NiftiReadOptions& options = {});
Volume read_label_nifti_buffer(const void* data, size_t n, const std::string& name, int64_t num_classes = 0,
                               const NiftiReadOptions& options = {});

/// The tolerances of check_same_geometry: |a - b| <= atol + rtol * |b| for each spacing and each
/// affine element (millimetres; the rotation part scaled by the spacing), as numpy.allclose. nnU-Net's
/// dataset check (verify_dataset_integrity's verify_geometry) uses allclose's defaults, atol 1e-8;
/// here atol is 1e-4 mm, because a qform rebuilt from float32 quaternions and an sform of the same
/// grid differ by ~1e-6 in their rotation terms. Either is far below a voxel.
constexpr double kGeometryAtol = 1e-4;
constexpr double kGeometryRtol = 1e-5;

/// Throws halfgrad::Error unless `label` lies on `image`'s voxel grid in the world: the same
/// (D, H, W), the same spacing and the same affine (voxel -> mm) within the tolerances above, and the
/// same qform where both files have one; a
/// label map whose axes are flipped, shifted or scaled relative to its image would train the network
/// on voxels that are not the ones labelled. The message starts "<where>: ", names both files and
/// gives both spacings and both affines (their first three rows).
void check_same_geometry(const Volume& image, const std::string& image_path, const Volume& label,
                         const std::string& label_path, const std::string& where);

/// Writes `vol` as a float32 NIfTI-1 file; `path` must end in .nii or .nii.gz (gzip-compressed).
///
/// vol.data: 3-D (D, H, W), any dtype (int64 labels are written as float32 values; exact below
/// 2^24). pixdim comes from vol.spacing (mm), sform and qform from vol.affine (code 1, scanner).
/// Throws halfgrad::Error naming `path` when the data is undefined or not 3-D, the extension is
/// wrong, the directory does not exist, or the file could not be written.
void write_nifti(const std::string& path, const Volume& vol);

/// The extents dim[1..dim[0]] of a NIfTI-1 file's header, (x, y, z, t, ...) as stored, without
/// reading the voxels or checking more than sizeof_hdr and magic: for a caller that must tell "a
/// 4-D file of 2 volumes" (2 channels) from other bad files before read_nifti refuses it.
/// Throws halfgrad::Error naming `path` when the file cannot be read or is not NIfTI-1.
std::vector<int64_t> read_nifti_extents(const std::string& path);

/// Writes a label map with exactly the geometry of `like` (a Volume read from a file): the header
/// is `like.header` byte for byte (dim, pixdim, xyzt_units, qform_code, sform_code, quatern_b/c/d,
/// qoffset_x/y/z, srow_x/y/z, descrip-less fields...), except what describes the voxels: datatype
/// uint8, bitpix 8, scl_slope 1, scl_inter 0, cal_min 0, cal_max the largest label, vox_offset 352
/// (no extensions), intent_code NIFTI_INTENT_LABEL, descrip "halfgrad-unet3d label map".
/// labels: (D, H, W) = like.data's shape, int64 on the CPU, every value in [0, 255]. `path` ends in
/// .nii or .nii.gz (gzip). The file appears atomically: written to a temporary file in the same
/// folder, flushed, then renamed over `path`, so a failure never leaves a half-written file.
/// Throws halfgrad::Error naming `path` for an empty like.header, a shape mismatch, a label
/// outside [0, 255], a bad extension, or a folder that cannot be written.
void write_label_nifti(const std::string& path, const Tensor& labels, const Volume& like);

/// Writes per-class probabilities as a 4-D float32 NIfTI-1 file with `like`'s geometry (as
/// write_label_nifti): dim[0] 4, dim[4] = C (the class index is the 4th axis, pixdim[4] 1),
/// datatype float32, bitpix 32, scl_slope 1, scl_inter 0, cal_min 0, cal_max 1, intent_code
/// NIFTI_INTENT_NONE with intent_name "softmax", descrip "halfgrad-unet3d class probabilities".
/// probs: (C, D, H, W) float32 with (D, H, W) = like.data's shape. Atomic as write_label_nifti;
/// throws the same way (and for a non-float32 or non-finite tensor).
void write_probabilities_nifti(const std::string& path, const Tensor& probs, const Volume& like);

}  // namespace halfgrad::io
