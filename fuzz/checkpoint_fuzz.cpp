// checkpoint_fuzz.cpp - libFuzzer harness of the checkpoint loader (nn/checkpoint.h) and of what
// `halfgrad-unet3d eval` reads from its metadata first (UNet3dOptions::from_json of "model").
// The input is a checkpoint file whose last 8 bytes are replaced by the checksum of the others
// (checkpoint_checksum), so that mutations reach the record and JSON parsing behind the checksum,
// as a crafted file with a valid (unkeyed) checksum does. It is read with read_checkpoint and
// loaded into a small module (load_checkpoint, whose seed checkpoint matches it). Only
// halfgrad::Error may come out.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_checked.h"
#include "fuzz/tiny_module.h"
#include "nn/checkpoint.h"
#include "nn/unet3d.h"

using namespace halfgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("halfgrad_checkpoint_fuzz_" + std::to_string(::getpid()) + ".bin")).string();
  std::vector<uint8_t> bytes(data, data + size);
  if (size >= 8) {
    const uint64_t sum = nn::checkpoint_checksum(bytes.data(), size - 8);
    std::memcpy(bytes.data() + size - 8, &sum, 8);
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  const bool written = std::fwrite(bytes.data(), 1, size, f) == size;
  std::fclose(f);
  if (!written) return 0;
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
