// multi_tensor_cuda.cuh - the chunk table that lets one kernel launch update every parameter of a
// model (a U-Net has ~50 parameter tensors: one launch each would be ~50 launches per optimizer step,
// most of them for biases of a few dozen elements). Included by the optimizer, clip_grad_norm_ and
// GradScaler kernels (.cu files only).
//
// The table, built on the host and written to device memory once per launch:
//   entries  Entry[T]       one per tensor: its pointers, numel, dtypes and per-tensor scalars
//                           (hyperparameters, bias corrections); every Entry has `int64_t numel`.
//   chunks   Chunk[C]       each tensor cut into pieces of kChunkElements elements, in tensor order:
//                           chunk c covers elements [begin, end) of entries[tensor].
// How the bytes get there: as kernel parameters. The table is cut into pieces of kParamBytes and
// each piece is the by-value argument of one write_bytes_kernel launch (one block, one thread per
// byte), queued on the stream before the kernel that reads the table. Two reasons, both about the
// step without host synchronisation (issue 11):
//   * cuda::copy_h2d stages through one pinned buffer and waits (cudaEventSynchronize) for the
//     previous copy to leave it, so three tables in a step were three host waits on the stream;
//     a launch never waits.
//   * A CUDA graph (core/cuda/graph.h) records a launch with a copy of its arguments: the table is
//     part of the graph and is written again by every replay. A copy from host memory would be
//     recorded as a copy from that address, which is freed (or holds the next table) by the replay.
// A U-Net table is a few KiB (~50 entries of <= 96 bytes, a few hundred chunks of 24 bytes): one to
// three extra launches of one block each, a few microseconds of launch time against the waits removed.
// Parallel mapping: one block handles one chunk at a time and strides over the chunks
// (c = blockIdx.x, blockIdx.x + gridDim.x, ...); its kThreads threads stride over the chunk's
// elements, so consecutive threads touch consecutive elements (coalesced). A chunk never spans two
// tensors, so the per-tensor fields are loaded once per chunk into registers.
#pragma once
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/cuda/check.cuh"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace halfgrad::optim::multi_tensor {

/// Threads per block: 8 warps, enough to cover a chunk's loads without a long tail.
constexpr int kThreads = 256;
/// Elements per chunk: 256 per thread (PyTorch's multi_tensor_apply uses the same 65536), so the
/// table lookup and the per-tensor register loads are amortised over a long loop.
constexpr int64_t kChunkElements = 65536;
/// Grid cap: 8 resident blocks of 256 threads per SM (2048 threads, the H100/H200 and A100 limit);
/// more chunks than that are taken in turns by the grid-stride loop.
constexpr int kBlocksPerSm = 8;

struct Chunk {
  int32_t tensor;  // index into entries
  int32_t unused;  // keeps begin 8-byte aligned, stated rather than left to the compiler
  int64_t begin, end;
};

/// The device copy of a table. `storage` owns it: dropping it after the launch is safe, since the
/// caching allocator only hands the block to work queued later on the same stream (runtime.h); during
/// a graph capture the block returns to the graph's pool, whose later users come later in the graph.
template <typename Entry>
struct Table {
  const Entry* entries = nullptr;
  const Chunk* chunks = nullptr;
  int64_t num_chunks = 0;
  Tensor storage;
  /// Blocks to launch: one per chunk, capped at kBlocksPerSm per SM.
  unsigned grid() const {
    const int64_t cap = static_cast<int64_t>(cuda::sm_count()) * kBlocksPerSm;
    return static_cast<unsigned>(std::max<int64_t>(1, std::min(num_chunks, cap)));
  }
};

/// Bytes of table carried by one write_bytes_kernel launch: the piece and its header (16 bytes) stay
/// below the 4096 bytes of kernel parameters every CUDA device and toolkit accepts.
constexpr size_t kParamBytes = 4032;

/// One piece of a table, passed by value as a kernel argument.
struct BytePiece {
  uint8_t* dst;
  uint32_t nbytes;                     // <= kParamBytes
  uint32_t unused;                     // keeps bytes 16-byte aligned, stated rather than left to the compiler
  alignas(16) uint8_t bytes[kParamBytes];
};
static_assert(sizeof(BytePiece) <= 4096, "a piece must fit in the 4 KiB of kernel parameters");

namespace detail {
namespace {  // one copy per .cu file that includes this header: no symbol shared between libraries
/// dst[0, nbytes) = bytes[0, nbytes): one block; thread i copies bytes i, i + blockDim.x, ...
__global__ void write_bytes_kernel(const BytePiece piece) {
  for (uint32_t i = threadIdx.x; i < piece.nbytes; i += blockDim.x) piece.dst[i] = piece.bytes[i];
}
}  // namespace
}  // namespace detail

/// Cuts every entry into chunks and writes entries and chunks to the device, as kernel arguments
/// (see the file comment); nothing waits. Entries with numel 0 get no chunk. `op` names the caller
/// in errors.
template <typename Entry>
Table<Entry> upload(const std::vector<Entry>& entries, const char* op) {
  static_assert(std::is_trivially_copyable_v<Entry>, "a table entry is copied to the device byte for byte");
  HG_CHECK(entries.size() < (size_t{1} << 31), op << ": " << entries.size() << " tensors in one launch exceed 2^31");
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < entries.size(); ++t)
    for (int64_t b = 0; b < entries[t].numel; b += kChunkElements)
      chunks.push_back({static_cast<int32_t>(t), 0, b, std::min(b + kChunkElements, entries[t].numel)});
  // Layout: entries, padded to 16 bytes, then chunks.
  const size_t entry_bytes = (entries.size() * sizeof(Entry) + 15) / 16 * 16;
  const size_t bytes = entry_bytes + chunks.size() * sizeof(Chunk);
  std::vector<uint8_t> host(std::max<size_t>(bytes, 1));
  if (!entries.empty()) std::memcpy(host.data(), entries.data(), entries.size() * sizeof(Entry));
  if (!chunks.empty()) std::memcpy(host.data() + entry_bytes, chunks.data(), chunks.size() * sizeof(Chunk));
  Table<Entry> table;
  table.num_chunks = static_cast<int64_t>(chunks.size());
  // An Int64 tensor as raw device bytes (256-byte aligned, from the caching allocator).
  table.storage = Tensor::empty({static_cast<int64_t>((bytes + 7) / 8)}, kInt64, Device::CUDA);
  auto* base = static_cast<uint8_t*>(table.storage.raw_data());
  BytePiece piece{};
  for (size_t at = 0; at < bytes; at += kParamBytes) {
    piece.dst = base + at;
    piece.nbytes = static_cast<uint32_t>(std::min(kParamBytes, bytes - at));
    std::memcpy(piece.bytes, host.data() + at, piece.nbytes);
    detail::write_bytes_kernel<<<1, kThreads, 0, cuda::stream()>>>(piece);
    HG_CUDA_LAUNCH_CHECK(op);
  }
  table.entries = reinterpret_cast<const Entry*>(base);
  table.chunks = reinterpret_cast<const Chunk*>(base + entry_bytes);
  return table;
}

// ---- device helpers ------------------------------------------------------------------------------

/// Element i of a Float32, Float16 or BFloat16 buffer, as float (exact).
__device__ __forceinline__ float load_float(const void* p, Dtype d, int64_t i) {
  if (d == Dtype::Float16) return cuda::to_float(static_cast<const __half*>(p)[i]);
  if (d == Dtype::BFloat16) return cuda::to_float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
/// Store v into a Float32 buffer, or round it once (nearest even) into a Float16 / BFloat16 one.
__device__ __forceinline__ void store_float(void* p, Dtype d, int64_t i, float v) {
  if (d == Dtype::Float16) static_cast<__half*>(p)[i] = cuda::from_float<__half>(v);
  else if (d == Dtype::BFloat16) static_cast<__nv_bfloat16*>(p)[i] = cuda::from_float<__nv_bfloat16>(v);
  else static_cast<float*>(p)[i] = v;
}
/// The dtypes load_float / store_float take.
inline bool is_multi_tensor_dtype(Dtype d) { return d == kFloat32 || is_reduced_float(d); }
/// The device-side skip of mixed precision: true when a GradScaler's found_inf flag is set.
__device__ __forceinline__ bool skip_step(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

/// max that propagates NaN (fmaxf drops it), as torch.max and the CPU clip_grad_norm_ do.
__device__ __forceinline__ float nan_max(float a, float b) {
  return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
}

/// Sum (or NaN-propagating max) of one value per thread over a block of kThreads; the result is
/// valid in thread 0. Warp shuffles, then one value per warp through shared memory.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one shared slot per warp");
  __shared__ float warp_result[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    const float o = __shfl_down_sync(0xffffffffu, v, offset);
    v = kMax ? nan_max(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // warp_result may still be read by a previous call's thread 0
  if (lane == 0) warp_result[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    v = warp_result[0];
    for (int w = 1; w < kThreads / 32; ++w) v = kMax ? nan_max(v, warp_result[w]) : v + warp_result[w];
  }
  return v;
}

}  // namespace halfgrad::optim::multi_tensor
