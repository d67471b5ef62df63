// pipeline.cuh - the cp.async software pipelines of halfgrad's mma.sync kernels, written once: the
// order of copies, commits, waits and barriers that keeps the next slices of the operands in flight
// while the warps multiply the current one (CUTLASS's "multistage" and "double-buffered" mainloops).
// Each kernel brings its own `load` (how a slice reaches a shared-memory slot: the GEMM's predicated
// tile copy, a convolution's gather or halo) and its own `compute` (fragment loads and mma.sync,
// warp_tile.cuh); the schedule decides when they run. Three schedules, by what the kernels need:
//
//   multistage        kStages slots, kStages - 1 slices in flight. Per slice: wait until slice kt has
//                     landed (at most kStages - 2 younger groups pending), one barrier (every thread's
//                     copies visible; every warp done with slice kt - 1), refill slice kt - 1's slot
//                     with slice kt + kStages - 1, multiply slice kt. One barrier a slice; needs
//                     kStages >= 3 for the copy of the next slice to overlap the multiply.
//                     (ops/conv/conv3d_fprop_cuda.cu, conv3d_wgrad_cuda.cu)
//   multistage, prefetched fragments
//                     the same slots and refills, but the fragments of k-step ks + 1 are read from
//                     shared memory (into a second register set) while the mmas of k-step ks run,
//                     across slice boundaries too: the wait and barrier move to the last k-step of a
//                     slice, before the next slice's first fragments are read. (ops/matmul/
//                     gemm_mma_tiles.cuh, the GEMM)
//   double-buffered   two slots; tile t + 1's copies are issued before waiting for tile t's, so even
//                     two slots overlap copy and multiply, at the price of a second barrier a tile
//                     (nobody may refill a slot another warp still reads). A `finish` hook runs
//                     after the multiply, before that barrier: a kernel that stages part of a tile
//                     through registers stores it there. (ops/conv/conv3d_wgrad_halo_cuda.cu)
//
// Commit discipline: one commit per slice, even an empty one, so that group j is always slice j and
// every wait count is a constant. All three end with cp_async_wait<0>: no copy may still target shared
// memory when the caller reuses it (an epilogue's staging) or the block exits.
//
// Internal: .cu / .cuh files only; sm_80 or newer (cp.async).
#pragma once
#include "ops/tensor_core/ptx.cuh"

namespace halfgrad::cuda::tensor_core {

/// The multistage schedule (file comment): load(slice, slot) copies slice `slice` (0..num_slices-1)
/// into slot `slot` (0..kStages-1); compute(slice, slot) multiplies it. Every thread of the block calls it.
template <int kStages, class Load, class Compute>
__device__ __forceinline__ void multistage_pipeline(int num_slices, Load&& load, Compute&& compute) {
  static_assert(kStages >= 2, "a pipeline needs at least two slots");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_slices) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < num_slices; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // slice kt has landed for every thread; slot (kt - 1) % kStages is free again
    const int next = kt + kStages - 1;
    if (next < num_slices) load(next, next % kStages);
    cp_async_commit();
    compute(kt, kt % kStages);
  }
  cp_async_wait<0>();
}

/// The multistage schedule with prefetched fragments (file comment), kKSteps k-steps a slice, two
/// fragment register sets: fetch(set, slot, ks) reads k-step ks of the slice in `slot` into set `set`
/// (0 or 1), multiply(set) runs its mmas; load(slice, slot) as multistage_pipeline's.
template <int kStages, int kKSteps, class Load, class Fetch, class Multiply>
__device__ __forceinline__ void multistage_pipeline_prefetched(int num_slices, Load&& load, Fetch&& fetch,
                                                               Multiply&& multiply) {
  static_assert(kStages >= 2, "a pipeline needs at least two slots");
  static_assert(kKSteps % 2 == 0, "each slice starts in fragment set 0: an even number of k-steps");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_slices) load(s, s);
    cp_async_commit();
  }
  cp_async_wait<kStages - 2>();
  __syncthreads();
  fetch(0, 0, 0);
  for (int kt = 0; kt < num_slices; ++kt) {
    // Refill the slot that slice kt - 1 used: every warp finished reading it before the barrier at
    // the end of the previous slice.
    const int next = kt + kStages - 1;
    if (next < num_slices) load(next, next % kStages);
    cp_async_commit();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      if (ks + 1 < kKSteps) {
        fetch((ks + 1) & 1, kt % kStages, ks + 1);
      } else {
        // Slice kt + 1 must have landed (groups 0..kt+1 of kt+kStages committed) and be visible to all.
        cp_async_wait<kStages - 2>();
        __syncthreads();
        fetch((ks + 1) & 1, (kt + 1) % kStages, 0);
      }
      multiply(ks & 1);
    }
  }
  cp_async_wait<0>();
}

/// The double-buffered schedule (file comment): load(t, slot) copies tile t (0..num_tiles-1) into
/// slot t % 2, compute(t, slot) multiplies it, then finish(t, slot) (see the file comment).
template <class Load, class Compute, class Finish>
__device__ __forceinline__ void double_buffered_pipeline(int num_tiles, Load&& load, Compute&& compute, Finish&& finish) {
  if (num_tiles > 0) load(0, 0);
  cp_async_commit();
  for (int t = 0; t < num_tiles; ++t) {
    const int slot = t & 1;
    if (t + 1 < num_tiles) load(t + 1, slot ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // tile t's copies (this thread's) have landed
    __syncthreads();     // and everyone's
    compute(t, slot);
    finish(t, slot);
    __syncthreads();  // slot t % 2 is read; the next tile's copies may overwrite it
  }
  cp_async_wait<0>();
}

/// double_buffered_pipeline with nothing to finish.
template <class Load, class Compute>
__device__ __forceinline__ void double_buffered_pipeline(int num_tiles, Load&& load, Compute&& compute) {
  double_buffered_pipeline(num_tiles, load, compute, [](int, int) {});
}

}  // namespace halfgrad::cuda::tensor_core
