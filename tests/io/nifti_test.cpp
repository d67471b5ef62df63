// Tests of io/nifti.h: files written by nifticlib in every datatype are read back exactly (with
// scaling, in (z, y, x) order), and every kind of bad file raises an Error that names the file.
#include "io/nifti.h"

#include <cmath>
#include <limits>

#include "tests/io/io_test_util.h"

using namespace halfgrad;
using namespace halfgrad::io;
using halfgrad::io::test::check_mentions;
using halfgrad::io::test::error_message;
using halfgrad::io::test::read_bytes;
using halfgrad::io::test::TempDir;
using halfgrad::io::test::write_bytes;
using halfgrad::io::test::poke;
using halfgrad::io::test::read_gz;
using halfgrad::io::test::write_gz;
using halfgrad::io::test::write_raw_nifti;

namespace {

// A 4 x 3 x 2 (x, y, z) volume: 24 distinct values so any transposition would show.
constexpr int kNx = 4, kNy = 3, kNz = 2, kN = kNx * kNy * kNz;
const std::vector<int> kDims3 = {3, kNx, kNy, kNz};

// Stored value of voxel i: distinct, and negative for signed types.
template <typename T>
std::vector<T> ramp() {
  std::vector<T> v(kN);
  for (int i = 0; i < kN; ++i) v[i] = static_cast<T>(std::numeric_limits<T>::is_signed ? i - 12 : i);
  return v;
}

template <typename T>
void check_round_trip(int datatype, const std::string& ext, float slope, float inter) {
  CAPTURE(nifti_datatype_string(datatype));
  TempDir dir;
  const std::string path = dir.file("vol" + ext);
  const std::vector<T> stored = ramp<T>();
  write_raw_nifti(path, kDims3, datatype, stored.data(), slope, inter);
  const Volume vol = read_nifti(path);
  REQUIRE(vol.data.shape() == Shape{kNz, kNy, kNx});  // (z, y, x)
  CHECK(vol.data.dtype() == kFloat32);
  const bool scaled = slope != 0.0f;  // NIfTI-1: slope 0 means "no scaling", intercept ignored too
  const float* got = vol.data.data<float>();
  for (int i = 0; i < kN; ++i) {
    const double want = scaled ? static_cast<double>(stored[i]) * slope + inter : static_cast<double>(stored[i]);
    CHECK(got[i] == doctest::Approx(want).epsilon(1e-6));
  }
}

}  // namespace

TEST_CASE("io nifti: read_nifti of every real datatype, .nii and .nii.gz, with scl_slope/scl_inter") {
  // (1, 0): stored values; (2.5, -3): scaled; (0, 7): slope 0 means no scaling at all.
  for (const std::string ext : {".nii", ".nii.gz"}) {
    for (const auto& [slope, inter] : {std::pair{1.0f, 0.0f}, {2.5f, -3.0f}, {0.0f, 7.0f}}) {
      CAPTURE(ext);
      CAPTURE(slope);
      CAPTURE(inter);
      check_round_trip<uint8_t>(NIFTI_TYPE_UINT8, ext, slope, inter);
      check_round_trip<int8_t>(NIFTI_TYPE_INT8, ext, slope, inter);
      check_round_trip<int16_t>(NIFTI_TYPE_INT16, ext, slope, inter);
      check_round_trip<uint16_t>(NIFTI_TYPE_UINT16, ext, slope, inter);
      check_round_trip<int32_t>(NIFTI_TYPE_INT32, ext, slope, inter);
      check_round_trip<uint32_t>(NIFTI_TYPE_UINT32, ext, slope, inter);
      check_round_trip<int64_t>(NIFTI_TYPE_INT64, ext, slope, inter);
      check_round_trip<uint64_t>(NIFTI_TYPE_UINT64, ext, slope, inter);
      check_round_trip<float>(NIFTI_TYPE_FLOAT32, ext, slope, inter);
      check_round_trip<double>(NIFTI_TYPE_FLOAT64, ext, slope, inter);
    }
  }
}

TEST_CASE("io nifti: big-endian int16 file is byte-swapped on read") {
  TempDir dir;
  const std::string path = dir.file("big.nii");
  std::vector<int16_t> stored(kN);
  for (int i = 0; i < kN; ++i) stored[i] = static_cast<int16_t>(300 * i - 3000);  // both bytes non-zero
  write_raw_nifti(path, kDims3, NIFTI_TYPE_INT16, stored.data());
  // nifticlib only writes native order: swap header and data by hand.
  std::string bytes = read_bytes(path);
  nifti_1_header hdr;
  std::memcpy(&hdr, bytes.data(), sizeof(hdr));
  const size_t offset = static_cast<size_t>(hdr.vox_offset);
  swap_nifti_header(&hdr, 1);
  std::memcpy(bytes.data(), &hdr, sizeof(hdr));
  nifti_swap_2bytes(kN, bytes.data() + offset);
  write_bytes(path, bytes);
  const Volume vol = read_nifti(path);
  for (int i = 0; i < kN; ++i) CHECK(vol.data.data<float>()[i] == stored[i]);
}

TEST_CASE("io nifti: write_nifti then read_nifti keeps values, shape (z,y,x), spacing and affine") {
  TempDir dir;
  Generator gen(3);
  Volume vol{Tensor::randn({5, 6, 7}, gen), {2.0, 1.5, 0.75}, {}, {}};
  vol.affine = {0.75, 0, 0, -10, 0, 1.5, 0, 20, 0, 0, 2.0, -30, 0, 0, 0, 1};
  for (const std::string name : {"w.nii", "w.nii.gz"}) {
    write_nifti(dir.file(name), vol);
    const Volume back = read_nifti(dir.file(name));
    REQUIRE(back.data.shape() == Shape{5, 6, 7});
    CHECK(back.data.to_float_vector() == vol.data.to_float_vector());
    for (int d = 0; d < 3; ++d) CHECK(back.spacing[d] == doctest::Approx(vol.spacing[d]));
    for (int i = 0; i < 16; ++i) CHECK(back.affine[i] == doctest::Approx(vol.affine[i]));
  }
  // int64 labels are written as float32 values.
  Volume labels{Tensor::from_labels({0, 1, 2, 3, 2, 1}, {1, 2, 3}), {1, 1, 1}, {}, {}};
  write_nifti(dir.file("lab.nii.gz"), labels);
  CHECK(read_label_nifti(dir.file("lab.nii.gz")).data.to_double_vector() == labels.data.to_double_vector());
}

TEST_CASE("io nifti: read_label_nifti reads integer-valued float32 labels exactly as int64") {
  TempDir dir;
  const std::vector<float> stored = {0.0f, 1.0f, 2.0f, -3.0f, 16777216.0f, 7.0f, 0.0f, 1.0f};
  write_raw_nifti(dir.file("lab.nii.gz"), {3, 8, 1, 1}, NIFTI_TYPE_FLOAT32, stored.data());
  const Volume lab = read_label_nifti(dir.file("lab.nii.gz"));
  CHECK(lab.data.dtype() == kInt64);
  CHECK(lab.data.shape() == Shape{1, 1, 8});
  const std::vector<double> want = {0, 1, 2, -3, 16777216, 7, 0, 1};
  CHECK(lab.data.to_double_vector() == want);
  // int32 labels above 2^24 are exact too (float32 would round 16777217 to 16777216).
  const std::vector<int32_t> big = {16777217, 0};
  write_raw_nifti(dir.file("big.nii"), {3, 2, 1, 1}, NIFTI_TYPE_INT32, big.data());
  CHECK(read_label_nifti(dir.file("big.nii")).data.data<int64_t>()[0] == 16777217);
}

TEST_CASE("io nifti: uint8 label map with scl_slope 0.5 is an error naming the file, voxel (i, j, k) and value") {
  // Stored 0, 1, 2, ... x 0.5: rounding would turn class 2 into 1 and class 1 into background.
  TempDir dir;
  std::vector<uint8_t> stored(kN);
  for (int i = 0; i < kN; ++i) stored[i] = static_cast<uint8_t>(i % 3);
  write_raw_nifti(dir.file("half.nii.gz"), kDims3, NIFTI_TYPE_UINT8, stored.data(), 0.5f, 0.0f);
  check_mentions(error_message([&] { read_label_nifti(dir.file("half.nii.gz")); }),
                 {"read_label_nifti: " + dir.file("half.nii.gz"), "voxel (i, j, k) = (1, 0, 0)", "holds 0.5",
                  "expected an integer class label", "scl_slope 0.5"});
  // Float labels off an integer, anywhere: voxel 17 = (i, j, k) = (1, 1, 1).
  std::vector<float> f32(kN, 1.0f);
  f32[17] = 1.0001f;
  write_raw_nifti(dir.file("noisy.nii"), kDims3, NIFTI_TYPE_FLOAT32, f32.data());
  check_mentions(error_message([&] { read_label_nifti(dir.file("noisy.nii")); }),
                 {dir.file("noisy.nii"), "voxel (i, j, k) = (1, 1, 1)", "holds 1.0001", "expected an integer class label"});
}

TEST_CASE("io nifti: read_label_nifti with num_classes 3 refuses labels outside [0, 3), naming voxel (i, j, k)") {
  TempDir dir;
  std::vector<int16_t> stored(kN, 2);
  stored[kNx * kNy + 2] = 3;  // (i, j, k) = (2, 0, 1)
  write_raw_nifti(dir.file("lab.nii.gz"), kDims3, NIFTI_TYPE_INT16, stored.data());
  check_mentions(error_message([&] { read_label_nifti(dir.file("lab.nii.gz"), 3); }),
                 {dir.file("lab.nii.gz"), "voxel (i, j, k) = (2, 0, 1)", "holds 3", "expected a class in [0, 3)"});
  stored[kNx * kNy + 2] = -1;
  write_raw_nifti(dir.file("neg.nii"), kDims3, NIFTI_TYPE_INT16, stored.data());
  check_mentions(error_message([&] { read_label_nifti(dir.file("neg.nii"), 3); }),
                 {dir.file("neg.nii"), "(2, 0, 1)", "holds -1", "expected a class in [0, 3)"});
  CHECK(read_label_nifti(dir.file("neg.nii")).data.data<int64_t>()[kNx * kNy + 2] == -1);  // no range asked
}

TEST_CASE("io nifti: 4-D with trailing extent 1 reads as 3-D; 4-D series and 2-D images are errors") {
  TempDir dir;
  const std::vector<float> values(kN * 3, 1.0f);
  write_raw_nifti(dir.file("t1.nii"), {4, kNx, kNy, kNz, 1}, NIFTI_TYPE_FLOAT32, values.data());
  CHECK(read_nifti(dir.file("t1.nii")).data.shape() == Shape{kNz, kNy, kNx});
  write_raw_nifti(dir.file("t3.nii"), {4, kNx, kNy, kNz, 3}, NIFTI_TYPE_FLOAT32, values.data());
  check_mentions(error_message([&] { read_nifti(dir.file("t3.nii")); }),
                 {dir.file("t3.nii"), "4-D", "[4, 3, 2, 3]", "expected a 3-D volume"});
  write_raw_nifti(dir.file("flat.nii"), {2, kNx, kNy}, NIFTI_TYPE_FLOAT32, values.data());
  check_mentions(error_message([&] { read_nifti(dir.file("flat.nii")); }),
                 {dir.file("flat.nii"), "2-D", "expected a 3-D volume"});
}

TEST_CASE("io nifti: missing file, wrong name, not NIfTI, NIfTI-2 and gzip-named-.nii are errors naming the file") {
  TempDir dir;
  check_mentions(error_message([&] { read_nifti(dir.file("absent.nii.gz")); }),
                 {dir.file("absent.nii.gz"), "file not found"});
  write_bytes(dir.file("notes.txt"), "hello");
  check_mentions(error_message([&] { read_nifti(dir.file("notes.txt")); }),
                 {dir.file("notes.txt"), "expected a file name ending in .nii or .nii.gz"});
  write_bytes(dir.file("short.nii"), "not an image");
  check_mentions(error_message([&] { read_nifti(dir.file("short.nii")); }),
                 {dir.file("short.nii"), "holds only 12 bytes", "348-byte NIfTI-1 header"});
  write_bytes(dir.file("junk.nii"), std::string(1000, 'x'));
  check_mentions(error_message([&] { read_nifti(dir.file("junk.nii")); }),
                 {dir.file("junk.nii"), "not a NIfTI-1 file: sizeof_hdr", "expected 348"});

  // A valid file with its magic wiped reads as ANALYZE 7.5, which is refused.
  const std::vector<float> values(kN, 1.0f);
  write_raw_nifti(dir.file("ok.nii"), kDims3, NIFTI_TYPE_FLOAT32, values.data());
  std::string bytes = read_bytes(dir.file("ok.nii"));
  std::string analyze = bytes;
  std::memset(analyze.data() + 344, 0, 4);
  write_bytes(dir.file("analyze.nii"), analyze);
  check_mentions(error_message([&] { read_nifti(dir.file("analyze.nii")); }),
                 {dir.file("analyze.nii"), "magic", "expected NIfTI-1"});
  std::string nifti2 = bytes;
  const int32_t sizeof_nifti2 = 540;
  std::memcpy(nifti2.data(), &sizeof_nifti2, 4);
  write_bytes(dir.file("two.nii"), nifti2);
  check_mentions(error_message([&] { read_nifti(dir.file("two.nii")); }), {dir.file("two.nii"), "NIfTI-2"});

  // vox_offset below the header: nifticlib would silently read from byte 348 instead.
  for (float off : {0.0f, -100.0f}) {
    std::string shifted = bytes;
    std::memcpy(shifted.data() + 108, &off, 4);
    write_bytes(dir.file("voxoff.nii"), shifted);
    check_mentions(error_message([&] { read_nifti(dir.file("voxoff.nii")); }),
                   {dir.file("voxoff.nii"), "vox_offset", "expected an integer from 352 to 67108864"});
  }

  write_raw_nifti(dir.file("packed.nii.gz"), kDims3, NIFTI_TYPE_FLOAT32, values.data());
  write_bytes(dir.file("packed.nii"), read_bytes(dir.file("packed.nii.gz")));
  check_mentions(error_message([&] { read_nifti(dir.file("packed.nii")); }),
                 {dir.file("packed.nii"), "gzip-compressed", "expected the name to end in .nii.gz"});
}

TEST_CASE("io nifti: complex and RGB datatypes are unsupported, naming the file and the datatype") {
  TempDir dir;
  const std::vector<float> values(kN * 2, 0.0f);  // complex64: 8 bytes per voxel; RGB24: 3
  write_raw_nifti(dir.file("c.nii"), kDims3, NIFTI_TYPE_COMPLEX64, values.data());
  check_mentions(error_message([&] { read_nifti(dir.file("c.nii")); }),
                 {dir.file("c.nii"), "unsupported datatype 32", "COMPLEX64", "expected a real scalar type"});
  write_raw_nifti(dir.file("rgb.nii.gz"), kDims3, NIFTI_TYPE_RGB24, values.data());
  check_mentions(error_message([&] { read_label_nifti(dir.file("rgb.nii.gz")); }),
                 {dir.file("rgb.nii.gz"), "unsupported datatype 128", "RGB24"});
}

TEST_CASE("io nifti: NaN, inf and float32 overflow in the data are errors naming the file and voxel") {
  TempDir dir;
  std::vector<float> f32(kN, 1.0f);
  f32[kNx * kNy + 2 * kNx + 1] = std::nanf("");  // voxel (z, y, x) = (1, 2, 1)
  write_raw_nifti(dir.file("nan.nii.gz"), kDims3, NIFTI_TYPE_FLOAT32, f32.data());
  check_mentions(error_message([&] { read_nifti(dir.file("nan.nii.gz")); }),
                 {dir.file("nan.nii.gz"), "(1, 2, 1)", "nan", "expected finite image data"});
  std::vector<double> f64(kN, 1.0);
  f64[3] = -std::numeric_limits<double>::infinity();
  write_raw_nifti(dir.file("inf.nii"), kDims3, NIFTI_TYPE_FLOAT64, f64.data());
  check_mentions(error_message([&] { read_label_nifti(dir.file("inf.nii")); }),
                 {dir.file("inf.nii"), "(i, j, k) = (3, 0, 0)", "-inf", "expected an integer class label"});
  f64[3] = 1e300;
  write_raw_nifti(dir.file("big.nii"), kDims3, NIFTI_TYPE_FLOAT64, f64.data());
  check_mentions(error_message([&] { read_nifti(dir.file("big.nii")); }), {dir.file("big.nii"), "overflows float32"});
  const std::vector<int16_t> i16(kN, 1000);
  write_raw_nifti(dir.file("scaled.nii"), kDims3, NIFTI_TYPE_INT16, i16.data(), 1e37f, 0.0f);
  check_mentions(error_message([&] { read_nifti(dir.file("scaled.nii")); }),
                 {dir.file("scaled.nii"), "(0, 0, 0)", "overflows float32"});
}

TEST_CASE("io nifti: truncated .nii and .nii.gz files are errors, never crashes") {
  TempDir dir;
  // Incompressible data, so that cutting the .gz in half cuts the voxel data.
  Generator gen(7);
  const std::vector<float> values = Tensor::randn({16, 16, 16}, gen).to_float_vector();
  for (const std::string name : {"cut.nii", "cut.nii.gz"}) {
    CAPTURE(name);
    write_raw_nifti(dir.file(name), {3, 16, 16, 16}, NIFTI_TYPE_FLOAT32, values.data());
    const std::string whole = read_bytes(dir.file(name));
    for (const size_t keep : {whole.size() / 2, whole.size() - 1, size_t{400}, size_t{200}, size_t{10}, size_t{0}}) {
      CAPTURE(keep);
      write_bytes(dir.file(name), whole.substr(0, keep));
      const std::string msg = error_message([&] { read_nifti(dir.file(name)); });
      check_mentions(msg, {dir.file(name), "expected"});
    }
  }
  // Cut inside the 8-byte gzip trailer (CRC-32, length) of a compressible volume: every voxel byte is
  // still there, and gzread alone would not notice.
  const std::vector<float> ramp(16 * 16 * 16, 3.0f);
  write_raw_nifti(dir.file("trailer.nii.gz"), {3, 16, 16, 16}, NIFTI_TYPE_FLOAT32, ramp.data());
  const std::string gz = read_bytes(dir.file("trailer.nii.gz"));
  for (const size_t cut : {size_t{1}, size_t{4}, size_t{8}}) {
    CAPTURE(cut);
    write_bytes(dir.file("trailer.nii.gz"), gz.substr(0, gz.size() - cut));
    check_mentions(error_message([&] { read_nifti(dir.file("trailer.nii.gz")); }),
                   {dir.file("trailer.nii.gz"), "gzip", "expected an intact .nii.gz file"});
  }
  write_raw_nifti(dir.file("cut.nii"), {3, 16, 16, 16}, NIFTI_TYPE_FLOAT32, values.data());
  write_bytes(dir.file("cut.nii"), read_bytes(dir.file("cut.nii")).substr(0, 352 + 100));
  check_mentions(error_message([&] { read_nifti(dir.file("cut.nii")); }),
                 {dir.file("cut.nii"), "file is 452 bytes but vox_offset 352 + 4096 voxels x 4 bytes = 16736",
                  "truncated or corrupt"});
}

// ---- crafted headers: every field the reader relies on is checked before nifticlib reads it -----------

namespace {

// A valid 4 x 3 x 2 float32 .nii file's bytes (header at 0, voxels at 352).
std::string valid_nii_bytes(const TempDir& dir) {
  const std::vector<float> values(kN, 1.0f);
  write_raw_nifti(dir.file("valid.nii"), kDims3, NIFTI_TYPE_FLOAT32, values.data());
  const std::string bytes = read_bytes(dir.file("valid.nii"));
  REQUIRE(bytes.size() == 352 + kN * 4);
  return bytes;
}

// NIfTI-1 header offsets (nifti1.h).
constexpr size_t kDimAt = 40, kDatatypeAt = 70, kBitpixAt = 72, kPixdimAt = 76, kVoxOffsetAt = 108, kSlopeAt = 112,
                 kInterAt = 116, kMagicAt = 344;

}  // namespace

TEST_CASE("io nifti: vox_offset 2^31 and above, above 64 MiB, or not an integer, is an error (nifticlib would read from 348)") {
  TempDir dir;
  const std::string good = valid_nii_bytes(dir);
  for (float off : {2147483648.0f, 4294967296.0f, 1e30f, 352.5f, 67108880.0f, std::numeric_limits<float>::infinity()}) {
    CAPTURE(off);
    std::string bad = good;
    poke(bad, kVoxOffsetAt, off);
    write_bytes(dir.file("far.nii"), bad);
    check_mentions(error_message([&] { read_nifti(dir.file("far.nii")); }),
                   {dir.file("far.nii"), "vox_offset is", "expected an integer from 352 to 67108864"});
    write_gz(dir.file("far.nii.gz"), bad);
    check_mentions(error_message([&] { read_nifti(dir.file("far.nii.gz")); }), {dir.file("far.nii.gz"), "vox_offset is"});
  }
  std::string bad = good;
  poke(bad, kVoxOffsetAt, 2147483648.0f);
  write_bytes(dir.file("far.nii"), bad);
  check_mentions(error_message([&] { read_nifti(dir.file("far.nii")); }), {"vox_offset is 2147483648;"});
}

TEST_CASE("io nifti: bitpix, pixdim, scl_slope/scl_inter and the ni1 magic are checked in the raw header") {
  TempDir dir;
  const std::string good = valid_nii_bytes(dir);
  auto check_bad = [&](const std::string& bytes, const std::vector<std::string>& parts) {
    write_bytes(dir.file("bad.nii"), bytes);
    std::vector<std::string> all = parts;
    all.push_back(dir.file("bad.nii"));
    check_mentions(error_message([&] { read_nifti(dir.file("bad.nii")); }), all);
  };
  std::string b = good;
  poke<int16_t>(b, kBitpixAt, 16);
  check_bad(b, {"bitpix is 16 but datatype FLOAT32 has 32 bits"});
  b = good;
  poke(b, kPixdimAt + 4 * 2, std::nanf(""));
  check_bad(b, {"pixdim[2] (the voxel size) is nan", "expected a finite non-zero size"});
  b = good;
  poke(b, kPixdimAt + 4 * 3, 0.0f);
  check_bad(b, {"pixdim[3] (the voxel size) is 0"});
  b = good;
  poke(b, kSlopeAt, std::numeric_limits<float>::infinity());
  check_bad(b, {"scl_slope inf", "expected finite scaling"});
  b = good;
  poke(b, kInterAt, std::nanf(""));
  check_bad(b, {"scl_inter nan", "expected finite scaling"});
  b = good;
  std::memcpy(b.data() + kMagicAt, "ni1", 4);
  check_bad(b, {"magic is \"ni1\"", "expected \"n+1\""});
  b = good;
  poke<int16_t>(b, kDimAt + 2 * 2, 0);
  check_bad(b, {"extents [4, 0, 2] include 0", "expected positive extents"});
  b = good;
  poke<int16_t>(b, kDimAt, 9);
  check_bad(b, {"dim[0] is 9", "expected 3 to 7 dimensions"});
  b = good;
  poke<int16_t>(b, kDatatypeAt, 1536);  // FLOAT128
  check_bad(b, {"unsupported datatype 1536"});
}

TEST_CASE("io nifti: a header claiming 256^3 voxels over a 24-voxel file is an error before allocating them") {
  TempDir dir;
  std::string big = valid_nii_bytes(dir);
  for (int d = 1; d <= 3; ++d) poke<int16_t>(big, kDimAt + 2 * d, 256);
  // Plain .nii: the file size gives it away before anything is read.
  write_bytes(dir.file("claim.nii"), big);
  check_mentions(error_message([&] { read_nifti(dir.file("claim.nii")); }),
                 {dir.file("claim.nii"), "file is 448 bytes but vox_offset 352 + 16777216 voxels x 4 bytes = 67109216",
                  "truncated or corrupt"});
  // .nii.gz: only inflating tells; the stream ends after 96 of the 67108864 bytes.
  write_gz(dir.file("claim.nii.gz"), big);
  check_mentions(error_message([&] { read_nifti(dir.file("claim.nii.gz")); }),
                 {dir.file("claim.nii.gz"), "truncated or corrupt: 96 bytes of voxel data from offset 352",
                  "expected 67108864", "[256, 256, 256]"});
  // The other way round: more data than the header says, found at the first extra byte.
  std::string longer = valid_nii_bytes(dir) + std::string(1 << 20, '\0');
  write_gz(dir.file("long.nii.gz"), longer);
  check_mentions(error_message([&] { read_nifti(dir.file("long.nii.gz")); }),
                 {dir.file("long.nii.gz"), "holds more data than its header describes", "after decompression"});
  write_bytes(dir.file("long.nii"), longer);
  check_mentions(error_message([&] { read_nifti(dir.file("long.nii")); }),
                 {dir.file("long.nii"), "but vox_offset 352 + 24 voxels x 4 bytes = 448"});
}

TEST_CASE("io nifti: a header claiming 32767^3 voxels (the int16 maximum) is refused by max_voxels before any allocation") {
  // NIfTI-1 extents are int16, so 100000^3 cannot even be written: 32767^3 (3.5e13 voxels, 140 TB of
  // float32) is the largest claim a header can make, and it must fail on the count alone.
  TempDir dir;
  std::string huge = valid_nii_bytes(dir);
  for (int d = 1; d <= 3; ++d) poke<int16_t>(huge, kDimAt + 2 * d, 32767);
  write_gz(dir.file("huge.nii.gz"), huge);
  check_mentions(error_message([&] { read_nifti(dir.file("huge.nii.gz")); }),
                 {dir.file("huge.nii.gz"), "35181150961663 voxels", "the limit is 268435456",
                  "NiftiReadOptions::max_voxels"});
  write_bytes(dir.file("huge.nii"), huge);
  check_mentions(error_message([&] { read_label_nifti(dir.file("huge.nii")); }),
                 {dir.file("huge.nii"), "35181150961663 voxels"});
  // The limit is the caller's to set: 24 voxels pass at 24 and fail at 23.
  const std::string ok = valid_nii_bytes(dir);
  NiftiReadOptions o;
  o.max_voxels = 24;
  CHECK(read_nifti_buffer(ok.data(), ok.size(), "mem.nii", o).data.numel() == 24);
  o.max_voxels = 23;
  check_mentions(error_message([&] { read_nifti_buffer(ok.data(), ok.size(), "mem.nii", o); }),
                 {"read_nifti: mem.nii:", "24 voxels; the limit is 23"});
}

TEST_CASE("io nifti: read_nifti_buffer reads .nii and .nii.gz bytes like the file reader") {
  TempDir dir;
  const std::vector<float> values = ramp<float>();
  write_raw_nifti(dir.file("v.nii.gz"), kDims3, NIFTI_TYPE_FLOAT32, values.data());
  const std::string gz = read_bytes(dir.file("v.nii.gz"));
  const Volume from_file = read_nifti(dir.file("v.nii.gz"));
  const Volume from_gz = read_nifti_buffer(gz.data(), gz.size(), "v.nii.gz");
  const std::string plain = read_gz(dir.file("v.nii.gz"));
  const Volume from_plain = read_nifti_buffer(plain.data(), plain.size(), "v.nii");
  CHECK(from_gz.data.to_double_vector() == from_file.data.to_double_vector());
  CHECK(from_plain.data.to_double_vector() == from_file.data.to_double_vector());
  CHECK(from_gz.affine == from_file.affine);
  check_mentions(error_message([&] { read_nifti_buffer(gz.data(), gz.size(), "v.nii"); }),
                 {"v.nii", "gzip-compressed but named .nii"});
}

TEST_CASE("io nifti: write_nifti errors name the file") {
  TempDir dir;
  Volume vol{Tensor::zeros({2, 2, 2}), {1, 1, 1}, {}, {}};
  check_mentions(error_message([&] { write_nifti(dir.file("no/such/dir/x.nii.gz"), vol); }),
                 {dir.file("no/such/dir/x.nii.gz"), "does not exist"});
  check_mentions(error_message([&] { write_nifti(dir.file("x.img"), vol); }),
                 {dir.file("x.img"), "expected a file name ending in .nii or .nii.gz"});
  Volume flat{Tensor::zeros({2, 2}), {1, 1, 1}, {}, {}};
  check_mentions(error_message([&] { write_nifti(dir.file("flat.nii"), flat); }),
                 {dir.file("flat.nii"), "[2, 2]", "expected a 3-D (D, H, W) tensor"});
}
