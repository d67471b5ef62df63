// nifti.cpp - see nifti.h. Reading runs in three steps, each of which can only fail with an Error:
//   1. peek_header: the first 348 bytes, read through zlib (which passes plain files through), are
//      checked here - size, magic, dimensions, datatype - so nifticlib only ever sees sane headers;
//   2. nifti_image_read(path, 0) parses the header (byte order, offset, scaling, geometry);
//   3. read_voxel_bytes reads the voxel bytes with zlib, checks that all of them are there, swaps
//      byte order if needed, and the values are scaled, converted to float32 and checked finite.
// Step 3 does not use nifti_image_load, because nifticlib's loader silently zero-fills the missing
// bytes of a truncated file and silently replaces NaN/inf floats by 0; both must be errors here.
#include "io/nifti.h"

#include <nifti1_io.h>
#include <zlib.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace halfgrad::io {
namespace {

namespace fs = std::filesystem;

// The NIfTI-1 header is a fixed 348-byte struct; NIfTI-2 uses a 540-byte one, which niftiio cannot
// read. Field offsets below are those of nifti_1_header in nifti1.h.
constexpr int kNifti1HeaderBytes = 348;
constexpr int kNifti2HeaderBytes = 540;
constexpr int kOffsetDim = 40;       // short dim[8]
constexpr int kOffsetDatatype = 70;  // short datatype
constexpr int kOffsetVoxOffset = 108;  // float vox_offset
constexpr int kOffsetMagic = 344;    // char magic[4]: "n+1\0" single file, "ni1\0" header/image pair

struct NiftiDeleter {
  void operator()(nifti_image* nim) const { nifti_image_free(nim); }
};
using NiftiPtr = std::unique_ptr<nifti_image, NiftiDeleter>;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool has_nifti_extension(const std::string& path) { return ends_with(path, ".nii") || ends_with(path, ".nii.gz"); }

uint16_t swap16(uint16_t v) { return static_cast<uint16_t>((v >> 8) | (v << 8)); }
uint32_t swap32(uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

// Real scalar datatypes we convert to float32; everything else (binary, complex, RGB, float128) is refused.
bool is_supported_datatype(int code) {
  switch (code) {
    case NIFTI_TYPE_UINT8: case NIFTI_TYPE_INT8: case NIFTI_TYPE_INT16: case NIFTI_TYPE_UINT16:
    case NIFTI_TYPE_INT32: case NIFTI_TYPE_UINT32: case NIFTI_TYPE_INT64: case NIFTI_TYPE_UINT64:
    case NIFTI_TYPE_FLOAT32: case NIFTI_TYPE_FLOAT64:
      return true;
    default:
      return false;
  }
}

std::string dims_str(const int16_t* dim) {
  std::ostringstream os;
  os << "[";
  for (int d = 1; d <= dim[0]; ++d) os << (d > 1 ? ", " : "") << dim[d];
  os << "]";
  return os.str();
}

// Step 1: checks the raw header bytes. Throws with the reason; returns nothing on success.
void peek_header(const std::string& path) {
  const std::string where = "read_nifti: " + path + ": ";
  {
    std::ifstream plain(path, std::ios::binary);
    unsigned char magic[2] = {0, 0};
    plain.read(reinterpret_cast<char*>(magic), 2);
    const bool gzipped = plain.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    HG_CHECK(!(gzipped && !ends_with(path, ".gz")),
             where << "file is gzip-compressed but named .nii; expected the name to end in .nii.gz");
  }
  unsigned char hdr[kNifti1HeaderBytes];
  gzFile f = gzopen(path.c_str(), "rb");
  HG_CHECK(f != nullptr, where << "cannot open the file for reading; expected a readable .nii or .nii.gz file");
  const int got = gzread(f, hdr, kNifti1HeaderBytes);
  gzclose(f);
  HG_CHECK(got >= 0, where << "corrupt gzip stream; expected a valid .nii.gz file");
  HG_CHECK(got == kNifti1HeaderBytes,
           where << "file holds only " << got << (ends_with(path, ".gz") ? " bytes after decompression" : " bytes")
                 << "; expected at least the " << kNifti1HeaderBytes << "-byte NIfTI-1 header");

  uint32_t sizeof_hdr;
  std::memcpy(&sizeof_hdr, hdr, 4);
  const bool swapped = sizeof_hdr != kNifti1HeaderBytes && swap32(sizeof_hdr) == kNifti1HeaderBytes;
  HG_CHECK(sizeof_hdr != kNifti2HeaderBytes && swap32(sizeof_hdr) != kNifti2HeaderBytes,
           where << "is a NIfTI-2 file (sizeof_hdr 540); expected NIfTI-1 (sizeof_hdr 348), which is all niftiio reads");
  HG_CHECK(sizeof_hdr == kNifti1HeaderBytes || swapped,
           where << "not a NIfTI-1 file: sizeof_hdr is " << sizeof_hdr << "; expected 348");
  const char* magic = reinterpret_cast<const char*>(hdr + kOffsetMagic);
  HG_CHECK(std::memcmp(magic, "n+1", 4) == 0 || std::memcmp(magic, "ni1", 4) == 0,
           where << "not a NIfTI-1 file: magic is not \"n+1\" or \"ni1\" (an ANALYZE 7.5 header?); expected NIfTI-1");

  int16_t dim[8];
  std::memcpy(dim, hdr + kOffsetDim, sizeof(dim));
  int16_t datatype;
  std::memcpy(&datatype, hdr + kOffsetDatatype, 2);
  if (swapped) {
    for (auto& d : dim) d = static_cast<int16_t>(swap16(static_cast<uint16_t>(d)));
    datatype = static_cast<int16_t>(swap16(static_cast<uint16_t>(datatype)));
  }
  HG_CHECK(dim[0] >= 1 && dim[0] <= 7, where << "dim[0] is " << dim[0] << "; expected 3 to 7 dimensions");
  HG_CHECK(dim[0] >= 3, where << "is a " << dim[0] << "-D image with extents " << dims_str(dim) << "; expected a 3-D volume");
  for (int d = 1; d <= dim[0]; ++d)
    HG_CHECK(dim[d] >= 1, where << "extents " << dims_str(dim) << " include " << dim[d] << "; expected positive extents");
  for (int d = 4; d <= dim[0]; ++d)
    HG_CHECK(dim[d] == 1, where << "is " << dim[0] << "-D with extents " << dims_str(dim)
                                << "; expected a 3-D volume (extents after the third must be 1)");
  if (std::memcmp(magic, "n+1", 4) == 0) {
    float vox_offset;
    std::memcpy(&vox_offset, hdr + kOffsetVoxOffset, 4);
    if (swapped) {
      uint32_t u;
      std::memcpy(&u, &vox_offset, 4);
      u = swap32(u);
      std::memcpy(&vox_offset, &u, 4);
    }
    // NIfTI-1: in a single .nii file the voxels start at vox_offset >= 352 (header + 4 extension bytes).
    HG_CHECK(std::isfinite(vox_offset) && vox_offset >= 352.0f,
             where << "vox_offset is " << vox_offset << "; expected at least 352 in a single-file (n+1) NIfTI-1 image");
  }
  HG_CHECK(is_supported_datatype(datatype),
           where << "unsupported datatype " << datatype << " (" << nifti_datatype_string(datatype)
                 << "); expected a real scalar type: uint8, int8, int16, uint16, int32, uint32, int64, uint64, float32 or float64");
}

// gzread does not report a gzip stream whose compressed input ends before its 8-byte trailer
// (CRC-32 and length) once it has handed out all the data it asked for: a download cut in its last
// bytes, or corrupt data without a trailer, would read as a valid volume. So a gzip file is also run
// through inflate to the end of its first member, which must reach Z_STREAM_END (trailer checked).
void verify_gzip_member(const std::string& path, const std::string& where) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  HG_CHECK(f != nullptr, where << "cannot open the file for reading; expected a readable .nii.gz file");
  unsigned char magic[2] = {0, 0};
  const bool gz = std::fread(magic, 1, 2, f) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (!gz) { std::fclose(f); return; }  // plain .nii data (gzopen reads it transparently)
  std::rewind(f);
  z_stream zs{};
  HG_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, where << "zlib could not start inflating");
  std::vector<unsigned char> in(size_t{1} << 16), out(size_t{1} << 16);
  int ret = Z_OK;
  while (ret != Z_STREAM_END) {
    zs.avail_in = static_cast<uInt>(std::fread(in.data(), 1, in.size(), f));
    if (zs.avail_in == 0) break;  // input ended before the stream did
    zs.next_in = in.data();
    do {
      zs.avail_out = static_cast<uInt>(out.size());
      zs.next_out = out.data();
      ret = inflate(&zs, Z_NO_FLUSH);
    } while (ret == Z_OK && zs.avail_out == 0);
    if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) break;
  }
  const std::string msg = zs.msg ? zs.msg : (ret == Z_STREAM_END ? "" : "input ends before the gzip trailer");
  inflateEnd(&zs);
  std::fclose(f);
  HG_CHECK(ret == Z_STREAM_END, where << "corrupt or truncated gzip stream (zlib: " << msg
                                      << "); expected an intact .nii.gz file");
}

// Step 3a: the nvox * nbyper voxel bytes from iname_offset, in native byte order. Reads in chunks
// so that a header claiming a huge volume costs only the bytes the file really holds.
std::vector<unsigned char> read_voxel_bytes(const std::string& path, const nifti_image& nim) {
  const std::string where = "read_nifti: " + path + ": ";
  const uint64_t need = static_cast<uint64_t>(nim.nvox) * static_cast<uint64_t>(nim.nbyper);
  verify_gzip_member(path, where);
  gzFile f = gzopen(path.c_str(), "rb");
  HG_CHECK(f != nullptr, where << "cannot open the file for reading; expected a readable .nii or .nii.gz file");
  std::vector<unsigned char> bytes;
  bool ok = gzseek(f, static_cast<z_off_t>(nim.iname_offset), SEEK_SET) == static_cast<z_off_t>(nim.iname_offset);
  constexpr uint64_t kChunkBytes = uint64_t{1} << 24;  // 16 MiB per gzread call
  while (ok && bytes.size() < need) {
    const size_t have = bytes.size();
    const auto chunk = static_cast<unsigned>(std::min<uint64_t>(kChunkBytes, need - have));
    bytes.resize(have + chunk);
    const int got = gzread(f, bytes.data() + have, chunk);
    bytes.resize(have + static_cast<size_t>(std::max(got, 0)));
    ok = got == static_cast<int>(chunk);
  }
  // The gzip trailer was checked by verify_gzip_member; a read that stops short names zlib's reason.
  int zerr = Z_OK;
  const std::string zmsg = bytes.size() < need ? gzerror(f, &zerr) : "";
  gzclose(f);
  HG_CHECK(zerr == Z_OK || zerr == Z_STREAM_END,
           where << "corrupt or truncated gzip stream (zlib: " << zmsg << ") with " << bytes.size() << " of " << need
                 << " bytes of voxel data read; expected an intact .nii.gz file");
  HG_CHECK(bytes.size() == need, where << "truncated or corrupt: " << bytes.size() << " bytes of voxel data from offset "
                                       << nim.iname_offset << "; expected " << need << " (" << nim.nvox << " voxels x "
                                       << nim.nbyper << " bytes)");
  if (nim.byteorder != nifti_short_order() && nim.swapsize > 1)
    nifti_swap_Nbytes(nim.nvox, nim.swapsize, bytes.data());
  return bytes;
}

// Step 3b: stored values -> float32 with scaling, checking every value is finite.
template <typename Raw>
void convert_to_float(const nifti_image& nim, const void* bytes, float* out, const std::string& path) {
  const Raw* in = static_cast<const Raw*>(bytes);
  const bool scale = std::isfinite(nim.scl_slope) && nim.scl_slope != 0.0f;
  const double slope = nim.scl_slope, inter = nim.scl_inter;
  const int64_t n = static_cast<int64_t>(nim.nvox);
  for (int64_t i = 0; i < n; ++i) {
    double v = static_cast<double>(in[i]);
    if (scale) v = v * slope + inter;
    out[i] = static_cast<float>(v);
    if (!std::isfinite(out[i])) {
      const int64_t x = i % nim.nx, y = (i / nim.nx) % nim.ny, z = i / (static_cast<int64_t>(nim.nx) * nim.ny);
      HG_FAIL("read_nifti: " << path << ": voxel (z, y, x) = (" << z << ", " << y << ", " << x << ") is " << v
                             << (std::isfinite(v) ? ", which overflows float32" : "")
                             << "; expected finite image data");
    }
  }
}

void convert_voxels(const nifti_image& nim, const void* bytes, float* out, const std::string& path) {
  switch (nim.datatype) {
    case NIFTI_TYPE_UINT8: return convert_to_float<uint8_t>(nim, bytes, out, path);
    case NIFTI_TYPE_INT8: return convert_to_float<int8_t>(nim, bytes, out, path);
    case NIFTI_TYPE_INT16: return convert_to_float<int16_t>(nim, bytes, out, path);
    case NIFTI_TYPE_UINT16: return convert_to_float<uint16_t>(nim, bytes, out, path);
    case NIFTI_TYPE_INT32: return convert_to_float<int32_t>(nim, bytes, out, path);
    case NIFTI_TYPE_UINT32: return convert_to_float<uint32_t>(nim, bytes, out, path);
    case NIFTI_TYPE_INT64: return convert_to_float<int64_t>(nim, bytes, out, path);
    case NIFTI_TYPE_UINT64: return convert_to_float<uint64_t>(nim, bytes, out, path);
    case NIFTI_TYPE_FLOAT32: return convert_to_float<float>(nim, bytes, out, path);
    case NIFTI_TYPE_FLOAT64: return convert_to_float<double>(nim, bytes, out, path);
    default: HG_FAIL("read_nifti: " << path << ": unsupported datatype " << nim.datatype);
  }
}

// Millimetres per header length unit; unknown units are taken as mm, as most tools do.
double mm_per_unit(int xyz_units) {
  switch (xyz_units) {
    case NIFTI_UNITS_METER: return 1000.0;
    case NIFTI_UNITS_MICRON: return 0.001;
    default: return 1.0;
  }
}

}  // namespace

Volume read_nifti(const std::string& path) {
  const std::string where = "read_nifti: " + path + ": ";
  HG_CHECK(has_nifti_extension(path), where << "expected a file name ending in .nii or .nii.gz");
  std::error_code ec;
  HG_CHECK(fs::is_regular_file(path, ec), where << "file not found; expected an existing .nii or .nii.gz file");
  peek_header(path);

  NiftiPtr nim(nifti_image_read(path.c_str(), /*read_data=*/0));
  HG_CHECK(nim != nullptr, where << "nifticlib rejected the header; expected a valid NIfTI-1 header");
  const std::vector<unsigned char> bytes = read_voxel_bytes(path, *nim);

  Volume vol;
  vol.data = Tensor::empty({nim->nz, nim->ny, nim->nx}, kFloat32);
  convert_voxels(*nim, bytes.data(), vol.data.data<float>(), path);

  const double mm = mm_per_unit(nim->xyz_units);
  vol.spacing = {std::fabs(nim->dz) * mm, std::fabs(nim->dy) * mm, std::fabs(nim->dx) * mm};
  const mat44& m = nim->sform_code > 0 ? nim->sto_xyz : nim->qto_xyz;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) vol.affine[4 * r + c] = m.m[r][c] * (r < 3 ? mm : 1.0);
  return vol;
}

Volume read_label_nifti(const std::string& path) {
  Volume img = read_nifti(path);
  Volume lab{Tensor::empty(img.data.shape(), kInt64), img.spacing, img.affine};
  const float* in = img.data.data<float>();
  int64_t* out = lab.data.data<int64_t>();
  constexpr double kInt64Limit = 9.2e18;  // just below 2^63: larger values cannot be cast to int64
  for (int64_t i = 0; i < img.data.numel(); ++i) {
    HG_CHECK(std::fabs(in[i]) < kInt64Limit, "read_label_nifti: " << path << ": value " << in[i] << " at flat voxel "
                                                                  << i << "; expected an integer class label");
    out[i] = static_cast<int64_t>(std::nearbyint(in[i]));
  }
  return lab;
}

void write_nifti(const std::string& path, const Volume& vol) {
  const std::string where = "write_nifti: " + path + ": ";
  HG_CHECK(vol.data.defined(), where << "volume data is undefined; expected a 3-D (D, H, W) tensor");
  HG_CHECK(vol.data.dim() == 3, where << "volume data has shape " << shape_str(vol.data.shape())
                                      << "; expected a 3-D (D, H, W) tensor");
  HG_CHECK(has_nifti_extension(path), where << "expected a file name ending in .nii or .nii.gz");
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  HG_CHECK(parent.empty() || fs::is_directory(parent, ec), where << "directory " << parent.string()
                                                                << " does not exist; expected an existing directory");

  constexpr int64_t kMaxExtent = 32767;  // NIfTI-1 stores extents as int16
  for (int64_t d = 0; d < 3; ++d)
    HG_CHECK(vol.data.size(d) <= kMaxExtent, where << "shape " << shape_str(vol.data.shape())
                                                   << " has an extent above 32767; expected NIfTI-1 sized extents");
  const Tensor values = vol.data.dtype() == kFloat32 ? vol.data : vol.data.cast_copy(kFloat32);
  const int dims[8] = {3, static_cast<int>(vol.data.size(2)), static_cast<int>(vol.data.size(1)),
                       static_cast<int>(vol.data.size(0)), 1, 1, 1, 1};
  NiftiPtr nim(nifti_make_new_nim(dims, NIFTI_TYPE_FLOAT32, /*data_fill=*/1));
  HG_CHECK(nim != nullptr, where << "nifticlib could not create an image of extents " << shape_str(vol.data.shape()));
  std::memcpy(nim->data, values.data<float>(), values.nbytes());

  nim->nifti_type = NIFTI_FTYPE_NIFTI1_1;
  nim->xyz_units = NIFTI_UNITS_MM;
  nim->dz = nim->pixdim[3] = static_cast<float>(vol.spacing[0]);
  nim->dy = nim->pixdim[2] = static_cast<float>(vol.spacing[1]);
  nim->dx = nim->pixdim[1] = static_cast<float>(vol.spacing[2]);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) nim->sto_xyz.m[r][c] = static_cast<float>(vol.affine[4 * r + c]);
  nim->sto_ijk = nifti_mat44_inverse(nim->sto_xyz);
  nim->sform_code = nim->qform_code = NIFTI_XFORM_SCANNER_ANAT;
  float column_norm[3];  // the voxel sizes implied by the affine; pixdim above already holds them
  nifti_mat44_to_quatern(nim->sto_xyz, &nim->quatern_b, &nim->quatern_c, &nim->quatern_d, &nim->qoffset_x,
                         &nim->qoffset_y, &nim->qoffset_z, &column_norm[0], &column_norm[1], &column_norm[2],
                         &nim->qfac);
  nim->qto_xyz = nifti_quatern_to_mat44(nim->quatern_b, nim->quatern_c, nim->quatern_d, nim->qoffset_x,
                                        nim->qoffset_y, nim->qoffset_z, nim->dx, nim->dy, nim->dz, nim->qfac);
  nim->qto_ijk = nifti_mat44_inverse(nim->qto_xyz);

  HG_CHECK(nifti_set_filenames(nim.get(), path.c_str(), /*check=*/0, /*set_byte_order=*/1) == 0,
           where << "nifticlib rejected the file name");
  fs::remove(path, ec);
  nifti_image_write(nim.get());
  HG_CHECK(fs::is_regular_file(path, ec) && fs::file_size(path, ec) > 0,
           where << "nifticlib could not write the file; expected a writable location");
}

}  // namespace halfgrad::io
