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
  Volume vol{Tensor::randn({5, 6, 7}, gen), {2.0, 1.5, 0.75}, {}};
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
  Volume labels{Tensor::from_labels({0, 1, 2, 3, 2, 1}, {1, 2, 3}), {1, 1, 1}, {}};
  write_nifti(dir.file("lab.nii.gz"), labels);
  CHECK(read_label_nifti(dir.file("lab.nii.gz")).data.to_double_vector() == labels.data.to_double_vector());
}

TEST_CASE("io nifti: read_label_nifti rounds float labels to the nearest integer, ties to even") {
  TempDir dir;
  const std::vector<float> stored = {0.0f, 0.9999f, 1.0001f, 2.0f, 1.5f, 2.5f, -0.4f, 2.49f};
  write_raw_nifti(dir.file("lab.nii.gz"), {3, 8, 1, 1}, NIFTI_TYPE_FLOAT32, stored.data());
  const Volume lab = read_label_nifti(dir.file("lab.nii.gz"));
  CHECK(lab.data.dtype() == kInt64);
  CHECK(lab.data.shape() == Shape{1, 1, 8});
  const std::vector<double> want = {0, 1, 1, 2, 2, 2, 0, 2};
  CHECK(lab.data.to_double_vector() == want);
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
                   {dir.file("voxoff.nii"), "vox_offset", "expected at least 352"});
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
                 {dir.file("inf.nii"), "(0, 0, 3)", "inf", "expected finite"});
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
                 {dir.file("cut.nii"), "truncated or corrupt: 100 bytes of voxel data from offset 352", "expected 16384"});
}

TEST_CASE("io nifti: write_nifti errors name the file") {
  TempDir dir;
  Volume vol{Tensor::zeros({2, 2, 2}), {1, 1, 1}, {}};
  check_mentions(error_message([&] { write_nifti(dir.file("no/such/dir/x.nii.gz"), vol); }),
                 {dir.file("no/such/dir/x.nii.gz"), "does not exist"});
  check_mentions(error_message([&] { write_nifti(dir.file("x.img"), vol); }),
                 {dir.file("x.img"), "expected a file name ending in .nii or .nii.gz"});
  Volume flat{Tensor::zeros({2, 2}), {1, 1, 1}, {}};
  check_mentions(error_message([&] { write_nifti(dir.file("flat.nii"), flat); }),
                 {dir.file("flat.nii"), "[2, 2]", "expected a 3-D (D, H, W) tensor"});
}
