// checkpoint_fuzz.cpp - libFuzzer harness of the safetensors reader (core/safetensors.h), of the
// checkpoint loader built on it (nn/checkpoint.h), and of what `halfgrad-unet3d eval` reads from
// the metadata first (UNet3dOptions::from_json of "model"). The input is a safetensors file (the
// seeds: fuzz/make_corpus.cpp). It is read with safetensors::read_file, its halfgrad metadata
// parsed, and it is loaded into a small module (load_checkpoint, whose seed checkpoint matches it).
// Only halfgrad::Error may come out.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_checked.h"
#include "core/safetensors.h"
#include "fuzz/tiny_module.h"
#include "nn/checkpoint.h"
#include "nn/unet3d.h"

using namespace halfgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("halfgrad_checkpoint_fuzz_" + std::to_string(::getpid()) + ".bin")).string();
  const std::vector<uint8_t> bytes(data, data + size);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  const bool written = std::fwrite(bytes.data(), 1, size, f) == size;
  std::fclose(f);
  if (!written) return 0;
  try {
    safetensors::read_file(path);
  } catch (const Error&) {
  }
  try {
    const nlohmann::json meta = nn::read_checkpoint_metadata(path);
    const json_checked::Field m(meta, path);
    if (meta.is_object() && m.has("model")) nn::UNet3dOptions::from_json(m["model"]);
  } catch (const Error&) {
  }
  try {
    fuzz::TinyModule module;
    nn::load_checkpoint(path, module);
  } catch (const Error&) {
  }
  return 0;
}
