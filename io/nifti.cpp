// nifti.cpp - see nifti.h. A file is untrusted input; reading runs in steps that can each only
// fail with an Error, and nothing large is allocated before the header has been checked:
//   1. Input: the raw bytes, from a file (read in chunks) or a caller's buffer; a gzip stream
//      (magic 1f 8b) is inflated as it is read (Stream), so a header claiming more voxels than the
//      stream holds is found when the stream ends, and a stream longer than the header says is an
//      error as soon as the first extra byte comes out - never inflated to the end of a zip bomb.
//   2. check_header: the 348 header bytes are checked field by field (sizeof_hdr, magic, dim,
//      datatype and bitpix, pixdim, vox_offset, scl_slope/scl_inter, the qform/sform numbers, the
//      voxel count against NiftiReadOptions::max_voxels), byte-swapped here when needed; a plain
//      file's size must then equal vox_offset + the voxel bytes, before any allocation.
//   3. nifti_convert_nhdr2nim turns the checked header into a nifti_image (byte order, scaling,
//      geometry), without reading the file again and without touching its extensions; its offset,
//      extents and element size must agree with step 2 (nifticlib casts vox_offset to int, and for
//      2^31 and above silently falls back to offset 348).
//   4. The voxel bytes (exactly vox_offset + nvox * nbyper bytes in total; the gzip trailer, CRC-32
//      and length, checked) are byte-swapped if needed, scaled and converted: float32 for images
//      (every value finite), int64 for label maps (every value an integer, optionally in a range).
// nifti_image_load is not used: it silently zero-fills a truncated file and replaces NaN/inf by 0.
#include "io/nifti.h"

#include <nifti1_io.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"

namespace halfgrad::io {
namespace {

namespace fs = std::filesystem;

// The NIfTI-1 header is a fixed 348-byte struct; NIfTI-2 uses a 540-byte one, which niftiio cannot
// read.
constexpr int kNifti1HeaderBytes = 348;
constexpr int kNifti2HeaderBytes = 540;
static_assert(sizeof(nifti_1_header) == kNifti1HeaderBytes, "nifti1.h's header struct must be the 348 file bytes");
// In a single .nii file the voxels start at vox_offset >= 352 (header + 4 extension-flag bytes).
constexpr double kMinVoxOffset = 352.0;
// nifticlib keeps the offset in an int, so 2^31 and beyond cannot be represented (it silently falls
// back to 348). Below that, the header and its extensions (typically a few KB) are capped at
// 64 MiB: a .nii.gz claiming more would be inflated that far before its voxels are even reached.
constexpr double kMaxVoxOffset = 67108864.0;

struct NiftiDeleter {
  void operator()(nifti_image* nim) const { nifti_image_free(nim); }
};
using NiftiPtr = std::unique_ptr<nifti_image, NiftiDeleter>;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool has_nifti_extension(const std::string& path) { return ends_with(path, ".nii") || ends_with(path, ".nii.gz"); }

uint32_t swap32(uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

// Bytes per voxel of the real scalar datatypes we convert; 0 for everything else (binary, complex,
// RGB, float128), which is refused.
int datatype_bytes(int code) {
  switch (code) {
    case NIFTI_TYPE_UINT8: case NIFTI_TYPE_INT8: return 1;
    case NIFTI_TYPE_INT16: case NIFTI_TYPE_UINT16: return 2;
    case NIFTI_TYPE_INT32: case NIFTI_TYPE_UINT32: case NIFTI_TYPE_FLOAT32: return 4;
    case NIFTI_TYPE_INT64: case NIFTI_TYPE_UINT64: case NIFTI_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

std::string dims_str(const short* dim) {
  std::ostringstream os;
  os << "[";
  for (int d = 1; d <= dim[0] && d <= 7; ++d) os << (d > 1 ? ", " : "") << dim[d];
  os << "]";
  return os.str();
}

// ---- step 1: the bytes ------------------------------------------------------------------------------

// Raw (possibly compressed) bytes, pulled in chunks: from a file or from memory.
class RawInput {
 public:
  virtual ~RawInput() = default;
  /// Up to n bytes into buf; 0 at the end.
  virtual size_t read(unsigned char* buf, size_t n) = 0;
  /// Total raw size.
  virtual uint64_t size() const = 0;
};

class FileInput : public RawInput {
 public:
  // Opened without blocking (a FIFO named x.nii.gz is refused, not waited on: core/file_io.h).
  FileInput(const std::string& path, const std::string& where) {
    UniqueFd fd = open_regular_file(path, where.substr(0, where.size() - 2), "a readable .nii or .nii.gz file");
    struct stat st;
    HG_CHECK(::fstat(fd.fd, &st) == 0, where << "cannot stat the file");
    size_ = static_cast<uint64_t>(st.st_size);
    f_ = ::fdopen(fd.fd, "rb");
    HG_CHECK(f_ != nullptr, where << "cannot open the file for reading; expected a readable .nii or .nii.gz file");
    fd.release();
  }
  ~FileInput() override { std::fclose(f_); }
  FileInput(const FileInput&) = delete;
  FileInput& operator=(const FileInput&) = delete;
  size_t read(unsigned char* buf, size_t n) override { return std::fread(buf, 1, n, f_); }
  uint64_t size() const override { return size_; }

 private:
  std::FILE* f_ = nullptr;
  uint64_t size_ = 0;
};

class MemoryInput : public RawInput {
 public:
  MemoryInput(const void* data, size_t n) : p_(static_cast<const unsigned char*>(data)), n_(n) {}
  size_t read(unsigned char* buf, size_t n) override {
    const size_t k = std::min(n, n_ - pos_);
    if (k) std::memcpy(buf, p_ + pos_, k);
    pos_ += k;
    return k;
  }
  uint64_t size() const override { return n_; }

 private:
  const unsigned char* p_;
  size_t n_, pos_ = 0;
};

// The file's content: raw bytes passed through, or a gzip stream (one or more members, as gzip
// and gzread allow) inflated as it is read. read() returns fewer bytes than asked only at the end
// of the content; a corrupt or cut stream (no trailer, bad CRC or length) is an Error.
class Stream {
 public:
  Stream(RawInput& raw, const std::string& where) : raw_(raw), where_(where), in_(size_t{1} << 16) {
    in_len_ = raw_.read(in_.data(), in_.size());
    gzip_ = in_len_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) {
      HG_CHECK(inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK, where_ << "zlib could not start inflating");
      zs_.next_in = in_.data();
      zs_.avail_in = static_cast<uInt>(in_len_);
    }
  }
  ~Stream() {
    if (gzip_) inflateEnd(&zs_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  bool gzip() const { return gzip_; }

  size_t read(unsigned char* out, size_t n) {
    if (!gzip_) {
      size_t got = 0;
      const size_t from_buf = std::min(n, in_len_ - in_pos_);  // the bytes read while sniffing the magic
      if (from_buf) std::memcpy(out, in_.data() + in_pos_, from_buf);
      in_pos_ += from_buf;
      got += from_buf;
      while (got < n) {
        const size_t k = raw_.read(out + got, n - got);
        if (k == 0) break;
        got += k;
      }
      return got;
    }
    size_t got = 0;
    while (got < n && !done_) {
      if (zs_.avail_in == 0) {
        in_len_ = raw_.read(in_.data(), in_.size());
        zs_.next_in = in_.data();
        zs_.avail_in = static_cast<uInt>(in_len_);
      }
      zs_.next_out = out + got;
      zs_.avail_out = static_cast<uInt>(std::min<size_t>(n - got, size_t{1} << 30));
      const uInt before = zs_.avail_out;
      const bool input_ended = zs_.avail_in == 0;
      const int ret = inflate(&zs_, Z_NO_FLUSH);
      got += before - zs_.avail_out;
      if (ret == Z_STREAM_END) {
        // A member ended with its trailer checked; another member may follow.
        if (zs_.avail_in == 0) {
          in_len_ = raw_.read(in_.data(), in_.size());
          zs_.next_in = in_.data();
          zs_.avail_in = static_cast<uInt>(in_len_);
        }
        if (zs_.avail_in == 0) done_ = true;
        else HG_CHECK(inflateReset(&zs_) == Z_OK, where_ << "zlib could not start the next gzip member");
        continue;
      }
      HG_CHECK(ret == Z_OK || (ret == Z_BUF_ERROR && !input_ended),
               where_ << "corrupt or truncated gzip stream (zlib: "
                      << (zs_.msg ? zs_.msg : input_ended ? "input ends before the gzip trailer" : "inflate error")
                      << ", after " << zs_.total_out << " bytes of the current member); expected an intact .nii.gz file");
    }
    return got;
  }

 private:
  RawInput& raw_;
  const std::string& where_;
  std::vector<unsigned char> in_;
  size_t in_len_ = 0, in_pos_ = 0;
  bool gzip_ = false, done_ = false;
  z_stream zs_{};
};

// ---- step 2: the header -----------------------------------------------------------------------------

// What the checked header says about the voxel data.
struct HeaderFacts {
  bool swapped = false;
  int64_t nx = 0, ny = 0, nz = 0;
  int datatype = 0, bytes_per_voxel = 0;
  uint64_t offset = 0;      // vox_offset, an integer in [352, 2^26]
  uint64_t data_bytes = 0;  // nx * ny * nz * bytes_per_voxel
};

bool all_finite(const float* v, int n) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}

// Checks every header field the reader relies on; `h` is the header in native byte order.
HeaderFacts check_header(const nifti_1_header& raw, nifti_1_header* h, const std::string& where,
                         const NiftiReadOptions& options) {
  HeaderFacts f;
  *h = raw;
  uint32_t sizeof_hdr;
  std::memcpy(&sizeof_hdr, &raw.sizeof_hdr, 4);
  f.swapped = sizeof_hdr != kNifti1HeaderBytes && swap32(sizeof_hdr) == kNifti1HeaderBytes;
  HG_CHECK(sizeof_hdr != kNifti2HeaderBytes && swap32(sizeof_hdr) != kNifti2HeaderBytes,
           where << "is a NIfTI-2 file (sizeof_hdr 540); expected NIfTI-1 (sizeof_hdr 348), which is all niftiio reads");
  HG_CHECK(sizeof_hdr == kNifti1HeaderBytes || f.swapped,
           where << "not a NIfTI-1 file: sizeof_hdr is " << sizeof_hdr << "; expected 348");
  HG_CHECK(std::memcmp(raw.magic, "ni1", 4) != 0,
           where << "magic is \"ni1\" (the header of a .hdr/.img pair); expected \"n+1\", a single-file .nii image");
  HG_CHECK(std::memcmp(raw.magic, "n+1", 4) == 0,
           where << "not a NIfTI-1 file: magic is not \"n+1\" (an ANALYZE 7.5 header?); expected NIfTI-1");
  if (f.swapped) swap_nifti_header(h, /*is_nifti=*/1);

  const short* dim = h->dim;
  HG_CHECK(dim[0] >= 1 && dim[0] <= 7, where << "dim[0] is " << dim[0] << "; expected 3 to 7 dimensions");
  HG_CHECK(dim[0] >= 3, where << "is a " << dim[0] << "-D image with extents " << dims_str(dim) << "; expected a 3-D volume");
  for (int d = 1; d <= dim[0]; ++d)
    HG_CHECK(dim[d] >= 1, where << "extents " << dims_str(dim) << " include " << dim[d] << "; expected positive extents");
  for (int d = 4; d <= dim[0]; ++d)
    HG_CHECK(dim[d] == 1, where << "is " << dim[0] << "-D with extents " << dims_str(dim)
                                << "; expected a 3-D volume (extents after the third must be 1)");
  f.nx = dim[1];
  f.ny = dim[2];
  f.nz = dim[3];

  f.datatype = h->datatype;
  f.bytes_per_voxel = datatype_bytes(f.datatype);
  HG_CHECK(f.bytes_per_voxel > 0,
           where << "unsupported datatype " << f.datatype << " (" << nifti_datatype_string(f.datatype)
                 << "); expected a real scalar type: uint8, int8, int16, uint16, int32, uint32, int64, uint64, float32 or float64");
  HG_CHECK(h->bitpix == 8 * f.bytes_per_voxel, where << "bitpix is " << h->bitpix << " but datatype "
                                                     << nifti_datatype_string(f.datatype) << " has "
                                                     << 8 * f.bytes_per_voxel << " bits; expected them to agree");

  for (int d = 1; d <= 3; ++d)
    HG_CHECK(std::isfinite(h->pixdim[d]) && h->pixdim[d] != 0.0f,
             where << "pixdim[" << d << "] (the voxel size) is " << h->pixdim[d] << "; expected a finite non-zero size");
  HG_CHECK(std::isfinite(h->pixdim[0]), where << "pixdim[0] (qfac) is " << h->pixdim[0] << "; expected -1 or 1");
  HG_CHECK(std::isfinite(h->scl_slope) && std::isfinite(h->scl_inter),
           where << "scl_slope " << h->scl_slope << ", scl_inter " << h->scl_inter
                 << "; expected finite scaling (scl_slope 0 means no scaling)");
  if (h->qform_code > 0) {
    const float q[6] = {h->quatern_b, h->quatern_c, h->quatern_d, h->qoffset_x, h->qoffset_y, h->qoffset_z};
    HG_CHECK(all_finite(q, 6), where << "the qform (quatern_b/c/d, qoffset_x/y/z) holds a non-finite number; expected finite");
  }
  if (h->sform_code > 0)
    HG_CHECK(all_finite(h->srow_x, 4) && all_finite(h->srow_y, 4) && all_finite(h->srow_z, 4),
             where << "the sform (srow_x/y/z) holds a non-finite number; expected finite");

  const double off = h->vox_offset;
  HG_CHECK(std::isfinite(off) && off >= kMinVoxOffset && off <= kMaxVoxOffset && off == std::floor(off),
           where << "vox_offset is " << std::setprecision(12) << off << "; expected an integer from 352 to "
                 << kMaxVoxOffset << " (64 MiB of header and extensions) in a single-file (n+1) NIfTI-1 image");
  f.offset = static_cast<uint64_t>(off);

  // Extents are int16, so nx * ny * nz < 2^45 and * 8 bytes < 2^48: no overflow in int64.
  const int64_t numel = f.nx * f.ny * f.nz;
  HG_CHECK(numel <= options.max_voxels,
           where << "extents " << dims_str(dim) << " are " << numel << " voxels; the limit is " << options.max_voxels
                 << " (NiftiReadOptions::max_voxels); expected a smaller volume");
  f.data_bytes = static_cast<uint64_t>(numel) * static_cast<uint64_t>(f.bytes_per_voxel);
  return f;
}

// ---- steps 3 and 4 ----------------------------------------------------------------------------------

// Stored value -> double with the NIfTI-1 scaling; fn(flat index, value) for every voxel.
template <typename Raw, typename Fn>
void for_each_value_as(const unsigned char* bytes, int64_t n, bool scale, double slope, double inter, Fn&& fn) {
  for (int64_t i = 0; i < n; ++i) {
    Raw r;
    std::memcpy(&r, bytes + i * static_cast<int64_t>(sizeof(Raw)), sizeof(Raw));
    double v = static_cast<double>(r);
    if (scale) v = v * slope + inter;
    fn(i, v);
  }
}

template <typename Fn>
void for_each_value(int datatype, const unsigned char* bytes, int64_t n, float scl_slope, float scl_inter, Fn&& fn) {
  const bool scale = scl_slope != 0.0f;  // both finite (check_header)
  const double s = scl_slope, b = scl_inter;
  switch (datatype) {
    case NIFTI_TYPE_UINT8: return for_each_value_as<uint8_t>(bytes, n, scale, s, b, fn);
    case NIFTI_TYPE_INT8: return for_each_value_as<int8_t>(bytes, n, scale, s, b, fn);
    case NIFTI_TYPE_INT16: return for_each_value_as<int16_t>(bytes, n, scale, s, b, fn);
    case NIFTI_TYPE_UINT16: return for_each_value_as<uint16_t>(bytes, n, scale, s, b, fn);
    case NIFTI_TYPE_INT32: return for_each_value_as<int32_t>(bytes, n, scale, s, b, fn);
    case NIFTI_TYPE_UINT32: return for_each_value_as<uint32_t>(bytes, n, scale, s, b, fn);
    case NIFTI_TYPE_INT64: return for_each_value_as<int64_t>(bytes, n, scale, s, b, fn);
    case NIFTI_TYPE_UINT64: return for_each_value_as<uint64_t>(bytes, n, scale, s, b, fn);
    case NIFTI_TYPE_FLOAT32: return for_each_value_as<float>(bytes, n, scale, s, b, fn);
    case NIFTI_TYPE_FLOAT64: return for_each_value_as<double>(bytes, n, scale, s, b, fn);
    default: HG_FAIL("read_nifti: unsupported datatype " << datatype);
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

// A header and the voxel bytes (native byte order), checked; the geometry in `geom`.
struct RawVolume {
  HeaderFacts facts;
  float scl_slope = 0, scl_inter = 0;
  std::vector<unsigned char> bytes;
};

RawVolume read_raw(RawInput& raw, const std::string& name, const NiftiReadOptions& options, Volume* geom) {
  const std::string where = "read_nifti: " + name + ": ";
  HG_CHECK(has_nifti_extension(name), where << "expected a file name ending in .nii or .nii.gz");
  HG_CHECK(options.max_voxels >= 1, where << "NiftiReadOptions::max_voxels is " << options.max_voxels << "; expected >= 1");
  Stream in(raw, where);
  HG_CHECK(!(in.gzip() && !ends_with(name, ".gz")),
           where << "file is gzip-compressed but named .nii; expected the name to end in .nii.gz");

  nifti_1_header file_hdr, h;
  const size_t got = in.read(reinterpret_cast<unsigned char*>(&file_hdr), kNifti1HeaderBytes);
  HG_CHECK(got == kNifti1HeaderBytes,
           where << "file holds only " << got << (in.gzip() ? " bytes after decompression" : " bytes")
                 << "; expected at least the " << kNifti1HeaderBytes << "-byte NIfTI-1 header");
  RawVolume out;
  out.facts = check_header(file_hdr, &h, where, options);
  geom->header.assign(reinterpret_cast<const unsigned char*>(&h), reinterpret_cast<const unsigned char*>(&h) + kNifti1HeaderBytes);
  const HeaderFacts& f = out.facts;
  const uint64_t total = f.offset + f.data_bytes;
  if (!in.gzip())
    HG_CHECK(raw.size() == total, where << "file is " << raw.size() << " bytes but vox_offset " << f.offset << " + "
                                        << f.nx * f.ny * f.nz << " voxels x " << f.bytes_per_voxel << " bytes = " << total
                                        << "; expected the sizes to agree (truncated or corrupt file)");

  // nifticlib's own reading of the checked header: it must agree on what we read.
  NiftiPtr nim(nifti_convert_nhdr2nim(file_hdr, name.c_str()));
  HG_CHECK(nim != nullptr, where << "nifticlib rejected the header; expected a valid NIfTI-1 header");
  HG_CHECK(nim->nx == f.nx && nim->ny == f.ny && nim->nz == f.nz && nim->nbyper == f.bytes_per_voxel &&
               static_cast<uint64_t>(nim->iname_offset) == f.offset && nim->datatype == f.datatype,
           where << "nifticlib reads the header as extents [" << nim->nx << ", " << nim->ny << ", " << nim->nz
                 << "], offset " << nim->iname_offset << ", " << nim->nbyper << " bytes per voxel; the header says ["
                 << f.nx << ", " << f.ny << ", " << f.nz << "], offset " << f.offset << ", " << f.bytes_per_voxel
                 << "; expected them to agree");
  out.scl_slope = h.scl_slope;
  out.scl_inter = h.scl_inter;
  const double mm = mm_per_unit(nim->xyz_units);
  geom->spacing = {std::fabs(nim->dz) * mm, std::fabs(nim->dy) * mm, std::fabs(nim->dx) * mm};
  for (double sp : geom->spacing)
    HG_CHECK(std::isfinite(sp), where << "a voxel size in millimetres overflows (pixdim " << nim->dx << ", " << nim->dy
                                      << ", " << nim->dz << " in units " << nim->xyz_units << "); expected finite");
  const mat44& m = nim->sform_code > 0 ? nim->sto_xyz : nim->qto_xyz;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      geom->affine[4 * r + c] = m.m[r][c] * (r < 3 ? mm : 1.0);
      HG_CHECK(std::isfinite(geom->affine[4 * r + c]), where << "the affine built from the header holds a non-finite "
                                                                "number; expected a valid qform or sform");
    }
  geom->has_qform = nim->qform_code > 0;
  if (geom->has_qform)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) {
        geom->qform[4 * r + c] = nim->qto_xyz.m[r][c] * (r < 3 ? mm : 1.0);
        HG_CHECK(std::isfinite(geom->qform[4 * r + c]), where << "the qform's affine holds a non-finite number; expected finite");
      }

  // The extension area between the header and vox_offset, then the voxels. A gzip file's buffer
  // grows in chunks as data arrives, so a header that claims more than the stream holds costs
  // only what the stream holds; a plain file's size was checked above.
  std::vector<unsigned char> skip(std::min<uint64_t>(f.offset - kNifti1HeaderBytes, uint64_t{1} << 16));
  for (uint64_t left = f.offset - kNifti1HeaderBytes; left > 0;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, skip.size()));
    const size_t k = in.read(skip.data(), want);
    HG_CHECK(k == want, where << "truncated: the file ends at byte " << f.offset - left + k << ", before vox_offset "
                              << f.offset << "; expected the voxel data there");
    left -= k;
  }
  constexpr uint64_t kChunkBytes = uint64_t{1} << 24;
  if (!in.gzip()) out.bytes.reserve(f.data_bytes);
  while (out.bytes.size() < f.data_bytes) {
    const size_t have = out.bytes.size();
    const auto chunk = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, f.data_bytes - have));
    out.bytes.resize(have + chunk);
    const size_t k = in.read(out.bytes.data() + have, chunk);
    HG_CHECK(k == chunk, where << "truncated or corrupt: " << have + k << " bytes of voxel data from offset " << f.offset
                               << "; expected " << f.data_bytes << " (" << f.nx * f.ny * f.nz << " voxels x "
                               << f.bytes_per_voxel << " bytes, extents " << dims_str(h.dim) << ")");
  }
  unsigned char extra;
  HG_CHECK(in.read(&extra, 1) == 0, where << "holds more data than its header describes: more than vox_offset "
                                          << f.offset << " + " << f.data_bytes << " bytes of voxel data"
                                          << (in.gzip() ? " after decompression" : "")
                                          << "; expected the file to end there (corrupt header?)");
  if (f.swapped && f.bytes_per_voxel > 1)
    nifti_swap_Nbytes(static_cast<size_t>(f.nx * f.ny * f.nz), f.bytes_per_voxel, out.bytes.data());
  return out;
}

Volume to_image(RawVolume raw, Volume geom, const std::string& name) {
  const HeaderFacts& f = raw.facts;
  geom.data = Tensor::empty({f.nz, f.ny, f.nx}, kFloat32);
  float* out = geom.data.data<float>();
  for_each_value(f.datatype, raw.bytes.data(), f.nx * f.ny * f.nz, raw.scl_slope, raw.scl_inter, [&](int64_t i, double v) {
    out[i] = static_cast<float>(v);
    if (!std::isfinite(out[i])) {
      const int64_t x = i % f.nx, y = (i / f.nx) % f.ny, z = i / (f.nx * f.ny);
      HG_FAIL("read_nifti: " << name << ": voxel (z, y, x) = (" << z << ", " << y << ", " << x << ") is " << v
                             << (std::isfinite(v) ? ", which overflows float32" : "") << "; expected finite image data");
    }
  });
  return geom;
}

// Integers up to 2^53 are exact in double; labels beyond that could not be told apart.
constexpr double kMaxExactLabel = 9007199254740992.0;

Volume to_labels(RawVolume raw, Volume geom, const std::string& name, int64_t num_classes) {
  const HeaderFacts& f = raw.facts;
  geom.data = Tensor::empty({f.nz, f.ny, f.nx}, kInt64);
  int64_t* out = geom.data.data<int64_t>();
  for_each_value(f.datatype, raw.bytes.data(), f.nx * f.ny * f.nz, raw.scl_slope, raw.scl_inter, [&](int64_t i, double v) {
    const bool integral = std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= kMaxExactLabel;
    const bool in_range = integral && (num_classes <= 0 || (v >= 0 && v < static_cast<double>(num_classes)));
    if (!in_range) {
      const int64_t x = i % f.nx, y = (i / f.nx) % f.ny, z = i / (f.nx * f.ny);
      std::ostringstream expected;
      if (!integral) expected << "an integer class label (scl_slope " << raw.scl_slope << ", scl_inter " << raw.scl_inter << ")";
      else expected << "a class in [0, " << num_classes << ")";
      HG_FAIL("read_label_nifti: " << name << ": voxel (i, j, k) = (" << x << ", " << y << ", " << z << ") holds "
                                   << std::setprecision(17) << v << "; expected " << expected.str());
    }
    out[i] = static_cast<int64_t>(v);
  });
  return geom;
}

void check_file(const std::string& path) {
  const std::string where = "read_nifti: " + path + ": ";
  HG_CHECK(has_nifti_extension(path), where << "expected a file name ending in .nii or .nii.gz");
  struct stat st;
  HG_CHECK(::stat(path.c_str(), &st) == 0, where << "file not found; expected an existing .nii or .nii.gz file");
  HG_CHECK(S_ISREG(st.st_mode), where << "is " << file_type_name(st.st_mode)
                                      << ", not a regular file; expected a .nii or .nii.gz file");
}

// ---- writing with a given header -----------------------------------------------------------------

// Writes all n bytes to fd (write(2) may write fewer), or returns false.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// The header `hdr` (native byte order), the 4 extension-flag bytes (all zero: no extensions) and
// `voxels`, into `path`: a temporary file in the same folder, gzip-compressed for .nii.gz, fsync'ed,
// then renamed over `path`, and the folder fsync'ed. Any failure before the rename removes the
// temporary file and throws naming `path`; a failing folder fsync throws after the rename.
void write_header_and_voxels(const std::string& path, const nifti_1_header& hdr, const void* voxels, size_t nbytes,
                             const std::string& where) {
  HG_CHECK(has_nifti_extension(path), where << "expected a file name ending in .nii or .nii.gz");
  const fs::path target(path);
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  HG_CHECK(fs::is_directory(parent, ec), where << "directory " << parent.string()
                                               << " does not exist; expected an existing, writable directory");
  const std::string tmp = (parent / ("." + target.filename().string() + ".tmp" + std::to_string(::getpid()))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  HG_CHECK(fd >= 0, where << "cannot create " << tmp << " (" << std::strerror(errno)
                          << "); expected a writable directory");
  const char extension_flags[4] = {0, 0, 0, 0};
  bool ok;
  if (ends_with(path, ".gz")) {
    gzFile gz = gzdopen(::dup(fd), "wb6");
    ok = gz != nullptr;
    for (const auto& [p, n] : {std::pair<const void*, size_t>{&hdr, kNifti1HeaderBytes}, {extension_flags, 4}, {voxels, nbytes}})
      for (size_t done = 0; ok && done < n;) {  // gzwrite takes an unsigned count: 1 GiB at a time
        const unsigned k = static_cast<unsigned>(std::min<size_t>(n - done, size_t{1} << 30));
        ok = gzwrite(gz, static_cast<const char*>(p) + done, k) == static_cast<int>(k);
        done += k;
      }
    if (gz != nullptr) ok = gzclose(gz) == Z_OK && ok;
  } else {
    ok = write_all(fd, &hdr, kNifti1HeaderBytes) && write_all(fd, extension_flags, 4) && write_all(fd, voxels, nbytes);
  }
  ok = ok && ::fsync(fd) == 0;
  const int saved_errno = errno;
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    const std::string reason = std::strerror(errno ? errno : saved_errno);
    ::unlink(tmp.c_str());
    HG_FAIL(where << "could not write the file (" << reason << "); expected a writable location with free space");
  }
  // The rename is durable only once the folder's entry is on disk (as safetensors::write_file does).
  const int dir = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY);
  HG_CHECK(dir >= 0 && ::fsync(dir) == 0 && ::close(dir) == 0,
           where << "wrote the file, but could not fsync its folder " << parent.string() << " ("
                 << std::strerror(errno) << "); the file may not survive a power cut");
}

// `like`'s header, checked, with the fields that describe the voxels reset for a new datatype.
nifti_1_header derived_header(const Volume& like, const std::string& where, short datatype, short bitpix) {
  HG_CHECK(like.header.size() == static_cast<size_t>(kNifti1HeaderBytes),
           where << "the reference volume has no NIfTI header (" << like.header.size()
                 << " bytes); expected a Volume returned by read_nifti");
  nifti_1_header h;
  std::memcpy(&h, like.header.data(), kNifti1HeaderBytes);
  h.datatype = datatype;
  h.bitpix = bitpix;
  h.vox_offset = kMinVoxOffset;
  h.scl_slope = 1.0f;
  h.scl_inter = 0.0f;
  h.intent_p1 = h.intent_p2 = h.intent_p3 = 0.0f;
  std::memset(h.intent_name, 0, sizeof h.intent_name);
  std::memset(h.descrip, 0, sizeof h.descrip);
  std::memset(h.aux_file, 0, sizeof h.aux_file);
  h.glmax = h.glmin = 0;
  return h;
}

void check_like_shape(const Shape& got, const Volume& like, const std::string& where, const char* what) {
  HG_CHECK(like.data.defined() && got == like.data.shape(),
           where << what << " has shape " << shape_str(got) << "; expected the reference volume's (D, H, W) "
                 << (like.data.defined() ? shape_str(like.data.shape()) : std::string("(undefined)")));
}

}  // namespace

std::vector<int64_t> read_nifti_extents(const std::string& path) {
  const std::string where = "read_nifti: " + path + ": ";
  check_file(path);
  FileInput raw(path, where);
  Stream in(raw, where);
  nifti_1_header h;
  HG_CHECK(in.read(reinterpret_cast<unsigned char*>(&h), kNifti1HeaderBytes) == kNifti1HeaderBytes,
           where << "file is shorter than the " << kNifti1HeaderBytes << "-byte NIfTI-1 header; expected a NIfTI-1 file");
  uint32_t sizeof_hdr;
  std::memcpy(&sizeof_hdr, &h.sizeof_hdr, 4);
  const bool swapped = sizeof_hdr != kNifti1HeaderBytes && swap32(sizeof_hdr) == kNifti1HeaderBytes;
  HG_CHECK((sizeof_hdr == kNifti1HeaderBytes || swapped) && std::memcmp(h.magic, "n+1", 4) == 0,
           where << "not a NIfTI-1 file (sizeof_hdr " << sizeof_hdr << ", magic not \"n+1\"); expected a .nii or .nii.gz image");
  if (swapped) swap_nifti_header(&h, /*is_nifti=*/1);
  HG_CHECK(h.dim[0] >= 1 && h.dim[0] <= 7, where << "dim[0] is " << h.dim[0] << "; expected 1 to 7 dimensions");
  return std::vector<int64_t>(h.dim + 1, h.dim + 1 + h.dim[0]);
}

void write_label_nifti(const std::string& path, const Tensor& labels, const Volume& like) {
  const std::string where = "write_label_nifti: " + path + ": ";
  HG_CHECK(labels.defined() && labels.device() == Device::CPU && labels.dtype() == kInt64,
           where << "labels must be a CPU int64 (D, H, W) tensor");
  check_like_shape(labels.shape(), like, where, "the label map");
  nifti_1_header h = derived_header(like, where, NIFTI_TYPE_UINT8, 8);
  const Tensor dense = labels.format_copy(MemoryFormat::Contiguous);  // core only: io does not link the ops layer
  std::vector<uint8_t> bytes(static_cast<size_t>(dense.numel()));
  uint8_t top = 0;
  for (int64_t i = 0; i < dense.numel(); ++i) {
    const int64_t v = dense.data<int64_t>()[i];
    HG_CHECK(v >= 0 && v <= 255, where << "label " << v << " at flat index " << i << "; expected a class in [0, 255] (uint8)");
    bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
    top = std::max(top, bytes[static_cast<size_t>(i)]);
  }
  h.cal_min = 0.0f;
  h.cal_max = static_cast<float>(top);
  h.intent_code = NIFTI_INTENT_LABEL;
  std::strncpy(h.descrip, "halfgrad-unet3d label map", sizeof h.descrip - 1);
  write_header_and_voxels(path, h, bytes.data(), bytes.size(), where);
}

void write_probabilities_nifti(const std::string& path, const Tensor& probs, const Volume& like) {
  const std::string where = "write_probabilities_nifti: " + path + ": ";
  HG_CHECK(probs.defined() && probs.device() == Device::CPU && probs.dtype() == kFloat32 && probs.dim() == 4,
           where << "probabilities must be a CPU float32 (C, D, H, W) tensor");
  check_like_shape(Shape(probs.shape().begin() + 1, probs.shape().end()), like, where, "the probabilities' (D, H, W)");
  HG_CHECK(probs.size(0) >= 1 && probs.size(0) <= 32767, where << probs.size(0) << " classes; expected 1 to 32767");
  nifti_1_header h = derived_header(like, where, NIFTI_TYPE_FLOAT32, 32);
  h.dim[0] = 4;
  h.dim[4] = static_cast<short>(probs.size(0));
  for (int d = 5; d < 8; ++d) h.dim[d] = 1;
  h.pixdim[4] = 1.0f;
  const Tensor dense = probs.format_copy(MemoryFormat::Contiguous);  // (C, D, H, W): the class is the slowest axis, as NIfTI's t
  for (int64_t i = 0; i < dense.numel(); ++i)
    HG_CHECK(std::isfinite(dense.data<float>()[i]),
             where << "probability at flat index " << i << " is " << dense.data<float>()[i] << "; expected finite values");
  h.cal_min = 0.0f;
  h.cal_max = 1.0f;
  h.intent_code = NIFTI_INTENT_NONE;
  std::strncpy(h.intent_name, "softmax", sizeof h.intent_name - 1);
  std::strncpy(h.descrip, "halfgrad-unet3d class probabilities", sizeof h.descrip - 1);
  write_header_and_voxels(path, h, dense.data<float>(), dense.nbytes(), where);
}

namespace {

bool geometry_close(double a, double b) { return std::fabs(a - b) <= kGeometryAtol + kGeometryRtol * std::fabs(b); }

std::string affine_rows(const std::array<double, 16>& m) {
  std::ostringstream os;
  os << std::setprecision(6);
  for (int r = 0; r < 3; ++r) {
    os << (r ? " " : "") << "[";
    for (int c = 0; c < 4; ++c) os << (c ? ", " : "") << m[static_cast<size_t>(4 * r + c)];
    os << "]";
  }
  return os.str();
}

std::string spacing_str(const std::array<double, 3>& s) {
  std::ostringstream os;
  os << std::setprecision(6) << "(" << s[0] << ", " << s[1] << ", " << s[2] << ") mm";
  return os.str();
}

}  // namespace

void check_same_geometry(const Volume& image, const std::string& image_path, const Volume& label,
                         const std::string& label_path, const std::string& where) {
  HG_CHECK(image.data.shape() == label.data.shape(),
           where << ": label " << label_path << " has shape (z, y, x) " << shape_str(label.data.shape()) << " but image "
                 << image_path << " has " << shape_str(image.data.shape()) << "; expected equal shapes");
  bool spacing_ok = true, affine_ok = true;
  for (size_t d = 0; d < 3; ++d) spacing_ok = spacing_ok && geometry_close(label.spacing[d], image.spacing[d]);
  for (size_t i = 0; i < 12; ++i) affine_ok = affine_ok && geometry_close(label.affine[i], image.affine[i]);
  HG_CHECK(spacing_ok && affine_ok,
           where << ": label " << label_path << " and image " << image_path << " are not on the same grid: "
                 << (spacing_ok ? "" : "voxel spacing (z, y, x) " + spacing_str(label.spacing) + " against " +
                                           spacing_str(image.spacing) + "; ")
                 << "affine (voxel -> mm, rows x y z) " << affine_rows(label.affine) << " against "
                 << affine_rows(image.affine) << "; expected them to agree within " << kGeometryAtol << " mm + "
                 << kGeometryRtol << " relative (a flipped, shifted or resampled label map would mislabel voxels)");
  if (image.has_qform && label.has_qform) {
    bool qform_ok = true;
    for (size_t i = 0; i < 12; ++i) qform_ok = qform_ok && geometry_close(label.qform[i], image.qform[i]);
    HG_CHECK(qform_ok, where << ": label " << label_path << " and image " << image_path
                             << " agree in their sforms but not in their qforms: " << affine_rows(label.qform)
                             << " against " << affine_rows(image.qform) << "; expected them to agree within "
                             << kGeometryAtol << " mm + " << kGeometryRtol
                             << " relative (a reader that takes the qform, as ITK may, would see the label flipped or "
                                "shifted)");
  }
}

Volume read_nifti(const std::string& path, const NiftiReadOptions& options) {
  check_file(path);
  FileInput raw(path, "read_nifti: " + path + ": ");
  Volume geom;
  RawVolume v = read_raw(raw, path, options, &geom);
  return to_image(std::move(v), geom, path);
}

Volume read_label_nifti(const std::string& path, int64_t num_classes, const NiftiReadOptions& options) {
  check_file(path);
  FileInput raw(path, "read_nifti: " + path + ": ");
  Volume geom;
  RawVolume v = read_raw(raw, path, options, &geom);
  return to_labels(std::move(v), geom, path, num_classes);
}

Volume read_nifti_buffer(const void* data, size_t n, const std::string& name, const NiftiReadOptions& options) {
  MemoryInput raw(data, n);
  Volume geom;
  RawVolume v = read_raw(raw, name, options, &geom);
  return to_image(std::move(v), geom, name);
}

Volume read_label_nifti_buffer(const void* data, size_t n, const std::string& name, int64_t num_classes,
                               const NiftiReadOptions& options) {
  MemoryInput raw(data, n);
  Volume geom;
  RawVolume v = read_raw(raw, name, options, &geom);
  return to_labels(std::move(v), geom, name, num_classes);
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
