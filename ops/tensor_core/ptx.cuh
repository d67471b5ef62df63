// ptx.cuh - the one set of PTX wrappers behind halfgrad's Tensor Core kernels (GEMM in ops/matmul/,
// implicit-GEMM convolutions in ops/conv/, the ladder's rungs in bench/gemm/): cp.async, ldmatrix,
// mma.sync.m16n8k16 (FP16 and BF16; the instruction's shape is Mma16816 in tile_shape.h),
// shared-memory loads and stores by address, a named barrier, and on sm_90a wgmma (fence, commit /
// wait groups, the m64n<N>k16 instructions, shared-memory matrix descriptors).
// The TMA and mbarrier wrappers live beside it, in the same namespace, in ops/tensor_core/tma.cuh.
// Internal: .cu / .cuh files only.
//
// Why the "memory" clobbers. cp.async and wgmma read or write shared memory behind the compiler's
// back: the copy lands some time after the instruction issues, and only cp.async.wait_group (or
// wgmma.wait_group) says it has. The compiler does not know that; for an asm statement without a
// "memory" clobber it assumes no memory is touched and is free to move ordinary shared-memory loads
// and stores across it (keep a value loaded before the wait in a register, sink a zero-fill store
// below the copy that must follow it, hoist an epilogue's staging write above the wait that frees
// the slot). Every wrapper here that reads or writes memory, or orders other accesses (wait, commit,
// fence, barrier), therefore carries the clobber, and is `asm volatile` so it is neither dropped nor
// merged. mma.sync is the exception: it reads and writes registers only, so it has neither, and the
// compiler may schedule it between the loads it does not depend on (the accumulator chain fixes the
// order of the products, so results are the same bits either way).
//
// Architectures: cp.async, ldmatrix and mma.sync m16n8k16 need sm_80 or newer (compiling this for an
// older target is an error, not a silent fallback). wgmma exists only for the
// sm_90a target (__CUDA_ARCH_FEAT_SM90_ALL), so they are defined only there; code calling them must
// sit under the same guard (ops/matmul/gemm_wgmma.cuh does).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "ops/tensor_core/ptx.cuh: cp.async, ldmatrix and mma.sync.m16n8k16 need sm_80 or newer"
#endif

namespace halfgrad::cuda::tensor_core {

/// The 32-bit shared-memory address (state space .shared) of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- cp.async (sm_80+) -------------------------------------------------------------------------

/// Copies 16 bytes global -> shared asynchronously, bypassing L1 (.cg). Only the first src_bytes
/// (0..16) are read, the rest of the 16 shared bytes are zero-filled: this is the predication of every
/// tile loader (out-of-range rows and columns become zeros and add nothing to the sum). With
/// src_bytes == 0 nothing is read, but src must still be a valid global address.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
/// The same with a generic pointer into shared memory.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
  cp_async_16(shared_address(dst), src, src_bytes);
}
/// Closes this thread's group of cp.async issued since the previous commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/// Waits until at most kPending committed groups of this thread are still in flight. It orders this
/// thread's copies only: a __syncthreads after it makes every thread's landed copies visible to all.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

/// Makes the barrier at `bar` (shared memory) receive one arrival once every cp.async this thread has
/// issued so far has landed, without adding to the arrivals it expects (.noinc): the barrier must be
/// initialised to count this arrival among its own. The waiter's acquire on the barrier then sees
/// the copies (PTX ISA, "cp.async.mbarrier.arrive"); a wgmma reading them still needs
/// fence.proxy.async after the wait, cp.async being generic-proxy writes.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// ---- ldmatrix (sm_75+, used from sm_80) ------------------------------------------------------------

/// Four 8x8 matrices of 16-bit words (FP16 or BF16) from shared memory; lane l gives the row address
/// of matrix l/8, row l%8 (16 bytes, 16-byte aligned). Register i holds matrix i: lane l gets row
/// l/4, columns 2*(l%4) and 2*(l%4)+1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
/// As ldmatrix_x4, each matrix transposed: lane l gets rows 2*(l%4) and 2*(l%4)+1 of column l/4.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
/// The same with a generic pointer into shared memory (this lane's row address).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) { ldmatrix_x4(r, shared_address(p)); }
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  ldmatrix_x4_trans(r, shared_address(p));
}

// ---- mma.sync (sm_80+) -----------------------------------------------------------------------------

/// d (16x8 FP32) += a (16x16 T, row) * b (16x8 T, col), T = __half (.f16) or __nv_bfloat16 (.bf16),
/// FP32 accumulation. With g = lane/4, t = lane%4:
///   a[0]: (g, 2t..2t+1)  a[1]: (g+8, 2t..)  a[2]: (g, 8+2t..)  a[3]: (g+8, 8+2t..)
///   b[0]: (k 2t..2t+1, n g)  b[1]: (k 8+2t.., n g)
///   d[0..1]: (g, 2t..2t+1)   d[2..3]: (g+8, 2t..2t+1)
/// Registers only: no "memory" clobber, not volatile (file comment).
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "mma.sync m16n8k16: f16 or bf16");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// ---- shared-memory loads and stores by address ---------------------------------------------------
// For code that holds 32-bit .shared addresses (a staging buffer carved out of dynamic shared memory
// by offset, as the TMA kernels do) rather than pointers. The clobber keeps them in program order
// with the barriers and the async-proxy fences around them.

/// Stores 4 bytes (two packed 16-bit values) at shared address `addr` (4-byte aligned).
__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

/// Stores two floats at shared address `addr` (8-byte aligned).
__device__ __forceinline__ void st_shared_v2_f32(uint32_t addr, float v0, float v1) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(v0), "f"(v1) : "memory");
}

/// Loads four floats from shared address `addr` (16-byte aligned).
__device__ __forceinline__ float4 ld_shared_v4_f32(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// ---- barriers ------------------------------------------------------------------------------------

/// bar.sync on named barrier `id` (1..15; 0 is __syncthreads') for kThreads threads (a multiple of
/// 32, an immediate in the instruction): lets a subset of the block (one warpgroup) synchronise
/// without stalling the rest. Orders shared-memory accesses like __syncthreads, hence the clobber.
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  static_assert(kThreads > 0 && kThreads % 32 == 0, "named_barrier_sync: whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

// ---- wgmma and the async proxy (sm_90a only) -------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// (The proxy fence that hands generic-proxy writes to wgmma and TMA, fence_proxy_async_shared, is
// tma.cuh's.)

/// Shared-memory matrix descriptor of wgmma: start address, leading and stride byte offsets (all
/// >> 4) and the swizzle mode in bits 62-63 (1 = 128-byte swizzle); base offset 0, so the tile must
/// be 1024-byte aligned. Plain arithmetic, no PTX.
__device__ __forceinline__ uint64_t matrix_descriptor(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}

/// Orders this warpgroup's register and shared-memory accesses before the wgmma that follow it
/// (needed before the first wgmma and whenever the accumulators were touched by other instructions).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/// Closes the group of wgmma issued since the previous commit.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// Waits until at most kPending committed wgmma groups are still running: after it, their
/// accumulators may be read and the shared memory they read may be overwritten.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
/// Tells the compiler the kN accumulators may have changed (wgmma writes them asynchronously), so it
/// does not read them before wgmma_wait; an empty asm per register.
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/// d (64 x 256, FP32, the warpgroup's fragment) += A (64 x 16, FP16) * B (16 x 256, FP16), both read
/// from shared memory through descriptors; scale-d 1 (accumulate), scale-a and scale-b 1.
/// kTransA / kTransB: the operand is MN-major in shared memory (the transpose bits).
/// Fragment layout: warp w of the warpgroup, lane l: d[4j + 0..1] = (16w + l/4, 8j + 2(l%4) + 0..1),
/// d[4j + 2..3] = the same columns, row + 8.
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, %131, %132;\n"
      "}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransA), "n"(kTransB)
      : "memory");
}

/// wgmma_m64n256k16 with a 128-column (64 accumulators) or 64-column (32) B and d: the same fragment
/// layout for j < kN / 8. The narrower tiles of gemm_tma.cuh (TmaTile<128>, TmaTile<64>) use them.
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, %67, %68;\n"
      "}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransA), "n"(kTransB)
      : "memory");
}

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, %35, %36;\n"
      "}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransA), "n"(kTransB)
      : "memory");
}

/// The m64nNk16 instruction for N = 256, 128 or 64 (kN / 2 accumulators per thread).
template <int kN, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b) {
  static_assert(kN == 256 || kN == 128 || kN == 64, "wgmma_m64nk16: N is 256, 128 or 64");
  if constexpr (kN == 256) wgmma_m64n256k16<kTransA, kTransB>(d, desc_a, desc_b);
  else if constexpr (kN == 128) wgmma_m64n128k16<kTransA, kTransB>(d, desc_a, desc_b);
  else wgmma_m64n64k16<kTransA, kTransB>(d, desc_a, desc_b);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace halfgrad::cuda::tensor_core
