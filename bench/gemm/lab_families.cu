// lab_families.cu - the lab's GEMM families (lab_families.h, lab_families.cuh): gemm_tma_launch.cuh's
// templates instantiated for the plans gemm_f16 never chooses, and the cp.async wgmma kernel
// (wgmma_cp_async.cu). sm_90a only (CMake: halfgrad_gemm_lab).
#include "bench/gemm/lab_families.h"

#include "bench/gemm/cp_async_producer.cuh"
#include "bench/gemm/lab_families.cuh"
#include "bench/gemm/wgmma_cp_async.h"
#include "core/error.h"
#include "ops/matmul/gemm_problem.cuh"
#include "ops/matmul/gemm_tma_launch.cuh"

namespace halfgrad::cuda::gemm_lab {

namespace gt = gemm_tma;

namespace {

void check_tma(const gemm_tiles::GemmProblem& p, const char* op) {
  HG_CHECK(gt::device_supported(op), op << ": the TMA GEMM needs a compute capability 9.0 GPU");
  HG_CHECK(gt::operands_supported(p), op << ": the TMA GEMM needs 16-byte aligned A and B and lda, ldb multiples of 8; "
                                            "got lda " << p.lda << ", ldb " << p.ldb);
}

}  // namespace

void launch_tma_cluster(const gemm_tiles::GemmProblem& p, bool a_trans, bool b_trans, int tiles, gt::Store store,
                        const char* op) {
  check_tma(p, op);
  HG_CHECK(tiles == 4 || tiles == 8, op << ": the lab's A-sharing clusters hold 4 or 8 tiles; got " << tiles);
  const auto s = gt::Schedule::kPersistent;
  const auto l = gt::Launch::kSerial;
  if (tiles == 4) gt::launch_plan<64, 1, 4, true>(p, a_trans, b_trans, s, store, l, op);
  else gt::launch_plan<64, 1, 8, true>(p, a_trans, b_trans, s, store, l, op);
}

int64_t cluster_resident_ctas(int tiles, const char* op) {
  HG_CHECK(tiles == 4 || tiles == 8, op << ": the lab's A-sharing clusters hold 4 or 8 tiles; got " << tiles);
  // Occupancy is the same for every layout (same threads, same shared memory): N/N's.
  const int clusters = tiles == 4 ? gt::resident_clusters<false, false, 64, 1, 4, true>(op)
                                  : gt::resident_clusters<false, false, 64, 1, 8, true>(op);
  return static_cast<int64_t>(tiles) * clusters;
}

void launch_tma_cp_async(const gemm_tiles::GemmProblem& p, bool a_trans, bool b_trans, int width, gt::Store store,
                         const char* op) {
  check_tma(p, op);
  HG_CHECK(width == 128 || width == 64, op << ": the cp.async producer is built for 128- and 64-wide tiles; got " << width);
  const auto s = gt::Schedule::kPersistent;
  const auto l = gt::Launch::kSerial;
  if (width == 128) gt::launch_plan<128, 1, 1, false, gt::CpAsyncProducer>(p, a_trans, b_trans, s, store, l, op);
  else gt::launch_plan<64, 1, 1, false, gt::CpAsyncProducer>(p, a_trans, b_trans, s, store, l, op);
}

const char* family_name(Family family) {
  switch (family) {
    case Family::kWgmma: return "wgmma";
    case Family::kTmaQuadA64: return "quad_a_64";
    case Family::kTmaOctA64: return "oct_a_64";
    case Family::kTmaCpAsync128: return "cp_async_128";
    case Family::kTmaCpAsync64: return "cp_async_64";
  }
  return "?";
}

const char* gemm_f16_on(const GemmArgs& a, Family family) {
  const char* op = a.op ? a.op : "gemm";
  const gemm_tiles::GemmProblem p = checked_gemm_problem(a, op);
  const bool at = a.a_layout == GemmLayout::T;
  const bool bt = a.b_layout == GemmLayout::T;
  // The Hopper kernels are FP16-only (their descriptors and instructions name .f16).
  const bool hopper = !a.bf16 && gt::device_supported(op);
  if (family == Family::kWgmma) {
    if (!hopper || !gemm_vector_loads(a) || p.M % 8 != 0 || p.N % 8 != 0 || p.K % 8 != 0)
      return "needs sm_90, FP16, the 16-byte load path, M, N, K multiples of 8";
    gemm_wgmma::launch(p, at, bt, op);
    return nullptr;
  }
  if (!hopper || !gt::operands_supported(p)) return "needs sm_90, FP16, 16-byte aligned A and B, lda and ldb multiples of 8";
  if (family == Family::kTmaQuadA64 || family == Family::kTmaOctA64)
    launch_tma_cluster(p, at, bt, family == Family::kTmaQuadA64 ? 4 : 8, gt::Store::kTma, op);
  else
    launch_tma_cp_async(p, at, bt, family == Family::kTmaCpAsync128 ? 128 : 64, gt::Store::kTma, op);
  return nullptr;
}

}  // namespace halfgrad::cuda::gemm_lab
