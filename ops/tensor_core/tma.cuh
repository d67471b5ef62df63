// tma.cuh - Hopper's asynchronous data movement and its synchronisation, as thin PTX wrappers: the
// Tensor Memory Accelerator (cp.async.bulk.tensor, a 2D box of a global tensor to or from shared
// memory, described on the host by a CUtensorMap: ops/matmul/tensor_map.h), mbarriers (the
// shared-memory barriers that TMA completes by transaction count), the proxy fences that order the
// generic and async proxies, register reallocation between warpgroups (setmaxnreg), thread-block
// cluster helpers and grid dependency control (programmatic dependent launch). Device code for the
// sm_90a target only (every wrapper is empty elsewhere: the callers' kernels trap there, see
// gemm_tma_launch.cuh). Used by the production kernel
// ops/matmul/gemm_tma.cuh (rungs 8, 9 and 11-13 of bench/gemm/, its K split's hand-over through
// distributed shared memory included) and by the rungs with kernels of their own,
// bench/gemm/tma_mbarrier_pipeline.cu and cluster_multicast.cu.
//
// Every wrapper is `asm volatile` with a "memory" clobber: each one either moves data that the
// compiler cannot see (TMA writes shared memory behind its back), or orders memory accesses (barrier
// waits and arrives, fences), so no load or store may be moved across it. Shared-memory operands are
// 32-bit shared-window addresses (__cvta_generic_to_shared), as PTX's .shared::cta state space wants.
//
// The protocol these pieces make (PTX ISA 8.x, "mbarrier" and "cp.async.bulk.tensor"):
//   * an mbarrier has a pending-arrival count (set by init) and a pending transaction count in bytes;
//     its current phase completes when both reach zero, and it flips to the next phase (parity 0, 1,
//     0, ...). A waiter names the parity of the phase it waits for: try_wait.parity(P) succeeds once
//     the phase with parity P has completed, i.e. the barrier's current phase parity is no longer P.
//     A fresh barrier is in phase 0, so waiting for parity 1 succeeds at once (the "previous" phase):
//     this is how a producer passes the empty barriers of a ring on its first lap.
//   * a producer thread arms a full barrier with arrive.expect_tx(bytes) (one arrival + bytes expected)
//     and issues TMA loads that complete_tx on it as their bytes land; consumers wait on its parity.
//     The byte count is the whole box even where the box sticks out of the tensor: the out-of-bounds
//     part is zero-filled and still counted.
//   * consumers release a slot by arriving on its empty barrier (count = number of arriving threads).
#pragma once
#include <cuda.h>  // CUtensorMap (a 128-byte opaque struct; a type only: nothing links libcuda)

#include <cstdint>

namespace halfgrad::cuda::tensor_core {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---------------------------------------------------------------------------------------------
// mbarrier (a 64-bit object in shared memory, 8-byte aligned).
// ---------------------------------------------------------------------------------------------

/// Initialises the barrier at `bar` for `arrivals` arrivals per phase (phase 0). One thread does
/// this; the others may use it only after fence_mbarrier_init() and a block (or cluster) barrier.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

/// Makes mbarrier inits visible to the async proxy (TMA's complete_tx) and to the other CTAs of the
/// cluster; follow it with __syncthreads(), or cluster_arrive_relaxed() and cluster_wait().
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/// One arrival, and `bytes` more expected by transactions (TMA complete_tx) in the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

/// One arrival on a barrier of this CTA (release semantics at CTA scope: this thread's earlier
/// shared-memory reads and writes happen before the waiter's acquire).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/// Which memory operations of the arriving thread an arrive on another CTA's barrier orders before
/// the waiter's acquire (mbarrier_arrive_cluster). kCluster (.release.cluster): everything it did,
/// as seen from any CTA of the cluster; needed when it wrote the waiter's shared memory
/// (st_cluster_v4: the K split's partial). It costs about a GPU-wide fence per arrive: on every slot
/// release of the pair kernel (gemm_tma.cuh, kPair 2) it cost a third to a half of the kernel's rate
/// (bench/gemm/README.md, rung 14). kCta (.release.cta, what PTX gives an arrive
/// without qualifiers and what CUTLASS's ClusterBarrier::arrive(cta_id) issues to release a
/// multicast pipeline's slot): orders this CTA's accesses only; enough for a slot release, where
/// what must be ordered is this CTA's reads of its own shared memory (completed wgmmas, as for the
/// local release) before the peer's producer issues the TMA multicast that overwrites it.
enum class ArriveScope { kCta, kCluster };

/// One arrival on the barrier at the same offset in the shared memory of CTA `cta` of this cluster
/// (mapa translates the address; release at kScope, above). Used to release a slot that a
/// multicast load of another CTA writes (rung 10 at cluster scope, rung 14 / gemm_tma.cuh's pairs at
/// CTA scope), and to hand a K split's partial over and back (gemm_tma.cuh, cluster scope).
template <ArriveScope kScope = ArriveScope::kCluster>
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t bar, uint32_t cta) {
  if constexpr (kScope == ArriveScope::kCluster) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
  } else {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.release.cta.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
  }
}

/// mbarrier_wait blocks until the phase of parity `parity` (0 or 1) of the barrier has completed
/// (acquire: what the arriving threads and the completed transactions wrote is visible afterwards).
/// mbarrier_try_wait is one attempt; it suspends the thread for a hardware-chosen time before
/// returning false, so the loop does not spin hot on the barrier. mbarrier_wait traps after
/// kMbarrierWaitLimitNs (below) instead of waiting forever. kClusterScope: acquire at cluster scope,
/// for a barrier that threads of another CTA of the cluster arrive on (mbarrier_arrive_cluster) after
/// writing this CTA's shared memory (st_cluster_v4): those writes are visible after it
/// (mbarrier_wait_cluster); otherwise at CTA scope.
template <bool kClusterScope = false>
__device__ __forceinline__ bool mbarrier_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  if constexpr (kClusterScope) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } else {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
  return done != 0;
}
/// A wait that has not succeeded after this long is a bug (a phase that will never complete: a lost
/// arrival, a wrong byte count); mbarrier_wait traps then, so that the launch fails with an error
/// instead of hanging the GPU. Real waits last microseconds (even under compute-sanitizer: seconds).
constexpr uint64_t kMbarrierWaitLimitNs = 20'000'000'000ull;

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t)::"memory");
  return t;
}

template <bool kClusterScope = false>
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  if (mbarrier_try_wait<kClusterScope>(bar, parity)) return;
  const uint64_t start = global_timer_ns();
  while (!mbarrier_try_wait<kClusterScope>(bar, parity)) {
    if (global_timer_ns() - start > kMbarrierWaitLimitNs) __trap();
  }
}
__device__ __forceinline__ void mbarrier_wait_cluster(uint32_t bar, uint32_t parity) {
  mbarrier_wait<true>(bar, parity);
}

/// The shared::cluster address of `addr` (a shared::cta address of this CTA's layout) in CTA `cta` of
/// the cluster (mapa): where st_cluster_v4 writes.
__device__ __forceinline__ uint32_t cluster_address(uint32_t addr, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(cta));
  return remote;
}

/// A 16-byte store into the shared memory of another CTA of the cluster (distributed shared memory);
/// `remote` from cluster_address, 16-byte aligned. Ordered before a later mbarrier_arrive_cluster of
/// this thread (its release), so the waiter that acquires sees it.
__device__ __forceinline__ void st_cluster_v4(uint32_t remote, float a, float b, float c, float d) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(remote), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}

// ---------------------------------------------------------------------------------------------
// TMA (cp.async.bulk.tensor). `map` is the generic address of a CUtensorMap in parameter, constant
// or global memory (a __grid_constant__ kernel parameter: &map). Coordinates are in elements,
// innermost dimension first (c0 = column, c1 = row of a row-major matrix), and may be negative or
// past the end: those elements are zero-filled on load and skipped on store.
// ---------------------------------------------------------------------------------------------

/// Fetches the tensor map into the TMA unit's cache ahead of its first use (a hint).
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/// Loads the box at (c0, c1) into shared memory at `dst` (aligned as the map's swizzle needs: 1024
/// bytes for SWIZZLE_128B) and completes its bytes on barrier `bar`. Issued by one thread.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

/// As tma_load_2d, but the box lands at the same shared offset `dst` in every CTA of the cluster
/// whose bit is set in `cta_mask`, and completes on the barrier at offset `bar` in each of them:
/// one L2 read feeds several SMs.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                                      int c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

/// Stores the box at shared `src` to the tensor at (c0, c1) (elements outside the tensor are not
/// written). Asynchronous: commit it with tma_store_commit() and wait with tma_store_wait_read()
/// before `src` is overwritten. The shared writes that filled `src` must be made visible to the
/// async proxy first (fence_proxy_async_shared(), then a barrier of the writing threads).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
}
/// Closes this thread's outstanding TMA stores into one bulk group.
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// Waits until at most kPending of this thread's bulk groups still read their shared source.
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
/// Waits until at most kPending of this thread's bulk groups are still writing global memory.
template <int kPending>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Fences, register reallocation, clusters.
// ---------------------------------------------------------------------------------------------

/// Orders this thread's generic-proxy shared-memory accesses (ordinary st.shared, cp.async) before
/// later async-proxy ones (wgmma operand reads, TMA stores), and the reverse: issue it before the
/// barrier that hands generic-proxy writes to wgmma or TMA. The one wrapper of fence.proxy.async.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// Gives registers back: every thread of the warpgroup drops to kRegs per thread (a multiple of 8,
/// 24..256). Executed by all 128 threads of the warpgroup together.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes 24..256 in steps of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs) : "memory");
}
/// Takes registers: the warpgroup grows to kRegs per thread from what other warpgroups released
/// (blocks until the register file has them).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes 24..256 in steps of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs) : "memory");
}

/// This CTA's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank)::"memory");
  return rank;
}

/// Barrier over every thread of every CTA in the cluster (release on arrive, acquire on wait): after
/// it, the other CTAs' barrier inits and shared writes before it are visible. The release costs a
/// GPU-scope memory barrier (MEMBAR.ALL.GPU + ERRBAR in the SASS: every earlier global write of the
/// thread is waited for), which where the CTA has just stored its tile is most of a microsecond.
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

/// The two halves of a cluster barrier with a relaxed arrive (CUTLASS's cluster_arrive_relaxed and
/// cluster_wait): cluster_wait returns once every non-exited thread of the cluster has executed
/// cluster_arrive_relaxed. The wait still acquires, but the arrive releases nothing, so no GPU-scope
/// fence is paid and the barrier orders only what was released otherwise: mbarrier inits published by
/// fence_mbarrier_init (release at cluster scope), or accesses already ordered by mbarriers.
/// Executed by every thread of the warp (.aligned).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }

// ---------------------------------------------------------------------------------------------
// Programmatic dependent launch (PTX ISA "griddepcontrol"; CUDA Programming Guide, "Programmatic
// Dependent Launch and Synchronization"). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start before the kernel ahead of it in the
// stream has finished; both instructions are no-ops in a kernel launched without that attribute.
// ---------------------------------------------------------------------------------------------

/// Blocks until every grid this one depends on has completed and its memory operations are visible
/// (the whole of the previous kernel, not just up to its trigger). Every global read or write of
/// data a previous kernel may touch must come after it.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

/// Lets the next kernel in the stream (if launched with the attribute) be scheduled once every CTA
/// of this grid has executed this or exited: a hint that says nothing about this grid's memory,
/// which is why the dependent must still wait (grid_dependency_wait) before touching it.
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace halfgrad::cuda::tensor_core
