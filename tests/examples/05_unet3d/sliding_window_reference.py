#!/usr/bin/env python3
"""Reference values for tests/examples/05_unet3d/sliding_window_test.cpp (issue 9).

nnU-Net v2's compute_gaussian and compute_steps_for_sliding_window
(nnunetv2/inference/sliding_window_prediction.py), re-implemented with numpy alone because scipy is
not installed here: scipy.ndimage.gaussian_filter(delta, sigma, 0, mode='constant', cval=0) is a
separable correlation with the kernel _gaussian_kernel1d(sigma, 0, radius = int(4 * sigma + 0.5)),
exp(-x^2 / (2 sigma^2)) normalised to sum 1, applied axis by axis; this script does exactly that to
a delta at the centre, then nnU-Net's `/ max`, and the replacement of zeros by the smallest non-zero.

    /usr/bin/python3 tests/examples/05_unet3d/sliding_window_reference.py
prints the C++ initialisers pasted into sliding_window_test.cpp.
"""
import numpy as np


def gaussian_kernel1d(sigma, radius):  # scipy.ndimage._filters._gaussian_kernel1d, order 0
    x = np.arange(-radius, radius + 1)
    phi = np.exp(-0.5 / (sigma * sigma) * x ** 2)
    return phi / phi.sum()


def correlate1d_constant(a, w, axis):  # scipy.ndimage.correlate1d(mode='constant', cval=0), odd w
    r = len(w) // 2
    a = np.moveaxis(a, axis, -1)
    n = a.shape[-1]
    padded = np.zeros(a.shape[:-1] + (n + 2 * r,))
    padded[..., r:r + n] = a
    out = np.zeros_like(a)
    for i, wi in enumerate(w):
        out += wi * padded[..., i:i + n]
    return np.moveaxis(out, -1, axis)


def compute_gaussian(tile_size, sigma_scale=1. / 8):
    tmp = np.zeros(tile_size)
    center_coords = [i // 2 for i in tile_size]
    sigmas = [i * sigma_scale for i in tile_size]
    tmp[tuple(center_coords)] = 1
    g = tmp
    for axis, s in enumerate(sigmas):
        g = correlate1d_constant(g, gaussian_kernel1d(s, int(4 * s + 0.5)), axis)
    g = g / np.max(g)
    g = g.astype(np.float32)
    g[g == 0] = np.min(g[g != 0])
    return g


def compute_steps_for_sliding_window(image_size, tile_size, tile_step_size):
    target_step_sizes_in_voxels = [i * tile_step_size for i in tile_size]
    num_steps = [int(np.ceil((i - k) / j)) + 1 for i, j, k in zip(image_size, target_step_sizes_in_voxels, tile_size)]
    steps = []
    for dim in range(len(tile_size)):
        max_step_value = image_size[dim] - tile_size[dim]
        actual_step_size = max_step_value / (num_steps[dim] - 1) if num_steps[dim] > 1 else 99999999999
        steps.append([int(np.round(actual_step_size * i)) for i in range(num_steps[dim])])
    return steps


g = compute_gaussian((3, 4, 5))
print("// compute_gaussian((3, 4, 5)), z-major:")
print("{" + ", ".join("%.9ef" % v for v in g.ravel()) + "}")
g = compute_gaussian((48, 64, 48))
print("// compute_gaussian((48, 64, 48)): sum, min, [0,0,0], [24,32,24], [10,50,3]")
print("%.9e %.9e %.9e %.9e %.9e" % (g.astype(np.float64).sum(), g.min(), g[0, 0, 0], g[24, 32, 24], g[10, 50, 3]))
for size, tile, step in [((64, 160, 49), (48, 48, 48), 0.5), ((96, 100, 48), (32, 32, 48), 0.5), ((200, 17, 33), (64, 16, 16), 0.25)]:
    print("// steps", size, tile, "tile_step_size", step, "->", compute_steps_for_sliding_window(size, tile, step))
