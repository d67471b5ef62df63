// make_corpus.cpp - writes the fuzzers' seed corpora, a few small valid files each:
//   <out>/nifti/       float32 .nii and .nii.gz, an int16 .nii.gz with scl_slope, a uint8 label map
//   <out>/msd_json/    dataset.json files naming imagesTr/{a,b}.nii.gz (what msd_json_fuzz provides)
//   <out>/checkpoint/  a checkpoint of fuzz::TinyModule and one of a width-2, one-level U-Net, each
//                      with the metadata halfgrad-unet3d train writes (model, recipe, volume shape)
//   <out>/safetensors/ that U-Net again, with a NaN weight, with an inf weight, with metadata claiming
//                      channels {4096}; an FP16 tensor of 65504 (finite); a file without checksums;
//                      one whose last byte was flipped after its checksum was written
// Built in the normal build, on demand:
//   cmake --build build --target make_fuzz_corpus && build/make_fuzz_corpus fuzz/corpus
#include <nifti1_io.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "fuzz/tiny_module.h"
#include "io/nifti.h"
#include "core/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/unet3d.h"

using namespace halfgrad;
namespace fs = std::filesystem;

namespace {

// A NIfTI-1 file of any datatype through nifticlib (native byte order).
void write_raw(const std::string& path, int nx, int ny, int nz, int datatype, const void* bytes, float slope) {
  int d[8] = {3, nx, ny, nz, 1, 1, 1, 1};
  nifti_image* nim = nifti_make_new_nim(d, datatype, 1);
  std::memcpy(nim->data, bytes, nim->nvox * nim->nbyper);
  nim->scl_slope = slope;
  nim->nifti_type = NIFTI_FTYPE_NIFTI1_1;
  nifti_set_filenames(nim, path.c_str(), 0, 1);
  nifti_image_write(nim);
  nifti_image_free(nim);
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_fuzz_corpus OUT_DIR (e.g. fuzz/corpus)\n";
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* d : {"nifti", "msd_json", "checkpoint", "safetensors"}) fs::create_directories(out / d);

  Generator gen(0);
  io::Volume img{Tensor::randn({2, 3, 4}, gen), {1.5, 1, 1}, {}};
  io::write_nifti((out / "nifti/float32_2x3x4.nii").string(), img);
  io::write_nifti((out / "nifti/float32_2x3x4.nii.gz").string(), img);
  std::vector<int16_t> i16(27);
  for (int i = 0; i < 27; ++i) i16[i] = static_cast<int16_t>(i * 100 - 1300);
  write_raw((out / "nifti/int16_slope_3x3x3.nii.gz").string(), 3, 3, 3, NIFTI_TYPE_INT16, i16.data(), 0.25f);
  std::vector<uint8_t> lab(24);
  for (int i = 0; i < 24; ++i) lab[i] = static_cast<uint8_t>(i % 3);
  write_raw((out / "nifti/label_uint8_4x3x2.nii.gz").string(), 4, 3, 2, NIFTI_TYPE_UINT8, lab.data(), 0.0f);

  write_text((out / "msd_json/two_pairs.json").string(),
             R"({"name": "Toy", "labels": {"0": "background", "1": "a", "2": "b"},
 "training": [{"image": "./imagesTr/a.nii.gz", "label": "./labelsTr/a.nii.gz"},
              {"image": "./imagesTr/b.nii.gz", "label": "./labelsTr/b.nii.gz"}]})");
  write_text((out / "msd_json/one_pair_no_name.json").string(),
             R"({"labels": {"0": "background", "1": "x"}, "training": [{"image": "imagesTr/a.nii.gz", "label": "labelsTr/a.nii.gz"}], "test": []})");

  const nn::UNet3dOptions opts = nn::UNet3dOptions().channels({2}).bottleneck(2);
  const nlohmann::json meta = {{"recipe", "cpu"}, {"model", opts.to_json()}, {"epoch", 1}, {"opt_level", "O0"},
                               {"volume_shape", {8, 8, 8}}, {"class_names", {"background", "a", "b"}},
                               {"fp32_ops", nlohmann::json::array()}, {"val_mean_dice", 0.5}};
  nn::UNet3d unet(opts, gen);
  nn::save_checkpoint((out / "checkpoint/unet_width2.safetensors").string(), unet, meta);
  fuzz::TinyModule tiny;
  nn::save_checkpoint((out / "checkpoint/tiny_module.safetensors").string(), tiny, meta,
                      {{"optim.state.0.exp_avg", Tensor::zeros({3, 2, 1, 1, 1})}});
  // safetensors/: what issue 30's checks refuse, beside two files they pass.
  const std::string st = (out / "safetensors").string();
  nn::save_checkpoint(st + "/unet_width2.safetensors", unet, meta);
  {
    NamedTensors ts;
    for (const auto& [n, t] : unet.named_parameters()) ts.emplace_back(n, t.clone());
    for (const auto& [n, t] : unet.named_buffers()) ts.emplace_back(n, t.clone());
    const std::map<std::string, std::string> md = {{nn::kMetadataKey, meta.dump()}};
    ts[0].second.data<float>()[1] = std::nanf("");
    safetensors::write_file(st + "/nan_weight.safetensors", ts, md);
    ts[0].second.data<float>()[1] = INFINITY;
    safetensors::write_file(st + "/inf_weight.safetensors", ts, md);
    ts[0].second.data<float>()[1] = 0.5f;
    nlohmann::json huge = meta;  // a 4096-wide claim over width-2 tensors
    huge["model"]["channels"] = {4096};
    huge["model"]["bottleneck"] = 4096;
    safetensors::write_file(st + "/huge_claim.safetensors", ts, {{nn::kMetadataKey, huge.dump()}});
    safetensors::write_file(st + "/f16_max.safetensors", {{"h", Tensor::full({4}, 65504.0f).cast_copy(kFloat16)}});
  }
  {  // no checksums (a PyTorch file), and one whose checksum no longer matches its bytes
    const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"a":"b"}})";
    std::string bytes(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(&bytes[0], &n, 8);
    bytes += header;
    bytes.append(8, '\0');
    write_text(st + "/no_checksum.safetensors", bytes);
    safetensors::write_file(st + "/bad_checksum.safetensors", {{"w", Tensor::ones({2})}});
    std::string tampered;
    {
      std::ifstream in(st + "/bad_checksum.safetensors", std::ios::binary);
      tampered.assign(std::istreambuf_iterator<char>(in), {});
    }
    tampered.back() ^= 1;
    write_text(st + "/bad_checksum.safetensors", tampered);
  }
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) std::cout << e.path().string() << "  " << e.file_size() << " bytes\n";
  return 0;
}
