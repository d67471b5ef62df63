// host_device.h - HALFGRAD_HD marks a function that the CPU and CUDA kernels share (__host__ __device__
// under nvcc, nothing in a plain C++ build): the scalar math headers of the ops (smooth_math.h,
// dropout_math.h, elementwise_loss_math.h) use it so that one formula serves both devices.
#pragma once

#ifdef __CUDACC__
#define HALFGRAD_HD __host__ __device__
#else
#define HALFGRAD_HD
#endif
