// augment_math.h - the per-voxel formulas of io/augment.h, shared by the CPU loops (augment.cpp) and
// the CUDA kernels (augment_cuda.cu): HALFGRAD_HD is __host__ __device__ under nvcc. Arithmetic in
// float64, each voxel's result rounded once to float32. The .cu file is compiled without FMA
// contraction (-fmad=false); GCC at -march=x86-64-v3 fuses some multiply-adds of the CPU loops. So the
// two can differ in float64's last place, which shows after the float32 rounding as one float32 ulp
// on a rare voxel (tests/cuda/augment_cuda_test.cpp states each tolerance).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace halfgrad::io::augment_math {

/// A volume's (D, H, W) = (z, y, x) extents, storage x fastest.
struct Extent3 {
  int64_t d[3];
};

/// The volume read at (z, y, x) by trilinear interpolation, 0 outside as if zero-padded
/// (scipy.ndimage.map_coordinates order 1, mode 'grid-constant').
HALFGRAD_HD inline float read_linear(const float* v, const Extent3& in, double z, double y, double x) {
  if (!(z > -1.0 && z < in.d[0] && y > -1.0 && y < in.d[1] && x > -1.0 && x < in.d[2])) return 0.0f;
  const double fz = floor(z), fy = floor(y), fx = floor(x);
  const double t[3] = {z - fz, y - fy, x - fx};
  const int64_t c0[3] = {static_cast<int64_t>(fz), static_cast<int64_t>(fy), static_cast<int64_t>(fx)};
  double acc = 0.0;
  for (int64_t dz = 0; dz < 2; ++dz) {
    const int64_t iz = c0[0] + dz;
    if (iz < 0 || iz >= in.d[0]) continue;
    const double wz = dz ? t[0] : 1.0 - t[0];
    for (int64_t dy = 0; dy < 2; ++dy) {
      const int64_t iy = c0[1] + dy;
      if (iy < 0 || iy >= in.d[1]) continue;
      const double wy = dy ? t[1] : 1.0 - t[1];
      for (int64_t dx = 0; dx < 2; ++dx) {
        const int64_t ix = c0[2] + dx;
        if (ix < 0 || ix >= in.d[2]) continue;
        acc += wz * wy * (dx ? t[2] : 1.0 - t[2]) * v[(iz * in.d[1] + iy) * in.d[2] + ix];
      }
    }
  }
  return static_cast<float>(acc);
}

/// The nearest voxel, p rounded half up (floor(p + 0.5), scipy's order 0); 0 (background) outside.
HALFGRAD_HD inline int64_t read_nearest(const int64_t* v, const Extent3& in, double z, double y, double x) {
  const double r[3] = {floor(z + 0.5), floor(y + 0.5), floor(x + 0.5)};
  for (int d = 0; d < 3; ++d)
    if (!(r[d] >= 0.0 && r[d] < in.d[d])) return 0;
  return v[(static_cast<int64_t>(r[0]) * in.d[1] + static_cast<int64_t>(r[1])) * in.d[2] + static_cast<int64_t>(r[2])];
}

/// What spatial_transform applies to every patch voxel (augment.h: SpatialParams): the row-vector
/// rotation m, the scale, the patch's centre in the patch (half) and in the volume (centre).
struct SpatialMap {
  double m[3][3];
  double scale;
  double half[3], centre[3];
};

/// The volume coordinate p that patch voxel (z, y, x), displaced by disp (0 without elastic), reads.
HALFGRAD_HD inline void spatial_source(const SpatialMap& s, int64_t z, int64_t y, int64_t x, const double disp[3],
                                       double p[3]) {
  const double c[3] = {z - s.half[0] + disp[0], y - s.half[1] + disp[1], x - s.half[2] + disp[2]};
  for (int n = 0; n < 3; ++n) p[n] = (c[0] * s.m[0][n] + c[1] * s.m[1][n] + c[2] * s.m[2][n]) * s.scale + s.centre[n];
}

/// skimage.transform.resize's map from output voxel o (of `to` voxels) to input (of `from`).
HALFGRAD_HD inline double resize_source(int64_t o, int64_t from, int64_t to) {
  return (static_cast<double>(o) + 0.5) * (static_cast<double>(from) / static_cast<double>(to)) - 0.5;
}

/// The input voxel a nearest-neighbour downsample from `in` to `low` voxels copies into voxel o.
HALFGRAD_HD inline int64_t low_res_pick(int64_t o, int64_t in, int64_t low) {
  const int64_t i = static_cast<int64_t>(floor(resize_source(o, in, low) + 0.5));
  return i < 0 ? 0 : i > in - 1 ? in - 1 : i;
}

/// One axis of the linear upsample from `low` back to `in` voxels (coordinates clamped to the edge):
/// output o reads low voxels i0 and i1 with weights 1 - t and t.
struct Tap {
  int64_t i0, i1;
  double t;
};
HALFGRAD_HD inline Tap low_res_tap(int64_t o, int64_t low, int64_t in) {
  double c = resize_source(o, low, in);
  c = c < 0.0 ? 0.0 : c > static_cast<double>(low - 1) ? static_cast<double>(low - 1) : c;
  const int64_t i0 = static_cast<int64_t>(floor(c));
  return Tap{i0, i0 + 1 < low - 1 ? i0 + 1 : low - 1, c - static_cast<double>(i0)};
}

/// augment_gamma's map of one (sign-applied) value v: ((v - lo) / (range + 1e-7))^gamma * range + lo.
HALFGRAD_HD inline double gamma_map(double v, double lo, double range, double gamma) {
  return pow((v - lo) / (range + 1e-7), gamma) * range + lo;
}

}  // namespace halfgrad::io::augment_math
