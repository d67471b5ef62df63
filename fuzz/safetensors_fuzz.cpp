// safetensors_fuzz.cpp - libFuzzer harness of what halfgrad checks in a safetensors file before it
// trusts it (issue 30): the header parsed from memory (core/safetensors.h parse_header, with the
// checksums of "halfgrad_xxh3"), the whole file read from disk (read_file: every tensor's checksum and
// the finite check of every floating tensor), and what `halfgrad-unet3d eval` / `predict` do before
// building a model (unet3d/trained_model.cpp): the architecture inferred from the tensor
// shapes (UNet3dOptions::infer_from_shapes) and compared with the metadata's
// (UNet3dOptions::from_json, check_matches_shapes), so that no metadata makes it allocate a model
// the file does not hold. Seeds (fuzz/make_corpus.cpp): NaN and inf weights, a metadata claiming
// channels {4096}, a file without checksums, one with a wrong checksum. Only halfgrad::Error may come out.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "core/error.h"
#include "core/json_checked.h"
#include "core/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/unet3d.h"

using namespace halfgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    safetensors::parse_header(reinterpret_cast<const char*>(data), size, size, "fuzz.safetensors");
  } catch (const Error&) {
  }
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("halfgrad_safetensors_fuzz_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  const bool written = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!written) return 0;
  try {
    safetensors::read_file(path);
  } catch (const Error&) {
  }
  try {
    const safetensors::Header h = safetensors::read_header(path);
    std::map<std::string, Shape> shapes;
    for (const auto& e : h.entries) shapes[e.name] = e.shape;
    const nn::UNet3dOptions found = nn::UNet3dOptions::infer_from_shapes(shapes, path);
    const nlohmann::json meta = nn::read_checkpoint_metadata(path, h.metadata);
    const json_checked::Field m(meta, path);
    if (meta.is_object() && m.has("model")) nn::UNet3dOptions::from_json(m["model"]).check_matches_shapes(shapes, path);
    (void)found;
  } catch (const Error&) {
  }
  return 0;
}
