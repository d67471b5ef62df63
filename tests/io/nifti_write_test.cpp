// Tests of io/nifti.h's writers with a reference header (write_label_nifti, write_probabilities_nifti):
// inputs written by nifticlib with qform only, sform only, both, neither and a non-unit scl_slope
// are read, a result written with their header, and both files' headers read back with nifticlib
// (nifti_read_header) and compared field by field, bit for bit; the voxels are read back with
// nifti_image_read. Also read_nifti_extents, and the writers' errors (no temp file left behind).
#include <doctest/doctest.h>
#include <nifti1_io.h>

#include <cstring>
#include <filesystem>

#include "io/nifti.h"
#include "tests/io/io_test_util.h"

using namespace halfgrad;
using namespace halfgrad::io;
using halfgrad::io::test::check_mentions;
using halfgrad::io::test::error_message;
using halfgrad::io::test::TempDir;

namespace {

constexpr int kNx = 5, kNy = 4, kNz = 3, kN = kNx * kNy * kNz;

enum class Xform { QformOnly, SformOnly, Both, Neither };

// A 5 x 4 x 3 float32 image with pixdim (0.7, 1.3, 2.9) in microns, a rotated qform and/or a sheared
// sform, and scl_slope/scl_inter.
void write_input(const std::string& path, Xform xf, float slope, float inter) {
  int dims[8] = {3, kNx, kNy, kNz, 1, 1, 1, 1};
  nifti_image* nim = nifti_make_new_nim(dims, NIFTI_TYPE_FLOAT32, 1);
  REQUIRE(nim != nullptr);
  for (int i = 0; i < kN; ++i) static_cast<float*>(nim->data)[i] = static_cast<float>(i) * 0.25f - 3.0f;
  nim->nifti_type = NIFTI_FTYPE_NIFTI1_1;
  nim->dx = nim->pixdim[1] = 0.7f;
  nim->dy = nim->pixdim[2] = 1.3f;
  nim->dz = nim->pixdim[3] = 2.9f;
  nim->xyz_units = NIFTI_UNITS_MICRON;
  nim->time_units = NIFTI_UNITS_SEC;
  nim->scl_slope = slope;
  nim->scl_inter = inter;
  nim->qform_code = nim->sform_code = 0;
  if (xf == Xform::QformOnly || xf == Xform::Both) {
    nim->qform_code = NIFTI_XFORM_SCANNER_ANAT;
    nim->quatern_b = 0.1f;
    nim->quatern_c = -0.3f;
    nim->quatern_d = 0.2f;
    nim->qoffset_x = -91.25f;
    nim->qoffset_y = 17.5f;
    nim->qoffset_z = 3.0e-3f;
    nim->qfac = -1.0f;
  }
  if (xf == Xform::SformOnly || xf == Xform::Both) {
    nim->sform_code = NIFTI_XFORM_MNI_152;
    const float s[3][4] = {{-0.7f, 0.01f, 0.0f, 90.1f}, {0.02f, 1.3f, -0.05f, -126.3f}, {0.0f, 0.03f, 2.9f, -72.7f}};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) nim->sto_xyz.m[r][c] = s[r][c];
  }
  REQUIRE(nifti_set_filenames(nim, path.c_str(), 0, 1) == 0);
  nifti_image_write(nim);
  nifti_image_free(nim);
  REQUIRE(std::filesystem::is_regular_file(path));
}

nifti_1_header header_of(const std::string& path) {
  int swapped = 0;
  nifti_1_header* h = nifti_read_header(path.c_str(), &swapped, 1);
  REQUIRE(h != nullptr);
  nifti_1_header out = *h;
  free(h);
  return out;
}

#define CHECK_SAME_BITS(a, b, field) CHECK_MESSAGE(std::memcmp(&(a).field, &(b).field, sizeof((a).field)) == 0, #field)

void check_same_geometry(const nifti_1_header& in, const nifti_1_header& out, bool same_dim) {
  if (same_dim) {
    CHECK_SAME_BITS(in, out, dim);
    CHECK_SAME_BITS(in, out, pixdim);
  }
  for (int d = 1; d <= 3; ++d) CHECK(in.dim[d] == out.dim[d]);
  for (int d = 0; d <= 3; ++d) CHECK_MESSAGE(std::memcmp(&in.pixdim[d], &out.pixdim[d], 4) == 0, "pixdim[" << d << "]");
  CHECK_SAME_BITS(in, out, xyzt_units);
  CHECK_SAME_BITS(in, out, qform_code);
  CHECK_SAME_BITS(in, out, sform_code);
  CHECK_SAME_BITS(in, out, quatern_b);
  CHECK_SAME_BITS(in, out, quatern_c);
  CHECK_SAME_BITS(in, out, quatern_d);
  CHECK_SAME_BITS(in, out, qoffset_x);
  CHECK_SAME_BITS(in, out, qoffset_y);
  CHECK_SAME_BITS(in, out, qoffset_z);
  CHECK_SAME_BITS(in, out, srow_x);
  CHECK_SAME_BITS(in, out, srow_y);
  CHECK_SAME_BITS(in, out, srow_z);
  CHECK_SAME_BITS(in, out, slice_code);
  CHECK_SAME_BITS(in, out, dim_info);
}

Tensor some_labels() {
  std::vector<int64_t> v(kN);
  for (int i = 0; i < kN; ++i) v[i] = (i * 7) % 4;
  return Tensor::from_labels(v, {kNz, kNy, kNx});
}

}  // namespace

TEST_CASE("io nifti: write_label_nifti keeps the input's geometry bit for bit (qform, sform, both, neither; scaled)") {
  TempDir dir;
  for (const std::string ext : {".nii", ".nii.gz"})
    for (Xform xf : {Xform::QformOnly, Xform::SformOnly, Xform::Both, Xform::Neither})
      for (const auto& [slope, inter] : {std::pair{1.0f, 0.0f}, {2.5f, -7.0f}, {0.0f, 0.0f}}) {
        CAPTURE(ext);
        CAPTURE(static_cast<int>(xf));
        CAPTURE(slope);
        const std::string in = dir.file("in" + ext), out = dir.file("out" + ext);
        write_input(in, xf, slope, inter);
        const Volume vol = read_nifti(in);
        REQUIRE(vol.header.size() == 348u);
        const Tensor labels = some_labels();
        write_label_nifti(out, labels, vol);
        const nifti_1_header hi = header_of(in), ho = header_of(out);
        check_same_geometry(hi, ho, /*same_dim=*/true);
        CHECK(ho.datatype == NIFTI_TYPE_UINT8);
        CHECK(ho.bitpix == 8);
        CHECK(ho.scl_slope == 1.0f);
        CHECK(ho.scl_inter == 0.0f);
        CHECK(ho.cal_min == 0.0f);
        CHECK(ho.cal_max == 3.0f);
        CHECK(ho.intent_code == NIFTI_INTENT_LABEL);
        CHECK(ho.vox_offset == 352.0f);
        CHECK(std::string(ho.magic) == "n+1");
        // nifticlib reads the voxels back as uint8, in the (z, y, x) order of the tensor.
        nifti_image* nim = nifti_image_read(out.c_str(), 1);
        REQUIRE(nim != nullptr);
        REQUIRE(nim->nvox == static_cast<size_t>(kN));
        int mismatches = 0;
        for (int i = 0; i < kN; ++i) mismatches += static_cast<uint8_t*>(nim->data)[i] != labels.data<int64_t>()[i];
        CHECK(mismatches == 0);
        // And the two files map voxels to the same world points (nifticlib's qto/sto).
        nifti_image* a = nifti_image_read(in.c_str(), 0);
        REQUIRE(a != nullptr);
        CHECK(std::memcmp(&a->qto_xyz, &nim->qto_xyz, sizeof(mat44)) == 0);
        CHECK(std::memcmp(&a->sto_xyz, &nim->sto_xyz, sizeof(mat44)) == 0);
        nifti_image_free(a);
        nifti_image_free(nim);
        // Our own reader agrees too.
        const Volume back = read_label_nifti(out, 4);
        CHECK(back.affine == vol.affine);
        CHECK(back.spacing == vol.spacing);
      }
  // No temporary file is left in the folder.
  for (const auto& e : std::filesystem::directory_iterator(dir.file("")))
    CHECK_MESSAGE(e.path().filename().string().find(".tmp") == std::string::npos, e.path().string());
}

TEST_CASE("io nifti: write_probabilities_nifti writes (C, D, H, W) float32 as 4-D with dim[4] = C and the geometry") {
  TempDir dir;
  const std::string in = dir.file("in.nii.gz"), out = dir.file("p.nii.gz");
  write_input(in, Xform::Both, 1.0f, 0.0f);
  const Volume vol = read_nifti(in);
  Tensor probs = Tensor::empty({3, kNz, kNy, kNx}, kFloat32);
  for (int64_t i = 0; i < probs.numel(); ++i) probs.data<float>()[i] = static_cast<float>(i) / probs.numel();
  write_probabilities_nifti(out, probs, vol);
  const nifti_1_header hi = header_of(in), ho = header_of(out);
  check_same_geometry(hi, ho, /*same_dim=*/false);
  CHECK(ho.dim[0] == 4);
  CHECK(ho.dim[4] == 3);
  CHECK(ho.datatype == NIFTI_TYPE_FLOAT32);
  CHECK(ho.bitpix == 32);
  CHECK(std::string(ho.intent_name) == "softmax");
  nifti_image* nim = nifti_image_read(out.c_str(), 1);
  REQUIRE(nim != nullptr);
  REQUIRE(nim->nvox == static_cast<size_t>(probs.numel()));
  CHECK(std::memcmp(nim->data, probs.data<float>(), probs.nbytes()) == 0);  // class slowest, x fastest
  nifti_image_free(nim);
}

TEST_CASE("io nifti: read_nifti_extents reports a 4-D file's volumes; the writers' errors name the file") {
  TempDir dir;
  const std::vector<float> two(2 * kN, 1.0f);
  halfgrad::io::test::write_raw_nifti(dir.file("two.nii"), {4, kNx, kNy, kNz, 2}, NIFTI_TYPE_FLOAT32, two.data());
  CHECK(read_nifti_extents(dir.file("two.nii")) == std::vector<int64_t>{kNx, kNy, kNz, 2});
  halfgrad::io::test::write_bytes(dir.file("junk.nii"), std::string(400, 'x'));
  check_mentions(error_message([&] { read_nifti_extents(dir.file("junk.nii")); }), {dir.file("junk.nii"), "not a NIfTI-1 file"});

  write_input(dir.file("in.nii"), Xform::Both, 1.0f, 0.0f);
  const Volume vol = read_nifti(dir.file("in.nii"));
  const std::string missing = dir.file("no/such/folder/out.nii.gz");
  check_mentions(error_message([&] { write_label_nifti(missing, some_labels(), vol); }), {missing, "does not exist"});
  check_mentions(error_message([&] { write_label_nifti(dir.file("out.txt"), some_labels(), vol); }),
                 {"out.txt", "expected a file name ending in .nii or .nii.gz"});
  check_mentions(error_message([&] { write_label_nifti(dir.file("o.nii"), Tensor::from_labels({1, 2}, {1, 1, 2}), vol); }),
                 {"o.nii", "expected the reference volume's (D, H, W) [3, 4, 5]"});
  Tensor big = some_labels().clone();
  big.data<int64_t>()[5] = 256;
  check_mentions(error_message([&] { write_label_nifti(dir.file("o.nii"), big, vol); }), {"o.nii", "label 256", "[0, 255]"});
  Volume made_in_memory{vol.data, vol.spacing, vol.affine, {}};
  check_mentions(error_message([&] { write_label_nifti(dir.file("o.nii"), some_labels(), made_in_memory); }),
                 {"o.nii", "no NIfTI header"});
  CHECK_FALSE(std::filesystem::exists(dir.file("o.nii")));
  if (::geteuid() != 0) {  // root writes into a read-only folder anyway
    std::filesystem::create_directory(dir.file("ro"));
    std::filesystem::permissions(dir.file("ro"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    check_mentions(error_message([&] { write_label_nifti(dir.file("ro/o.nii"), some_labels(), vol); }),
                   {dir.file("ro/o.nii"), "cannot create"});
    std::filesystem::permissions(dir.file("ro"), std::filesystem::perms::owner_all);
  }
}
