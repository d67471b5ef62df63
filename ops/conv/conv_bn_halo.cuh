// conv_bn_halo.cuh - the BatchNorm-fused forms of the halo convolution (conv3d_fprop_halo_cuda.cu),
// for conv_bn_cuda.cu (ops/conv/conv_bn.h: the fused Conv-BN-ReLU pair). For .cu files only.
//
// Prologue (norm_in, (3, C) float32: mean, scale, beta per gathered channel): the kernel loads
//   relu((src - mean) * scale + beta), rounded once to the 16-bit type, instead of src; the zero
//   padding is that of the normalised tensor. src is then the previous convolution's raw output and the
//   normalised activation is never written to memory.
// Epilogue statistics (tile_stats, (tiles, N) float4, 16-byte aligned): for tile t (its index in
//   halo_tile_count's order: x fastest, then y, z, sample) and output channel c,
//   {K, sum (y - K), sum (y - K)^2, count} over the tile's voxels inside the volume, y the rounded
//   16-bit output as written, K = y at the tile's first voxel; FP32 sums of at most 64 values per
//   thread, combined in a fixed order (no atomics). conv_bn_cuda.cu reduces them per channel.
#pragma once
#include <cstdint>

#include "ops/conv/conv_igemm.cuh"

namespace halfgrad::ops::conv::igemm {

/// Tiles (8^3 output voxels) the halo kernels cover g's output with: rows of tile_stats.
int64_t halo_tile_count(const Gather& g);

/// tc_halo_conv with either fusion or both (norm_in or tile_stats may be null). Needs g.c = 16 or 32, a
/// forward gather and no bias, besides halo_conv_supported; throws halfgrad::Error naming op otherwise.
void tc_halo_conv_bn(const Gather& g, TcOperand type, const void* B, int k_pad, const Epilogue& e, const float* norm_in,
                     float* tile_stats, const char* op);

/// The backward fusion: tc_halo_conv's dgrad (g transposed, C = 16 or 32 channels of dy, N = 16 or 32)
/// computing da = dL/da of a = relu((h - mean) * scale + beta) (norm_out (3, N): mean, scale, beta;
/// relu_src = h (n, d, h, w, N) in the 16-bit type), writing dz = relu'(a) da to e.out instead, and per
/// tile and channel tile_stats[t][c] = {sum dz, sum dz (h - mean), 0, count} (FP32 within a tile, a
/// fixed order; conv_bn_cuda.cu sums tiles in FP64): BatchNorm backward's two reductions. a is recomputed
/// with the forward prologue's rounding, so relu's mask is the forward's. Throws halfgrad::Error naming op.
void tc_halo_dgrad_relu_bn(const Gather& g, TcOperand type, const void* B, int k_pad, const Epilogue& e,
                           const float* norm_out, const void* relu_src, float* tile_stats, const char* op);

}  // namespace halfgrad::ops::conv::igemm
