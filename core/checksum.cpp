// checksum.cpp - see checksum.h. xxHash is used header-only (XXH_INLINE_ALL): its functions are
// compiled into this file, with internal linkage, so no program needs libxxhash at run time.
#include "core/checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"

namespace halfgrad {

uint64_t xxh3_64(const void* data, size_t n) { return XXH3_64bits(data, n); }

struct Xxh3Hasher::State {
  XXH3_state_t s;
};

Xxh3Hasher::Xxh3Hasher() : state_(std::make_unique<State>()) {
  HG_CHECK(XXH3_64bits_reset(&state_->s) == XXH_OK, "Xxh3Hasher: XXH3_64bits_reset failed");
}

Xxh3Hasher::~Xxh3Hasher() = default;

void Xxh3Hasher::update(const void* data, size_t n) {
  if (n > 0) HG_CHECK(XXH3_64bits_update(&state_->s, data, n) == XXH_OK, "Xxh3Hasher: XXH3_64bits_update failed");
}

uint64_t Xxh3Hasher::digest() const { return XXH3_64bits_digest(&state_->s); }

std::string hex64(uint64_t h) {
  static const char* const kDigits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) s[static_cast<size_t>(i)] = kDigits[h & 0xF];
  return s;
}

bool parse_hex64(const std::string& s, uint64_t* h) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *h = v;
  return true;
}

}  // namespace halfgrad
