// checksum.h - a fast non-cryptographic hash of bytes, for what halfgrad writes and later trusts:
// the tensors of a checkpoint (core/safetensors.h) and the data files a run was trained on (the
// fingerprint halfgrad-unet3d train --resume compares).
//
// The hash is XXH3-64 (Yann Collet's xxHash 0.8, https://xxhash.com; Debian's libxxhash-dev, used
// header-only here, so nothing is linked): 64 bits, about 30 GB/s on one core, so a 90 MB checkpoint
// costs a few milliseconds. It detects corruption (a flipped bit, a truncated copy, a tensor edited
// by hand), not an attacker who recomputes it: it is not a signature.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace halfgrad {

/// XXH3-64 of n bytes (seed 0).
uint64_t xxh3_64(const void* data, size_t n);

/// Streaming XXH3-64: update() with pieces in order gives xxh3_64 of their concatenation.
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// 16 lowercase hex digits, most significant first ("00f3a1...").
std::string hex64(uint64_t h);
/// The inverse of hex64; false unless `s` is exactly 16 hex digits.
bool parse_hex64(const std::string& s, uint64_t* h);

}  // namespace halfgrad
