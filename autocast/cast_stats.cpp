// cast_stats.cpp - the per-thread cast counters of the precision report (see cast_stats.h).
#include "autocast/cast_stats.h"

#include <array>

namespace halfgrad::amp {

namespace {

constexpr size_t kDtypes = kNumDtypes;  // indexed by the Dtype enum's values (core/dtype.h)
static_assert(static_cast<size_t>(Dtype::BFloat16) + 1 == kDtypes, "one row per Dtype");

struct Counters {
  bool enabled = false;
  std::array<std::array<std::array<CastTally, kDtypes>, kDtypes>, 2> total{};  // [pass][from][to]
  PendingCasts pending;
};
thread_local Counters t_counters;

}  // namespace

CastTally& CastTally::operator+=(const CastTally& o) {
  casts += o.casts;
  elements += o.elements;
  bytes_read += o.bytes_read;
  bytes_written += o.bytes_written;
  return *this;
}

bool cast_counting_enabled() { return t_counters.enabled; }

CastCountingGuard::CastCountingGuard(bool enabled) : prev_(t_counters.enabled) { t_counters.enabled = enabled; }
CastCountingGuard::~CastCountingGuard() { t_counters.enabled = prev_; }

void count_cast(Dtype from, Dtype to, int64_t numel, CastPass pass) {
  if (!t_counters.enabled) return;
  CastTally c;
  c.casts = 1;
  c.elements = numel;
  c.bytes_read = numel * static_cast<int64_t>(dtype_size(from));
  c.bytes_written = numel * static_cast<int64_t>(dtype_size(to));
  t_counters.total[static_cast<size_t>(pass)][static_cast<size_t>(from)][static_cast<size_t>(to)] += c;
  if (pass == CastPass::Forward) t_counters.pending.casts += c;
}

void note_autocast_request(OpKind kind) {
  if (!t_counters.enabled) return;
  t_counters.pending.requested = kind;
}

CastTally cast_total(Dtype from, Dtype to, CastPass pass) {
  return t_counters.total[static_cast<size_t>(pass)][static_cast<size_t>(from)][static_cast<size_t>(to)];
}

CastTally cast_total() {
  CastTally sum;
  for (const auto& pass : t_counters.total)
    for (const auto& row : pass)
      for (const CastTally& c : row) sum += c;
  return sum;
}

PendingCasts take_pending() {
  PendingCasts p = t_counters.pending;
  t_counters.pending = PendingCasts{};
  return p;
}

void reset_cast_stats() {
  const bool enabled = t_counters.enabled;
  t_counters = Counters{};
  t_counters.enabled = enabled;
}

}  // namespace halfgrad::amp
