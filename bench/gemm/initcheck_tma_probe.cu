// initcheck_tma_probe.cu - does compute-sanitizer's initcheck see global memory written by TMA?
// It does not (compute-sanitizer of CUDA 13.0 on the H200, 2026-12-04): three 4 KiB buffers, one
// written by plain stores, one by a bulk copy from shared memory (cp.async.bulk), one by a TMA tensor
// store (cp.async.bulk.tensor.2d); all three read back the values written (the program prints them),
// and initcheck reports the second and third as uninitialized, every 32 bytes of them, when they are
// copied to the host (errors at 32-byte steps, 255 in all), the first not at all. So on sm_90 initcheck flags the outputs the
// GEMM's TMA-store epilogue wrote into memory nothing else had initialised (gemm_cuda.cu, hopper_path): 241,264 errors on 'gemm tma*', while the
// poison runs found every element written. That every element is written is checked by those runs
// (HALFGRAD_CUDA_POISON=0 and 255: an element left unwritten reads as 0 or as FP16 NaN and fails the
// comparison with the CPU), which bench/run_gpu_bench.sh's sanitize phase runs beside initcheck.
// Built beside gemm_bench (target initcheck_tma_probe, sm_90a; in build-gpu/ by tools/gpu/device_build.sh):
//   build-gpu/bench/gemm/initcheck_tma_probe && compute-sanitizer --tool initcheck build-gpu/bench/gemm/initcheck_tma_probe
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
__global__ void bulk_store(float* g, int n) {  // cp.async.bulk global <- shared, n floats (n*4 % 16 == 0)
  __shared__ alignas(128) float s[1024];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = 1.0f + i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t sa = static_cast<uint32_t>(__cvta_generic_to_shared(s));
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(g), "r"(sa), "r"(n * 4) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}
__global__ void tensor_store(const __grid_constant__ CUtensorMap map) {  // a 32 x 32 float box at (0, 0)
  __shared__ alignas(128) float s[32 * 32];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) s[i] = 2.0f + i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t sa = static_cast<uint32_t>(__cvta_generic_to_shared(s));
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 :: "l"(&map), "r"(sa), "r"(0), "r"(0) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}
__global__ void plain_store(float* g, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x) g[i] = 3.0f; }
// Exits 1 unless every buffer reads back what its kernel wrote.
int main() {
  const int n = 1024;
  float *a, *b, *c;
  cudaMalloc(&a, n * 4);
  cudaMalloc(&b, n * 4);
  cudaMalloc(&c, n * 4);
  static float h[n];
  int bad = 0;
  auto check = [&](const char* what, const float* d, float first) {
    cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += h[i] != (first == 3.0f ? 3.0f : first + i);
    std::printf("%s: %d of %d elements wrong (%s)\n", what, wrong, n, cudaGetErrorString(cudaGetLastError()));
    bad += wrong;
  };
  plain_store<<<1, 128>>>(c, n);
  check("plain stores", c, 3.0f);
  bulk_store<<<1, 128>>>(a, n);
  check("cp.async.bulk store", a, 1.0f);
  CUtensorMap map;
  cuuint64_t dims[2] = {32, 32}, strides[1] = {32 * 4};
  cuuint32_t box[2] = {32, 32}, es[2] = {1, 1};
  // Through the runtime's driver entry point, as ops/matmul/tensor_map.cu: no link to libcuda.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    std::printf("the driver has no cuTensorMapEncodeTiled\n");
    return 1;
  }
  const auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, b, dims, strides, box, es,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed (%d)\n", static_cast<int>(r));
    return 1;
  }
  tensor_store<<<1, 128>>>(map);
  check("TMA tensor store", b, 2.0f);
  return bad == 0 ? 0 : 1;
}
