// gemm_paths.h - gemm_f16 with its kernel family forced, so that `gemm_bench --dispatch` can time
// every family gemm_f16 may choose on the same problem and the automatic choice (gemm_cuda.cu) can be
// read off the measurement. The lab's families, which gemm_f16 never chooses (the cp.async wgmma
// kernel, the TMA kernel's clusters of 4 and 8 and its cp.async producer), are bench/gemm/
// lab_families.h's. Private to ops/matmul/ and bench/gemm/; programs call gemm_f16 (gemm_cuda.h).
#pragma once
#include <string>

#include "ops/matmul/gemm_cuda.h"

namespace halfgrad::cuda {

/// The kernel families of gemm_f16.
enum class GemmPath {
  kAuto,           // gemm_f16's own choice
  kMmaSync,        // mma.sync block tiles (gemm_mma_tiles.cuh; 256x128 or 64x128 by size), any GPU
  kTmaPersistent,  // warp-specialised TMA + wgmma, persistent, 128x256 tiles (gemm_tma.cuh), sm_90, FP16
  kTmaStore,       // kTmaPersistent with the TMA-store epilogue (where beta == 0 and C is aligned)
  kTmaStore128,    // kTmaStore on 128x128 tiles (TmaTile<128>)
  kTmaStore64,     // kTmaStore on 128x64 tiles (TmaTile<64>)
  kTmaSplit128,    // kTmaStore128 with K split over a 2-CTA cluster (TmaTile<128, 2>)
  kTmaSplit64,     // kTmaStore64 with K split over a 2-CTA cluster (TmaTile<64, 2>)
  kTmaPair256,     // kTmaStore with vertically adjacent tiles paired in a 2-CTA cluster, B multicast
  kTmaPair128,     // kTmaStore128 likewise (both: an even number of 128-row tile-rows)
  kTmaPairA128,    // kTmaStore128 with horizontally adjacent tiles paired in a 2-CTA cluster, A multicast
  kTmaPairA64,     // kTmaStore64 likewise (both: any M, N)
  kTmaPlanned,     // the TMA-store kernel on gemm_tma::tile_plan's tiles, split and pair, queued by
                   // programmatic dependent launch (what kAuto takes with beta == 0 and an aligned C)
  kTmaPlannedSerial,  // kTmaPlanned queued by an ordinary launch (rung 15's baseline)
};

/// gemm_f16(args) on the given family. Checks the arguments exactly as gemm_f16 does (throws
/// halfgrad::Error); returns nullptr once queued, or, launching nothing, why the family cannot run
/// this problem on this device.
const char* gemm_f16_on(const GemmArgs& args, GemmPath path);

/// The family gemm_f16(args) takes on this device, by the name `gemm_bench --dispatch` prints:
/// "mma_sync"; "tma" (the register epilogue, beta != 0 or C unaligned); else the TMA-store kernel on
/// gemm_tma::tile_plan's plan: "tma_store" (128 x 256), "tma_store_128", "tma_store_64",
/// "split_128", "split_64", "pair_256", "pair_128" (sharing B), "pair_a_128", "pair_a_64" (sharing
/// A). Launches and reads nothing (the pointers' alignment counts, not what they point to). Checks
/// the arguments as gemm_f16 does (throws halfgrad::Error).
std::string gemm_f16_choice(const GemmArgs& args);

}  // namespace halfgrad::cuda
