// gemm_bench.cu - checks and times every rung of the FP16 Tensor Core GEMM ladder (gemm_rungs.h)
// and the production halfgrad::cuda::gemm_f16, against cuBLAS measured in the same run.
//
//   gemm_bench           all sizes (1024^3, 4096^3, 2048^3, 8192^3, 1000^3, 4095^3 timed; small odd shapes
//                        checked only), then the layout / leading-dimension / alpha-beta checks of
//                        gemm_f16 and its argument checks. About a minute on an H200.
//   gemm_bench --quick   1024^3 and 4096^3 timed, the small shapes and the layout checks; < 30 s.
//   gemm_bench --dispatch  every kernel family of gemm_f16 (mma.sync, wgmma, TMA, and gemm_f16's own
//                        choice) beside cuBLAS on square, tall, wide, small-K, U-Net conv-transpose,
//                        odd and row-alignment shapes, N/N and other layouts, FP32 and FP16 output:
//                        the measurement behind gemm_cuda.cu's dispatch rule. On sm_90 it first prints
//                        how many CTAs of each cluster family fit at once. About 30 s on an H200.
//   gemm_bench --dependent  rung 15: gemm_f16's planned TMA kernel launched serially and by
//                        programmatic dependent launch, beside cuBLAS, each timed per launch and as a
//                        stream of back-to-back launches (time_stream_ms), on the sizes issue 12 names
//                        and the U-Net's conv-transpose GEMMs. About a minute.
//   gemm_bench --profile M N K  each family launched 3 times on one N/N problem, untimed: for ncu.
//   gemm_bench --sweep   every tile configuration of gemm_sweep.cu (the production block function
//                        with other compile-time shapes) and gemm_f16 itself, checked and timed at
//                        1024^3, 4096^3 and 8192^3, FP32 and FP16 output, beside cuBLAS; < 30 s.
//
// Correctness: A and B hold fresh hash-random FP16 values in [-1, 1) (never zeros), C is poisoned
// with NaN (all bits set) before every checked run, and the result is compared with cublasGemmEx
// (FP16 in, FP32 compute, FP32 out; the yardstick only) by the relative Frobenius error
// ||C - ref|| / ||ref||, which must be below 1e-3 (FP32 output differs from cuBLAS only by summation
// order, ~1e-6; FP16 output adds one rounding, ~3e-4). Any FAIL makes the exit code 1; an exception
// (CUDA error, failed precondition) exit code 2.
// Timing: cudaEvents around each launch, after 3 warm-up launches and behind a ~5 ms spin kernel so
// that the host has queued every launch before the GPU reaches the first (host launch overhead is not
// measured); median of 10 launches (30 below 10 GFLOP). The launches rotate over enough input sets
// (A, B, C) to exceed twice the L2 size, so small problems are not served from L2. TFLOP/s counts
// 2*M*N*K; "vs cuBLAS" divides cuBLAS's time (same output type) by the kernel's.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/gemm/gemm_rungs.h"
#include "bench/gemm/gemm_sweep.h"
#include "bench/gemm/lab_families.cuh"
#include "bench/gemm/lab_families.h"
#include "core/cuda/check.cuh"
#include "ops/matmul/gemm_cuda.h"
#include "ops/matmul/gemm_paths.h"
#include "ops/matmul/gemm_tma_cuda.h"

namespace {

using halfgrad::cuda::GemmArgs;
using halfgrad::cuda::GemmLayout;

#define BENCH_CUDA(call) HG_CUDA_CHECK("gemm_bench", call)
#define BENCH_CUBLAS(call)                                                                               \
  do {                                                                                                   \
    cublasStatus_t st_ = (call);                                                                         \
    HG_CHECK(st_ == CUBLAS_STATUS_SUCCESS, "gemm_bench: " #call " failed: " << cublasGetStatusString(st_)); \
  } while (0)

constexpr double kTolerance = 1e-3;

// ---------------------------------------------------------------------------------------------
// Device helpers: random fill, NaN poison, relative error, spin.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

/// Uniform in [-1, 1) from (seed, index), rounded to FP16; never all zeros.
__global__ void fill_half_kernel(uint16_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(hash32(seed * 0x9E3779B97F4A7C15ULL + i) >> 8) * (1.f / 8388608.f) - 1.f;
    p[i] = __half_as_ushort(__float2half_rn(u));
  }
}
__global__ void half_to_float_kernel(const uint16_t* h, float* f, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    f[i] = __half2float(__ushort_as_half(h[i]));
}

/// sums[0] += sum (C - ref)^2, sums[1] += sum ref^2 over the M x N window (leading dimension ldc).
__global__ void error_sums_kernel(const void* c, bool c_half, const float* ref, int64_t M, int64_t N, int64_t ldc,
                                  double* sums) {
  double err2 = 0, ref2 = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t at = (i / N) * ldc + i % N;
    const float v = c_half ? __half2float(static_cast<const __half*>(c)[at]) : static_cast<const float*>(c)[at];
    const double d = double(v) - double(ref[at]);
    err2 += d * d;
    ref2 += double(ref[at]) * ref[at];
  }
  for (int off = 16; off > 0; off /= 2) {
    err2 += __shfl_down_sync(0xffffffffu, err2, off);
    ref2 += __shfl_down_sync(0xffffffffu, ref2, off);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums[0], err2);
    atomicAdd(&sums[1], ref2);
  }
}

/// Keeps the GPU busy for `ns` nanoseconds so that the launches queued behind it run back to back.
__global__ void spin_kernel(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)); }

// ---------------------------------------------------------------------------------------------
// Host helpers.
// ---------------------------------------------------------------------------------------------

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(int64_t n) { BENCH_CUDA(cudaMalloc(&ptr, std::max<int64_t>(n, 1) * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

cudaStream_t stream() { return halfgrad::cuda::stream(); }

void fill_random(uint16_t* p, int64_t n, uint64_t seed) {
  fill_half_kernel<<<grid_for(n), 256, 0, stream()>>>(p, n, seed);
  HG_CUDA_LAUNCH_CHECK("gemm_bench fill");
}
void poison(void* p, int64_t bytes) { BENCH_CUDA(cudaMemsetAsync(p, 0xFF, bytes, stream())); }  // NaN in FP32 and FP16

/// ||C - ref|| / ||ref|| (NaN if C holds NaN).
double relative_error(const void* c, bool c_half, const float* ref, int64_t M, int64_t N, int64_t ldc) {
  static DeviceBuffer<double> sums(2);
  BENCH_CUDA(cudaMemsetAsync(sums.ptr, 0, 2 * sizeof(double), stream()));
  error_sums_kernel<<<grid_for(M * N), 256, 0, stream()>>>(c, c_half, ref, M, N, ldc, sums.ptr);
  HG_CUDA_LAUNCH_CHECK("gemm_bench error");
  double h[2];
  BENCH_CUDA(cudaMemcpyAsync(h, sums.ptr, sizeof(h), cudaMemcpyDeviceToHost, stream()));
  BENCH_CUDA(cudaStreamSynchronize(stream()));
  return std::sqrt(h[0]) / std::sqrt(h[1]);
}

cublasHandle_t cublas() {
  static cublasHandle_t h = [] {
    cublasHandle_t created;
    BENCH_CUBLAS(cublasCreate(&created));
    BENCH_CUBLAS(cublasSetStream(created, stream()));
    return created;
  }();
  return h;
}

/// The reference, in gemm_f16's terms. cuBLAS is column-major: a row-major (r x c) matrix is its
/// column-major (c x r) transpose, so row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
/// and an operand stored "as written" is exactly the transposed operand cuBLAS needs (CUBLAS_OP_N).
void cublas_gemm(const GemmArgs& a) {
  const cublasOperation_t op_a = a.a_layout == GemmLayout::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_b = a.b_layout == GemmLayout::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  BENCH_CUBLAS(cublasGemmEx(cublas(), op_b, op_a, static_cast<int>(a.N), static_cast<int>(a.M), static_cast<int>(a.K),
                            &a.alpha, a.B, CUDA_R_16F, static_cast<int>(a.ldb), a.A, CUDA_R_16F, static_cast<int>(a.lda),
                            &a.beta, a.C, a.c_half ? CUDA_R_16F : CUDA_R_32F, static_cast<int>(a.ldc),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/// Median milliseconds of one launch; launch(i) runs the kernel on input set i % sets.
double time_ms(const std::function<void(int)>& launch, int sets, int runs) {
  for (int i = 0; i < 3; ++i) launch(i % sets);
  std::vector<cudaEvent_t> ev(runs + 1);
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
  spin_kernel<<<1, 1, 0, stream()>>>(5'000'000);
  HG_CUDA_LAUNCH_CHECK("gemm_bench spin");
  BENCH_CUDA(cudaEventRecord(ev[0], stream()));
  for (int i = 0; i < runs; ++i) {
    launch((i + 3) % sets);
    BENCH_CUDA(cudaEventRecord(ev[i + 1], stream()));
  }
  BENCH_CUDA(cudaEventSynchronize(ev[runs]));
  std::vector<float> ms(runs);
  for (int i = 0; i < runs; ++i) BENCH_CUDA(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
  for (auto& e : ev) BENCH_CUDA(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return runs % 2 ? ms[runs / 2] : 0.5 * (ms[runs / 2 - 1] + ms[runs / 2]);
}

/// Milliseconds per launch of a stream of `runs` launches queued back to back between two events (no
/// event between launches: what a program that queues GEMM after GEMM sees, and the only way a
/// programmatic dependent launch's overlap with the kernel before it shows); the fastest of 3 such
/// streams. launch(i) runs the kernel on input set i % sets.
double time_stream_ms(const std::function<void(int)>& launch, int sets, int runs) {
  for (int i = 0; i < 3; ++i) launch(i % sets);
  cudaEvent_t ev[2];
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
  double best = INFINITY;
  for (int rep = 0; rep < 3; ++rep) {
    spin_kernel<<<1, 1, 0, stream()>>>(5'000'000);
    HG_CUDA_LAUNCH_CHECK("gemm_bench spin");
    BENCH_CUDA(cudaEventRecord(ev[0], stream()));
    for (int i = 0; i < runs; ++i) launch((i + 3) % sets);
    BENCH_CUDA(cudaEventRecord(ev[1], stream()));
    BENCH_CUDA(cudaEventSynchronize(ev[1]));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    best = std::min(best, static_cast<double>(ms) / runs);
  }
  for (auto& e : ev) BENCH_CUDA(cudaEventDestroy(e));
  return best;
}

int g_failures = 0;

const char* verdict(double err) {
  const bool pass = err < kTolerance;  // false for NaN
  if (!pass) ++g_failures;
  return pass ? "PASS" : "FAIL";
}

// ---------------------------------------------------------------------------------------------
// The ladder: every rung and gemm_f16 on dense N/N problems.
// ---------------------------------------------------------------------------------------------

struct Size {
  int64_t M, N, K;
  bool timed;
};

struct Row {
  std::string kernel;
  std::string note;  // "n/a: why" when the kernel cannot run the shape
  double err = NAN, ms = NAN;
  bool c_half = false, is_cublas = false;
};

void run_size(const Size& s, int64_t l2_bytes) {
  const int64_t M = s.M, N = s.N, K = s.K;
  const int64_t set_bytes = 2 * (M * K + K * N) + 6 * M * N;
  const int sets = s.timed ? static_cast<int>(std::clamp<int64_t>((2 * l2_bytes + set_bytes - 1) / set_bytes, 2, 16)) : 1;
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> A, B, Ch;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> Cf;
  for (int i = 0; i < sets; ++i) {
    A.emplace_back(new DeviceBuffer<uint16_t>(M * K));
    B.emplace_back(new DeviceBuffer<uint16_t>(K * N));
    Cf.emplace_back(new DeviceBuffer<float>(M * N));
    Ch.emplace_back(new DeviceBuffer<uint16_t>(M * N));
    fill_random(A[i]->ptr, M * K, 1000 * (M + 3 * N + 7 * K) + 2 * i);
    fill_random(B[i]->ptr, K * N, 1000 * (M + 3 * N + 7 * K) + 2 * i + 1);
  }
  DeviceBuffer<float> ref(M * N);
  auto args = [&](int i, bool c_half) {
    GemmArgs a{M, N, K, A[i]->ptr, K, GemmLayout::N, B[i]->ptr, N, GemmLayout::N,
               c_half ? static_cast<void*>(Ch[i]->ptr) : static_cast<void*>(Cf[i]->ptr), N, c_half};
    a.op = "gemm_bench";
    return a;
  };
  cublas_gemm(args(0, false));
  BENCH_CUDA(cudaMemcpyAsync(ref.ptr, Cf[0]->ptr, M * N * sizeof(float), cudaMemcpyDeviceToDevice, stream()));

  struct Kernel {
    const char* name;
    bool c_half, is_cublas;
    std::function<const char*(int)> run;  // nullptr, or why it cannot run
  };
  using RungFn = const char* (*)(const halfgrad::bench::DenseGemm&);
  auto rung = [&](const char* name, RungFn fn) {
    return Kernel{name, false, false, [&, fn](int i) { return fn({M, N, K, A[i]->ptr, B[i]->ptr, Cf[i]->ptr}); }};
  };
  std::vector<Kernel> kernels = {
      {"cublas (f32 out)", false, true, [&](int i) { cublas_gemm(args(i, false)); return (const char*)nullptr; }},
      {"cublas (f16 out)", true, true, [&](int i) { cublas_gemm(args(i, true)); return (const char*)nullptr; }},
      rung("wmma_global", halfgrad::bench::gemm_wmma_global),
      rung("wmma_smem_tiled", halfgrad::bench::gemm_wmma_smem_tiled),
      rung("mma_cp_async_pipeline", halfgrad::bench::gemm_mma_cp_async_pipeline),
      rung("mma_ldmatrix_swizzle", halfgrad::bench::gemm_mma_ldmatrix_swizzle),
      rung("mma_warp_tiled", halfgrad::bench::gemm_mma_warp_tiled),
      rung("wgmma_hopper", halfgrad::bench::gemm_wgmma_hopper),
      rung("tma_mbarrier_pipeline", halfgrad::bench::gemm_tma_mbarrier_pipeline),
      rung("warp_specialized", halfgrad::bench::gemm_warp_specialized),
      rung("persistent", halfgrad::bench::gemm_persistent),
      rung("cluster_multicast", halfgrad::bench::gemm_cluster_multicast),
      rung("tma_store_epilogue", halfgrad::bench::gemm_tma_store_epilogue),
      rung("tile_width", halfgrad::bench::gemm_tile_width),
      rung("split_k_cluster", halfgrad::bench::gemm_split_k_cluster),
      rung("multicast_pair", halfgrad::bench::gemm_multicast_pair),
      rung("dependent_launch", halfgrad::bench::gemm_dependent_launch),
      rung("multicast_a_pair", halfgrad::bench::gemm_multicast_a_pair),
      rung("multicast_a_cluster", halfgrad::bench::gemm_multicast_a_cluster),
      rung("cp_async_producer", halfgrad::bench::gemm_cp_async_producer),
      {"gemm_f16 (f32 out)", false, false, [&](int i) { halfgrad::cuda::gemm_f16(args(i, false)); return (const char*)nullptr; }},
      {"gemm_f16 (f16 out)", true, false, [&](int i) { halfgrad::cuda::gemm_f16(args(i, true)); return (const char*)nullptr; }},
  };

  const double flop = 2.0 * M * N * K;
  const int runs = flop >= 1e10 ? 10 : 30;
  std::vector<Row> rows;
  for (const Kernel& k : kernels) {
    Row r;
    r.kernel = k.name;
    r.c_half = k.c_half;
    r.is_cublas = k.is_cublas;
    void* c0 = k.c_half ? static_cast<void*>(Ch[0]->ptr) : static_cast<void*>(Cf[0]->ptr);
    poison(c0, M * N * (k.c_half ? 2 : 4));
    if (const char* why = k.run(0)) {
      r.note = std::string("n/a: ") + why;
    } else {
      r.err = relative_error(c0, k.c_half, ref.ptr, M, N, N);
      r.note = verdict(r.err);
      if (s.timed) r.ms = time_ms([&](int i) { k.run(i); }, sets, runs);
    }
    rows.push_back(r);
  }
  double cublas_ms[2] = {NAN, NAN};
  for (const Row& r : rows)
    if (r.is_cublas) cublas_ms[r.c_half] = r.ms;
  for (const Row& r : rows) {
    std::string check = r.note;
    if (!std::isnan(r.err)) {
      char err[32];
      std::snprintf(err, sizeof err, "  err %.2e", r.err);
      check += err;
    }
    std::printf("%-22s %5lldx%5lldx%5lld  %-44s", r.kernel.c_str(), (long long)M, (long long)N, (long long)K,
                check.c_str());
    if (!std::isnan(r.ms)) {
      std::printf(" %9.4f ms %8.1f TFLOP/s %6.2fx", r.ms, flop / (r.ms * 1e-3) / 1e12, cublas_ms[r.c_half] / r.ms);
    } else if (s.timed && r.note.rfind("n/a", 0) != 0) {
      std::printf(" (not timed)");
    }
    std::printf("\n");
  }
  std::printf("  (%s; %d input set%s rotated)\n\n", s.timed ? "timed: median of launches" : "checked only", sets,
              sets > 1 ? "s" : "");
}

// ---------------------------------------------------------------------------------------------
// gemm_f16 beyond the dense N/N case: every layout pair, padded and odd leading dimensions, a
// misaligned operand (scalar-load path), alpha and beta, FP16 and FP32 output.
// ---------------------------------------------------------------------------------------------

struct LayoutCase {
  int64_t M, N, K;
  GemmLayout a_layout, b_layout;
  int64_t lda_pad = 0, ldb_pad = 0, ldc_pad = 0;
  int64_t a_offset = 0;  // halfs: 1 makes A 2-byte aligned only
  float alpha = 1, beta = 0;
};

void run_layout_case(const LayoutCase& c, bool c_half, uint64_t seed,
                     halfgrad::cuda::GemmPath path = halfgrad::cuda::GemmPath::kAuto) {
  const int64_t a_rows = c.a_layout == GemmLayout::N ? c.M : c.K, a_cols = c.a_layout == GemmLayout::N ? c.K : c.M;
  const int64_t b_rows = c.b_layout == GemmLayout::N ? c.K : c.N, b_cols = c.b_layout == GemmLayout::N ? c.N : c.K;
  const int64_t lda = a_cols + c.lda_pad, ldb = b_cols + c.ldb_pad, ldc = c.N + c.ldc_pad;
  DeviceBuffer<uint16_t> A(a_rows * lda + c.a_offset), B(b_rows * ldb);
  fill_random(A.ptr, a_rows * lda + c.a_offset, seed);  // padding gets random values too: never read
  fill_random(B.ptr, b_rows * ldb, seed + 1);
  DeviceBuffer<float> ref(c.M * ldc);
  DeviceBuffer<float> Cf(c_half ? 0 : c.M * ldc);
  DeviceBuffer<uint16_t> Ch(c_half ? c.M * ldc : 0);
  void* C = c_half ? static_cast<void*>(Ch.ptr) : static_cast<void*>(Cf.ptr);
  if (c.beta != 0) {  // C starts as random FP16 values; the reference starts from the same values
    DeviceBuffer<uint16_t> init(c.M * ldc);
    fill_random(init.ptr, c.M * ldc, seed + 2);
    half_to_float_kernel<<<grid_for(c.M * ldc), 256, 0, stream()>>>(init.ptr, ref.ptr, c.M * ldc);
    HG_CUDA_LAUNCH_CHECK("gemm_bench convert");
    const int64_t bytes = c.M * ldc * (c_half ? 2 : 4);
    BENCH_CUDA(cudaMemcpyAsync(C, c_half ? static_cast<void*>(init.ptr) : static_cast<void*>(ref.ptr), bytes,
                               cudaMemcpyDeviceToDevice, stream()));
    BENCH_CUDA(cudaStreamSynchronize(stream()));
  } else {
    poison(C, c.M * ldc * (c_half ? 2 : 4));
  }
  GemmArgs a{c.M, c.N, c.K, A.ptr + c.a_offset, lda, c.a_layout, B.ptr, ldb, c.b_layout, C, ldc, c_half, c.alpha, c.beta};
  a.op = "gemm_bench";
  if (const char* why = halfgrad::cuda::gemm_f16_on(a, path)) {
    std::printf("gemm_f16 (forced path) %lldx%lldx%lld: n/a: %s\n", (long long)c.M, (long long)c.N, (long long)c.K, why);
    return;
  }
  GemmArgs r = a;
  r.C = ref.ptr;
  r.c_half = false;
  cublas_gemm(r);
  const double err = relative_error(C, c_half, ref.ptr, c.M, c.N, ldc);
  std::printf("gemm_f16%s %s%s %5lldx%5lldx%5lld lda %5lld%s ldb %5lld ldc %5lld alpha %.2f beta %.2f %s out  %s  err %.2e\n",
              path == halfgrad::cuda::GemmPath::kTmaPersistent ? " [tma]      "
              : path == halfgrad::cuda::GemmPath::kTmaStore ? " [tma_store]" : "", c.a_layout == GemmLayout::N ? "N" : "T",
              c.b_layout == GemmLayout::N ? "N" : "T", (long long)c.M, (long long)c.N, (long long)c.K, (long long)lda, c.a_offset ? "+1" : "  ", (long long)ldb, (long long)ldc,
              c.alpha, c.beta, c_half ? "f16" : "f32", verdict(err), err);

}

void run_layout_checks(bool quick) {
  std::vector<LayoutCase> cases;
  const GemmLayout kLayouts[] = {GemmLayout::N, GemmLayout::T};
  std::vector<Size> shapes = {{17, 33, 5, false}, {1, 1, 1, false},    {64, 3, 27, false},
                              {129, 257, 40, false}, {300, 520, 96, false}};
  if (!quick) shapes.push_back({1000, 1000, 1000, false});
  for (const Size& s : shapes)
    for (GemmLayout al : kLayouts)
      for (GemmLayout bl : kLayouts) cases.push_back({s.M, s.N, s.K, al, bl});
  // Padded leading dimensions (16-byte path), odd ones (scalar path), a misaligned A, alpha/beta.
  for (GemmLayout al : kLayouts)
    for (GemmLayout bl : kLayouts) {
      cases.push_back({200, 136, 72, al, bl, 8, 16, 5});
      cases.push_back({200, 136, 72, al, bl, 3, 1, 0});
      cases.push_back({131, 77, 45, al, bl, 0, 0, 1, 1});
      cases.push_back({260, 300, 100, al, bl, 8, 0, 0, 0, 1.5f, -0.75f});
    }
  // Large enough for the Hopper wgmma path on sm_90 (128x256 tiles for >= 3/4 of the SMs, M, N, K % 8 == 0):
  // edge tiles in M and N, K not a multiple of the 64-wide slice, padded leading dimensions, alpha/beta.
  for (GemmLayout al : kLayouts)
    for (GemmLayout bl : kLayouts) {
      cases.push_back({2056, 2104, 520, al, bl, 0, 0, 1});  // odd ldc: element stores
      cases.push_back({2304, 2048, 264, al, bl, 8, 16, 4, 0, 1.5f, -0.75f});
    }
  uint64_t seed = 77;
  for (const LayoutCase& c : cases)
    for (bool c_half : {false, true}) run_layout_case(c, c_half, seed += 3);
  // The TMA kernel forced onto small and odd shapes (gemm_f16 gives it only large ones): edge tiles in
  // M, N and K (zero-filled boxes), K below one slice, padded lds, alpha/beta, every layout. Leading
  // dimensions must be multiples of 8 for TMA: shapes whose natural ones are not get padded ones.
  std::vector<LayoutCase> tma_cases;
  auto pad8 = [](int64_t x) { return (8 - x % 8) % 8; };  // to the next multiple of 8
  for (GemmLayout al : kLayouts)
    for (GemmLayout bl : kLayouts) {
      const bool an = al == GemmLayout::N, bn = bl == GemmLayout::N;
      tma_cases.push_back({129, 264, 40, al, bl, pad8(an ? 40 : 129), pad8(bn ? 264 : 40) + 16});
      tma_cases.push_back({17, 33, 5, al, bl, pad8(an ? 5 : 17) + 8, pad8(bn ? 33 : 5)});
      tma_cases.push_back({1000, 1000, 1000, al, bl});
      tma_cases.push_back({300, 520, 200, al, bl, pad8(an ? 200 : 300), 0, 3, 0, 1.5f, -0.75f});
    }
  for (GemmLayout al : kLayouts)
    for (GemmLayout bl : kLayouts) tma_cases.push_back({17, 33, 5, al, bl, pad8(al == GemmLayout::N ? 5 : 17),
                                                        pad8(bl == GemmLayout::N ? 33 : 5), 7});  // ldc 40: TMA store
  // Both epilogues: from the registers, and by TMA stores (which fall back to the registers where
  // beta != 0 or C's row stride is not a multiple of 16 bytes).
  for (const LayoutCase& c : tma_cases)
    for (bool c_half : {false, true})
      for (halfgrad::cuda::GemmPath path : {halfgrad::cuda::GemmPath::kTmaPersistent, halfgrad::cuda::GemmPath::kTmaStore})
        run_layout_case(c, c_half, seed += 3, path);
  std::printf("\n");
}

/// Bad arguments must raise halfgrad::Error before anything is launched.
void run_argument_checks() {
  DeviceBuffer<uint16_t> A(64), B(64);
  DeviceBuffer<float> C(64);
  auto expect_error = [](const char* what, GemmArgs a) {
    bool threw = false;
    try {
      halfgrad::cuda::gemm_f16(a);
    } catch (const halfgrad::Error& e) {
      threw = std::strstr(e.what(), "bad_args") != nullptr;  // the message names the op
      std::printf("gemm_f16 rejects %-22s %s  (\"%s\")\n", what, threw ? "PASS" : "FAIL", e.what());
    }
    if (!threw) {
      ++g_failures;
      std::printf("gemm_f16 rejects %-22s FAIL (no error)\n", what);
    }
  };
  const GemmArgs ok{8, 8, 8, A.ptr, 8, GemmLayout::N, B.ptr, 8, GemmLayout::N, C.ptr, 8, false, 1, 0, "bad_args"};
  GemmArgs a = ok;
  a.M = 0;
  expect_error("M = 0", a);
  a = ok;
  a.A = nullptr;
  expect_error("null A", a);
  a = ok;
  a.lda = 7;
  expect_error("lda < K", a);
  a = ok;
  a.b_layout = GemmLayout::T;
  a.ldb = 4;
  expect_error("ldb < K (B layout T)", a);
  a = ok;
  a.ldc = 3;
  expect_error("ldc < N", a);
  std::printf("\n");
}


// ---------------------------------------------------------------------------------------------
// --sweep: tile configurations of the production block function (gemm_sweep.cu) on dense N/N
// problems, both output types, each checked against cuBLAS and timed beside it.
// ---------------------------------------------------------------------------------------------

void run_sweep_size(int64_t n, int64_t l2_bytes) {
  const int64_t M = n, N = n, K = n;
  const int64_t set_bytes = 2 * (M * K + K * N) + 6 * M * N;
  const int sets = static_cast<int>(std::clamp<int64_t>((2 * l2_bytes + set_bytes - 1) / set_bytes, 2, 16));
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> A, B, Ch;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> Cf;
  for (int i = 0; i < sets; ++i) {
    A.emplace_back(new DeviceBuffer<uint16_t>(M * K));
    B.emplace_back(new DeviceBuffer<uint16_t>(K * N));
    Cf.emplace_back(new DeviceBuffer<float>(M * N));
    Ch.emplace_back(new DeviceBuffer<uint16_t>(M * N));
    fill_random(A[i]->ptr, M * K, 5000 * n + 2 * i);
    fill_random(B[i]->ptr, K * N, 5000 * n + 2 * i + 1);
  }
  auto args = [&](int i, bool c_half) {
    GemmArgs a{M, N, K, A[i]->ptr, K, GemmLayout::N, B[i]->ptr, N, GemmLayout::N,
               c_half ? static_cast<void*>(Ch[i]->ptr) : static_cast<void*>(Cf[i]->ptr), N, c_half};
    a.op = "gemm_bench --sweep";
    return a;
  };
  DeviceBuffer<float> ref(M * N);
  cublas_gemm(args(0, false));
  BENCH_CUDA(cudaMemcpyAsync(ref.ptr, Cf[0]->ptr, M * N * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  const double flop = 2.0 * M * N * K;
  const int runs = flop >= 1e10 ? 10 : 30;

  // Checks launch(0) into C of set 0 (poisoned first), then times launch(i) over the sets.
  auto measure = [&](bool c_half, const std::function<void(int)>& launch, double* err) {
    void* c0 = c_half ? static_cast<void*>(Ch[0]->ptr) : static_cast<void*>(Cf[0]->ptr);
    poison(c0, M * N * (c_half ? 2 : 4));
    launch(0);
    *err = relative_error(c0, c_half, ref.ptr, M, N, N);
    return time_ms(launch, sets, runs);
  };
  auto tflops = [&](double ms) { return flop / (ms * 1e-3) / 1e12; };
  double cublas_ms[2], err;
  for (bool c_half : {false, true})
    cublas_ms[c_half] = measure(c_half, [&](int i) { cublas_gemm(args(i, c_half)); }, &err);
  std::printf("%lldx%lldx%lld  cuBLAS: f32 out %.1f TFLOP/s, f16 out %.1f TFLOP/s\n", (long long)M, (long long)N,
              (long long)K, tflops(cublas_ms[0]), tflops(cublas_ms[1]));

  auto print_row = [&](const char* id, const char* config, const char* predicted, const double (&ms)[2],
                       const double (&e)[2]) {
    const bool pass32 = std::strcmp(verdict(e[0]), "PASS") == 0;
    const bool pass16 = std::strcmp(verdict(e[1]), "PASS") == 0;
    const char* check = pass32 && pass16 ? "PASS" : "FAIL";
    std::printf("  %-4s %-80s %6.1f %5.2fx %6.1f %5.2fx  %s %.1e/%.1e  pred %s\n", id, config, tflops(ms[0]),
                cublas_ms[0] / ms[0], tflops(ms[1]), cublas_ms[1] / ms[1], check, e[0], e[1], predicted);
  };
  std::printf("  %-4s %-80s %6s %6s %6s %6s  %s\n", "id", "config", "f32", "ratio", "f16", "ratio", "check");
  for (const halfgrad::bench::SweepVariant& v : halfgrad::bench::sweep_variants()) {
    double ms[2], e[2];
    for (bool c_half : {false, true}) {
      ms[c_half] = measure(
          c_half,
          [&](int i) {
            v.run({M, N, K, A[i]->ptr, B[i]->ptr,
                   c_half ? static_cast<void*>(Ch[i]->ptr) : static_cast<void*>(Cf[i]->ptr), c_half});
          },
          &e[c_half]);
    }
    print_row(v.id, v.config.c_str(), v.predicted, ms, e);
  }
  double ms[2], e[2];
  for (bool c_half : {false, true})
    ms[c_half] = measure(c_half, [&](int i) { halfgrad::cuda::gemm_f16(args(i, c_half)); }, &e[c_half]);
  print_row("prod", "gemm_f16 (production choice for this size)", "-", ms, e);
  std::printf("\n");
}

// ---------------------------------------------------------------------------------------------
// --dispatch: every kernel family of gemm_f16 (gemm_paths.h) and of the lab (lab_families.h) on the
// shapes the dispatch rule has to
// decide: square sizes, tall, wide, small K, the U-Net's conv-transpose GEMMs, odd sizes; N/N and
// the layouts the autograd backward uses. Each run is checked against cuBLAS and timed beside it.
// ---------------------------------------------------------------------------------------------

struct DispatchShape {
  const char* what;
  int64_t M, N, K;
  GemmLayout a_layout, b_layout;
};

void run_dispatch_shape(const DispatchShape& d, int64_t l2_bytes) {
  using halfgrad::cuda::GemmPath;
  const int64_t M = d.M, N = d.N, K = d.K;
  const bool at = d.a_layout == GemmLayout::T, bt = d.b_layout == GemmLayout::T;
  const int64_t lda = at ? M : K, ldb = bt ? K : N;
  const int64_t set_bytes = 2 * (M * K + K * N) + 6 * M * N;
  const int sets = static_cast<int>(std::clamp<int64_t>((2 * l2_bytes + set_bytes - 1) / set_bytes, 2, 16));
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> A, B, Ch;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> Cf;
  for (int i = 0; i < sets; ++i) {
    A.emplace_back(new DeviceBuffer<uint16_t>(M * K));
    B.emplace_back(new DeviceBuffer<uint16_t>(K * N));
    Cf.emplace_back(new DeviceBuffer<float>(M * N));
    Ch.emplace_back(new DeviceBuffer<uint16_t>(M * N));
    fill_random(A[i]->ptr, M * K, 7000 * (M + 3 * N + 7 * K) + 2 * i);
    fill_random(B[i]->ptr, K * N, 7000 * (M + 3 * N + 7 * K) + 2 * i + 1);
  }
  auto args = [&](int i, bool c_half) {
    GemmArgs a{M, N, K, A[i]->ptr, lda, d.a_layout, B[i]->ptr, ldb, d.b_layout,
               c_half ? static_cast<void*>(Ch[i]->ptr) : static_cast<void*>(Cf[i]->ptr), N, c_half};
    a.op = "gemm_bench --dispatch";
    return a;
  };
  DeviceBuffer<float> ref(M * N);
  cublas_gemm(args(0, false));
  BENCH_CUDA(cudaMemcpyAsync(ref.ptr, Cf[0]->ptr, M * N * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  const double flop = 2.0 * M * N * K;
  const int runs = flop >= 1e10 ? 10 : 30;
  auto tflops = [&](double ms) { return flop / (ms * 1e-3) / 1e12; };

  using LabFamily = halfgrad::cuda::gemm_lab::Family;
  struct Family {
    const char* name;
    GemmPath path;  // kAuto with is_cublas: cuBLAS
    bool is_cublas;
    bool is_lab = false;  // then `lab`, not `path`: lab_families.h
    LabFamily lab = LabFamily::kWgmma;
  };
  const Family families[] = {{"cublas", GemmPath::kAuto, true},
                             {"mma_sync", GemmPath::kMmaSync, false},
                             {"wgmma", GemmPath::kAuto, false, true, LabFamily::kWgmma},
                             {"tma", GemmPath::kTmaPersistent, false},
                             {"tma_store", GemmPath::kTmaStore, false},
                             {"tma_store_128", GemmPath::kTmaStore128, false},
                             {"tma_store_64", GemmPath::kTmaStore64, false},
                             {"split_128", GemmPath::kTmaSplit128, false},
                             {"split_64", GemmPath::kTmaSplit64, false},
                             {"pair_256", GemmPath::kTmaPair256, false},
                             {"pair_128", GemmPath::kTmaPair128, false},
                             {"pair_a_128", GemmPath::kTmaPairA128, false},
                             {"pair_a_64", GemmPath::kTmaPairA64, false},
                             {"quad_a_64", GemmPath::kAuto, false, true, LabFamily::kTmaQuadA64},
                             {"oct_a_64", GemmPath::kAuto, false, true, LabFamily::kTmaOctA64},
                             {"cp_async_128", GemmPath::kAuto, false, true, LabFamily::kTmaCpAsync128},
                             {"cp_async_64", GemmPath::kAuto, false, true, LabFamily::kTmaCpAsync64},
                             {"planned_serial", GemmPath::kTmaPlannedSerial, false},
                             {"auto", GemmPath::kAuto, false}};
  constexpr int kFamilies = sizeof(families) / sizeof(families[0]);
  // Every family is timed kRounds times, the rounds interleaved (family 0, 1, ..., then again), and
  // keeps its fastest round's median: a clock or power swing during one family's turn then moves
  // every family's figure, not just the one being timed (one round, in order, once gave the auto
  // column 0.92x where the same kernel, forced, measured 0.98x just before it).
  constexpr int kRounds = 3;
  std::printf("%-22s %6lldx%6lldx%5lld %s%s", d.what, (long long)M, (long long)N, (long long)K, at ? "T" : "N",
              bt ? "T" : "N");
  for (bool c_half : {false, true}) {
    std::printf("  | %s:", c_half ? "f16" : "f32");
    auto launch = [&](const Family& f, int i) -> const char* {
      if (f.is_cublas) {
        cublas_gemm(args(i, c_half));
        return nullptr;
      }
      if (f.is_lab) return halfgrad::cuda::gemm_lab::gemm_f16_on(args(i, c_half), f.lab);
      return halfgrad::cuda::gemm_f16_on(args(i, c_half), f.path);
    };
    const char* why[kFamilies] = {};
    bool failed[kFamilies] = {};
    void* c0 = c_half ? static_cast<void*>(Ch[0]->ptr) : static_cast<void*>(Cf[0]->ptr);
    for (int k = 0; k < kFamilies; ++k) {
      poison(c0, M * N * (c_half ? 2 : 4));
      why[k] = launch(families[k], 0);
      if (why[k] == nullptr) failed[k] = std::strcmp(verdict(relative_error(c0, c_half, ref.ptr, M, N, N)), "PASS") != 0;
    }
    double ms[kFamilies];
    for (double& m : ms) m = INFINITY;
    for (int round = 0; round < kRounds; ++round) {
      for (int k = 0; k < kFamilies; ++k) {
        if (why[k] != nullptr) continue;
        ms[k] = std::min(ms[k], time_ms([&](int i) { launch(families[k], i); }, sets, runs));
      }
    }
    const char* best = "-";
    double best_ms = INFINITY;
    for (int k = 0; k < kFamilies; ++k) {
      const Family& f = families[k];
      if (why[k] != nullptr) {
        std::printf(" %s n/a", f.name);
        continue;
      }
      const bool is_auto = !f.is_cublas && !f.is_lab && f.path == GemmPath::kAuto;
      if (!f.is_cublas && !is_auto && ms[k] < best_ms) {
        best_ms = ms[k];
        best = f.name;
      }
      const std::string name = is_auto ? "auto[" + halfgrad::cuda::gemm_f16_choice(args(0, c_half)) + "]" : f.name;
      std::printf(" %s %.0f (%.2fx)%s", name.c_str(), tflops(ms[k]), ms[0] / ms[k], failed[k] ? " FAIL" : "");
    }
    std::printf(" best %s", best);
  }
  std::printf("\n");
}

/// --profile M N K: each family of --dispatch launched 3 times on one N/N problem (FP32 out, then FP16
/// out), nothing timed, for a profiler to time kernel by kernel (`ncu --metrics gpu__time_duration.sum
/// gemm_bench --profile 1024 1024 1024`): the kernel's own duration beside the event-to-event time that
/// --dispatch reports.
void run_profile(int64_t M, int64_t N, int64_t K) {
  using halfgrad::cuda::GemmPath;
  DeviceBuffer<uint16_t> A(M * K), B(K * N), Ch(M * N);
  DeviceBuffer<float> Cf(M * N);
  fill_random(A.ptr, M * K, 17);
  fill_random(B.ptr, K * N, 18);
  for (bool c_half : {false, true}) {
    GemmArgs a{M, N, K, A.ptr, K, GemmLayout::N, B.ptr, N, GemmLayout::N,
               c_half ? static_cast<void*>(Ch.ptr) : static_cast<void*>(Cf.ptr), N, c_half};
    a.op = "gemm_bench --profile";
    for (int i = 0; i < 3; ++i) cublas_gemm(a);
    for (GemmPath path : {GemmPath::kMmaSync, GemmPath::kTmaPersistent, GemmPath::kTmaStore, GemmPath::kTmaStore128,
                          GemmPath::kTmaStore64, GemmPath::kTmaSplit128, GemmPath::kTmaSplit64, GemmPath::kTmaPair256,
                          GemmPath::kTmaPair128, GemmPath::kTmaPairA128, GemmPath::kTmaPairA64}) {
      for (int i = 0; i < 3; ++i) {
        if (const char* why = halfgrad::cuda::gemm_f16_on(a, path)) std::printf("not run: %s\n", why);
      }
    }
    namespace lab = halfgrad::cuda::gemm_lab;
    for (lab::Family family : {lab::Family::kTmaQuadA64, lab::Family::kTmaOctA64, lab::Family::kTmaCpAsync128,
                               lab::Family::kTmaCpAsync64}) {
      for (int i = 0; i < 3; ++i) {
        if (const char* why = lab::gemm_f16_on(a, family)) std::printf("not run: %s: %s\n", lab::family_name(family), why);
      }
    }
  }
  BENCH_CUDA(cudaDeviceSynchronize());
}

/// --dependent: rung 15 (programmatic dependent launch) against the same kernel launched serially
/// and cuBLAS, each timed both ways: events around every launch (as --dispatch) and a stream of
/// launches between two events (time_stream_ms). Checked against cuBLAS like --dispatch.
void run_dependent_shape(const DispatchShape& d, int64_t l2_bytes) {
  using halfgrad::cuda::GemmPath;
  const int64_t M = d.M, N = d.N, K = d.K;
  const bool at = d.a_layout == GemmLayout::T, bt = d.b_layout == GemmLayout::T;
  const int64_t lda = at ? M : K, ldb = bt ? K : N;
  const int64_t set_bytes = 2 * (M * K + K * N) + 6 * M * N;
  const int sets = static_cast<int>(std::clamp<int64_t>((2 * l2_bytes + set_bytes - 1) / set_bytes, 2, 16));
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> A, B, Ch;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> Cf;
  for (int i = 0; i < sets; ++i) {
    A.emplace_back(new DeviceBuffer<uint16_t>(M * K));
    B.emplace_back(new DeviceBuffer<uint16_t>(K * N));
    Cf.emplace_back(new DeviceBuffer<float>(M * N));
    Ch.emplace_back(new DeviceBuffer<uint16_t>(M * N));
    fill_random(A[i]->ptr, M * K, 9000 * (M + 3 * N + 7 * K) + 2 * i);
    fill_random(B[i]->ptr, K * N, 9000 * (M + 3 * N + 7 * K) + 2 * i + 1);
  }
  auto args = [&](int i, bool c_half) {
    GemmArgs a{M, N, K, A[i]->ptr, lda, d.a_layout, B[i]->ptr, ldb, d.b_layout,
               c_half ? static_cast<void*>(Ch[i]->ptr) : static_cast<void*>(Cf[i]->ptr), N, c_half};
    a.op = "gemm_bench --dependent";
    return a;
  };
  DeviceBuffer<float> ref(M * N);
  cublas_gemm(args(0, false));
  BENCH_CUDA(cudaMemcpyAsync(ref.ptr, Cf[0]->ptr, M * N * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  const double flop = 2.0 * M * N * K;
  const int runs = flop >= 1e10 ? 10 : 30;
  auto tflops = [&](double ms) { return flop / (ms * 1e-3) / 1e12; };
  // cuBLAS, the planned kernel launched serially (rungs 12-13), the same launched dependently (rung 15).
  const char* names[3] = {"cublas", "serial", "dependent"};
  const GemmPath paths[3] = {GemmPath::kAuto, GemmPath::kTmaPlannedSerial, GemmPath::kTmaPlanned};
  std::printf("%-18s %6lldx%6lldx%5lld %s%s", d.what, (long long)M, (long long)N, (long long)K, at ? "T" : "N",
              bt ? "T" : "N");
  for (bool c_half : {false, true}) {
    auto launch = [&](int k, int i) -> const char* {
      if (k == 0) {
        cublas_gemm(args(i, c_half));
        return nullptr;
      }
      return halfgrad::cuda::gemm_f16_on(args(i, c_half), paths[k]);
    };
    const char* why[3] = {};
    bool failed[3] = {};
    void* c0 = c_half ? static_cast<void*>(Ch[0]->ptr) : static_cast<void*>(Cf[0]->ptr);
    for (int k = 0; k < 3; ++k) {
      poison(c0, M * N * (c_half ? 2 : 4));
      why[k] = launch(k, 0);
      if (why[k] == nullptr) failed[k] = std::strcmp(verdict(relative_error(c0, c_half, ref.ptr, M, N, N)), "PASS") != 0;
    }
    double each[3], streamed[3];
    for (int k = 0; k < 3; ++k) each[k] = streamed[k] = INFINITY;
    for (int round = 0; round < 3; ++round) {  // interleaved rounds, as --dispatch
      for (int k = 0; k < 3; ++k) {
        if (why[k] != nullptr) continue;
        each[k] = std::min(each[k], time_ms([&](int i) { launch(k, i); }, sets, runs));
        streamed[k] = std::min(streamed[k], time_stream_ms([&](int i) { launch(k, i); }, sets, runs));
      }
    }
    std::printf("  | %s each/stream:", c_half ? "f16" : "f32");
    for (int k = 0; k < 3; ++k) {
      if (why[k] != nullptr) {
        std::printf(" %s n/a", names[k]);
        continue;
      }
      std::printf(" %s %.0f/%.0f (%.2fx/%.2fx)%s", names[k], tflops(each[k]), tflops(streamed[k]), each[0] / each[k],
                  streamed[0] / streamed[k], failed[k] ? " FAIL" : "");
    }
  }
  std::printf("\n");
}

void run_dependent(int64_t l2) {
  const GemmLayout n = GemmLayout::N, t = GemmLayout::T;
  const DispatchShape shapes[] = {
      {"square", 1000, 1000, 1000, n, n},  {"square N/T", 1000, 1000, 1000, n, t},
      {"square", 1024, 1024, 1024, n, n},  {"square", 2048, 2048, 2048, n, n},
      {"square", 4096, 4096, 4096, n, n},  {"square", 8192, 8192, 8192, n, n},
      {"tall", 16384, 256, 1024, n, n},    {"large K", 1024, 1024, 16384, n, n},
      {"unet up 256->128", 8 * 3 * 4 * 3, 8 * 128, 256, n, t},
      {"unet up 128->64", 8 * 6 * 8 * 6, 8 * 64, 128, n, t},
      {"unet up 64->32", 8 * 12 * 16 * 12, 8 * 32, 64, n, t},
      {"unet up 32->16", 8 * 24 * 32 * 24, 8 * 16, 32, n, t},
  };
  std::printf("TFLOP/s timed per launch / as a stream of launches (ratio to cuBLAS timed the same way, same output\n"
              "type); serial: tile_plan's kernel, ordinary launch; dependent: the same, programmatic dependent launch\n\n");
  for (const DispatchShape& d : shapes) run_dependent_shape(d, l2);
  std::printf("\n");
}

/// --dispatch: TFLOP/s of every family per shape, and the best non-cuBLAS family.
void run_dispatch(int64_t l2) {
  const GemmLayout n = GemmLayout::N, t = GemmLayout::T;
  std::vector<DispatchShape> shapes;
  for (int64_t s : {1000, 1024, 1536, 2048, 3072, 4096, 6144, 8192}) shapes.push_back({"square", s, s, s, n, n});
  for (int64_t s : {2048, 4096, 8192}) shapes.push_back({"square N/T", s, s, s, n, t});
  shapes.push_back({"square T/N", 4096, 4096, 4096, t, n});
  shapes.push_back({"square T/T", 4096, 4096, 4096, t, t});
  shapes.push_back({"tall", 16384, 256, 1024, n, n});
  shapes.push_back({"tall", 65536, 512, 1024, n, n});
  shapes.push_back({"wide", 256, 16384, 1024, n, n});
  shapes.push_back({"wide", 512, 65536, 1024, n, n});
  shapes.push_back({"small K", 4096, 4096, 64, n, n});
  shapes.push_back({"small K", 8192, 8192, 64, n, n});
  shapes.push_back({"large K", 1024, 1024, 16384, n, n});
  // The reference U-Net's 2x2x2 stride-2 up-convolutions as GEMMs (ops/conv/conv_transpose3d_cuda.cu:
  // M = batch * voxels in, N = 8 * Cout, K = Cin; B (N, K) is layout T), batch 8, 48x64x48 volumes.
  shapes.push_back({"unet up 256->128", 8 * 3 * 4 * 3, 8 * 128, 256, n, t});
  shapes.push_back({"unet up 128->64", 8 * 6 * 8 * 6, 8 * 64, 128, n, t});
  shapes.push_back({"unet up 64->32", 8 * 12 * 16 * 12, 8 * 32, 64, n, t});
  shapes.push_back({"unet up 32->16", 8 * 24 * 32 * 24, 8 * 16, 32, n, t});
  shapes.push_back({"odd", 4095, 4095, 4095, n, n});
  shapes.push_back({"odd", 129, 257, 40, n, n});
  shapes.push_back({"odd", 1000, 1000, 1000, n, t});
  // Rows of 32-byte sectors that are not 128-byte lines (1008: 2016 bytes, 784: 1568), and rows that
  // are not whole sectors (1016: 2032 bytes; 1512, 2008, 3000: 144, 256, 576 tiles of 128 x 128;
  // 1400 and 8008: an odd number of tile-rows, which B-sharing pairs cannot take; then A's rows only
  // or B's only): tile_plan's row-alignment rule and its pairs.
  shapes.push_back({"32-byte rows", 1008, 1008, 1008, n, n});
  shapes.push_back({"32-byte rows", 1008, 1008, 1008, n, t});
  shapes.push_back({"32-byte rows", 784, 784, 784, n, n});
  shapes.push_back({"16-byte rows", 1016, 1016, 1016, n, n});
  for (int64_t s : {1400, 1512, 2008, 3000, 8008}) shapes.push_back({"16-byte rows", s, s, s, n, n});
  shapes.push_back({"16-byte rows A", 2048, 2048, 2008, n, n});  // lda = K = 2008: A's rows only
  shapes.push_back({"16-byte rows B", 2008, 2008, 2048, n, n});  // ldb = N = 2008: B's rows only
  shapes.push_back({"16-byte rows", 1000, 1000, 16000, n, n});  // B's rows only; a split's K
  std::printf("TFLOP/s per family (ratio to cuBLAS, same output type); 'auto[f]' is gemm_f16's own choice, family f\n\n");
  for (const DispatchShape& d : shapes) run_dispatch_shape(d, l2);
  std::printf("\n");
}

/// The default mode: every rung and gemm_f16 at each size, then gemm_f16's layout and argument checks.
void run_ladder(bool quick, int64_t l2) {
  std::vector<Size> sizes = {{17, 33, 5, false}, {1, 1, 1, false}, {64, 3, 27, false}, {129, 257, 40, false},
                             {1024, 1024, 1024, true}, {4096, 4096, 4096, true}};
  if (!quick) {
    sizes.push_back({2048, 2048, 2048, true});  // between the small-tile and wgmma regimes on sm_90
    sizes.push_back({8192, 8192, 8192, true});
    sizes.push_back({1000, 1000, 1000, true});
    sizes.push_back({4095, 4095, 4095, true});
  }
  std::printf("%-22s %-17s  %-44s %12s %16s %7s\n\n", "kernel", "M x N x K", "check (rel. Frobenius error < 1e-3)",
              "time", "rate", "cuBLAS");
  for (const Size& s : sizes) run_size(s, l2);
  run_layout_checks(quick);
  run_argument_checks();
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, sweep = false, dispatch = false, dependent = false;
  int64_t profile[3] = {0, 0, 0};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--profile") == 0 && i + 3 < argc) {
      for (int64_t& e : profile) e = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--dispatch") == 0) {
      dispatch = true;
    } else if (std::strcmp(argv[i], "--dependent") == 0) {
      dependent = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick | --sweep | --dispatch | --dependent | --profile M N K]\n", argv[0]);
      return 2;
    }
  }
  try {
    int device = 0, l2 = 0;
    cudaDeviceProp prop;
    BENCH_CUDA(cudaGetDevice(&device));
    BENCH_CUDA(cudaGetDeviceProperties(&prop, device));
    BENCH_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    std::printf("%s (sm_%d%d, %d SMs, L2 %d MiB)\n\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                l2 >> 20);
    HG_CHECK(prop.major >= 8, "gemm_bench: needs sm_80 or newer (cp.async, ldmatrix, mma.sync.m16n8k16)");
    if (prop.major == 9 && prop.minor == 0 && (dispatch || profile[0] > 0)) {
      // A cluster must fit in one GPC: how many CTAs of each cluster family the GPU holds at once.
      namespace gt = halfgrad::cuda::gemm_tma;
      const char* op = "gemm_bench (occupancy)";
      std::printf("resident CTAs: unclustered %lld, split_64 %lld, pair_128 %lld, pair_a_64 %lld, quad_a_64 %lld, "
                  "oct_a_64 %lld\n\n",
                  (long long)gt::resident_ctas({64, 1}, op), (long long)gt::resident_ctas({64, 2}, op),
                  (long long)gt::resident_ctas({128, 1, 2}, op), (long long)gt::resident_ctas({64, 1, 2, true}, op),
                  (long long)halfgrad::cuda::gemm_lab::cluster_resident_ctas(4, op),
                  (long long)halfgrad::cuda::gemm_lab::cluster_resident_ctas(8, op));
    }
    if (profile[0] > 0) {
      HG_CHECK(profile[1] > 0 && profile[2] > 0, "gemm_bench --profile: M, N, K must be >= 1");
      run_profile(profile[0], profile[1], profile[2]);
    } else if (dispatch) {
      run_dispatch(l2);
    } else if (dependent) {
      run_dependent(l2);
    } else if (sweep) {
      std::printf("TFLOP/s and ratio to cuBLAS (same output type, same run); check: rel. Frobenius error < 1e-3\n\n");
      for (int64_t n : {1024, 4096, 8192}) run_sweep_size(n, l2);
    } else {
      run_ladder(quick, l2);
    }
    BENCH_CUDA(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 2;
  }
  if (g_failures) {
    std::printf("%d check(s) FAILED\n", g_failures);
    return 1;
  }
  std::printf("all checks PASS\n");
  return 0;
}
