// dependent_launch.cu - rung 15 of the GEMM ladder: rung 13's kernel (gemm_tma::tile_plan's tile
// width and K split, TMA loads and stores, persistent warp-specialised CTAs), queued by programmatic
// dependent launch (gemm_tma::Launch::kDependent: cudaLaunchAttributeProgrammaticStreamSerialization;
// CUDA Programming Guide, "Programmatic Dependent Launch and Synchronization"; CUTLASS's
// `launch_with_pdl`). This is what gemm_f16 itself now does. Needs an sm_90 GPU.
//
// Math: C (M, N) = A (M, K) * B (K, N); A, B FP16 row-major, C FP32 row-major (gemm_rungs.h).
// Parallel mapping and precision: rung 13's, unchanged; the same bits.
//
// What it adds: nothing inside the kernel's main loop. An ordinary launch starts a kernel's CTAs
// only once the kernel before it in the stream has completed: the SMs then wait for the launch, the
// CTAs' shared-memory set-up, barrier inits and tensor-map fetches before the first TMA load is
// issued. For a small GEMM that fixed cost is a large share: ncu put a 1024^3 128 x 128 kernel at
// 10.6 us for 4.5 us of wgmma work (bench/NOTES.md, 2026-12-01). With the dependent launch the next
// GEMM's CTAs may be scheduled while this one runs (every CTA executes griddepcontrol.launch_dependents
// once it has started its walk), run their prologue on the SMs this grid leaves idle (1000^3 runs 64
// CTAs on 132 SMs) or as each of its CTAs exits, and wait in griddepcontrol.wait, which returns once
// the previous grid has completed and its writes are visible, before touching global memory. So the
// order of every read and write is what it was; only the launch latency and the prologue overlap
// the previous kernel.
// Predicted on H200 (written before the run): where the kernel is short, the launch gap and prologue
// (~1.5-2.5 us per GEMM) disappear from a stream of back-to-back GEMMs: 1000^3 and 1024^3 +10-20%
// (1000^3 FP16 out 0.77x -> 0.85-0.92x cuBLAS), the U-Net conv-transpose GEMMs (10-20 us) likewise
// +10-20%; 2048^3 +3-5%; 4096^3 and 8192^3 (0.2-1.5 ms) within +-2%. Timed per launch with an event
// between launches, the gain may vanish if an event record in between serialises the two kernels:
// `gemm_bench --dependent` prints both timings.
//
// Edges: rung 13's (TMA skips the parts of a box outside C); K and N multiples of 8 (TMA row strides).
#include "bench/gemm/dense_problem.cuh"
#include "bench/gemm/gemm_rungs.h"
#include "core/cuda/runtime.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace halfgrad::bench {

const char* gemm_dependent_launch(const DenseGemm& g) {
  const char* op = "dependent_launch";
  if (!cuda::gemm_tma::device_supported(op)) return "needs an sm_90 GPU (wgmma, TMA, griddepcontrol)";
  if (g.K % 8 != 0 || g.N % 8 != 0) return "needs K, N multiples of 8 (TMA row strides of 16 bytes)";
  const cuda::gemm_tiles::GemmProblem p = dense_problem(g);
  // The plan of rungs 12-13 (width and split), without production's pairs (rungs 14 and 16).
  const cuda::gemm_tma::TilePlan plan = cuda::gemm_tma::tile_plan(p, cuda::sm_count(), /*max_split=*/2, /*max_pair=*/1);
  cuda::gemm_tma::launch(p, false, false, cuda::gemm_tma::Schedule::kPersistent, op, cuda::gemm_tma::Store::kTma,
                         plan, cuda::gemm_tma::Launch::kDependent);
  return nullptr;
}

}  // namespace halfgrad::bench
