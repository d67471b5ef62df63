#!/usr/bin/python3
"""make_augment_golden.py - reference values of io/augment.h's transforms (nnU-Net v2's training
augmentation) for tests/io/augment_test.cpp, computed by an independent implementation: the
functions of batchgenerators (spatial_transformations.augment_spatial with its
create_zero_centered_coordinate_mesh, elastic_deform_coordinates, rotate_coords_3d and scale_coords;
color_augmentations.augment_contrast, augment_brightness_multiplicative, augment_gamma;
noise_augmentations.augment_gaussian_blur; resample_augmentations.augment_linear_downsampling_scipy)
written out with numpy and scipy.ndimage, with halfgrad's documented departures (augment.h):
image order 1 and labels order 0 through map_coordinates mode 'grid-constant', and the
low-resolution upsampling with order 1. The random numbers are inputs here (angles, factors, the
elastic noise), so nothing depends on numpy's random stream.

Run from the repository root with Debian's numpy and scipy (apt install python3-scipy):

    /usr/bin/python3 tools/golden/make_augment_golden.py

It rewrites tests/golden/augment.json in tests/golden.h's layout: cases of {"op", "params",
"inputs", "outputs"}, float32 data written so that decimal -> double -> float32 is exact.
"""
import json
import os

import numpy as np
import scipy
from scipy import ndimage

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden", "augment.json")
GENERATOR = "/usr/bin/python3 tools/golden/make_augment_golden.py"


def tensor(a):
    a = np.asarray(a)
    if a.dtype == np.int64:
        return {"shape": list(a.shape), "dtype": "int64", "data": [int(v) for v in a.ravel()]}
    a = a.astype(np.float32)
    return {"shape": list(a.shape), "dtype": "float32", "data": [float(v) for v in a.ravel()]}


# ---- batchgenerators' spatial transform, coordinates in float64 ----------------------------------

def create_zero_centered_coordinate_mesh(shape):
    coords = np.array(np.meshgrid(*[np.arange(i) for i in shape], indexing="ij")).astype(float)
    for d in range(len(shape)):
        coords[d] -= ((np.array(shape).astype(float) - 1) / 2.0)[d]
    return coords


def rotation_x(a):
    return np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])


def rotation_y(a):
    return np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])


def rotation_z(a):
    return np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])


def rotate_coords_3d(coords, ax, ay, az):
    m = np.identity(3) @ rotation_x(ax) @ rotation_y(ay) @ rotation_z(az)
    return np.dot(coords.reshape(3, -1).transpose(), m).transpose().reshape(coords.shape)


def elastic_offsets(noise, alpha, sigma):
    # elastic_deform_coordinates, its np.random.random(...) * 2 - 1 given as `noise` (float32 here).
    return ndimage.gaussian_filter(noise.astype(np.float64), sigma, mode="constant", cval=0) * alpha


def spatial(image, label, start, size, angles, scale, displacement=None):
    coords = create_zero_centered_coordinate_mesh(size)
    if displacement is not None:
        coords = coords + displacement.astype(np.float64)
    coords = rotate_coords_3d(coords, *angles)
    coords = coords * scale
    for d in range(3):
        coords[d] += start[d] + (size[d] - 1) / 2.0
    img = ndimage.map_coordinates(image.astype(np.float64), coords, order=1, mode="grid-constant", cval=0.0)
    lab = ndimage.map_coordinates(label, coords, order=0, mode="grid-constant", cval=0)
    return img, lab.astype(np.int64)


# ---- intensity transforms --------------------------------------------------------------------------

def contrast(x, factor, preserve_range):
    x = x.astype(np.float64)
    mn, lo, hi = x.mean(), x.min(), x.max()
    x = (x - mn) * factor + mn
    if preserve_range:
        x[x < lo] = lo
        x[x > hi] = hi
    return x


def gamma(x, g, invert, retain_stats, epsilon=1e-7):
    x = x.astype(np.float64)
    if invert:
        x = -x
    if retain_stats:
        mn, sd = x.mean(), x.std()
    minm = x.min()
    rnge = x.max() - minm
    x = np.power((x - minm) / float(rnge + epsilon), g) * rnge + minm
    if retain_stats:
        x = x - x.mean()
        x = x / (x.std() + 1e-8) * sd
        x = x + mn
    if invert:
        x = -x
    return x


def low_resolution(x, zoom):
    # augment_linear_downsampling_scipy with skimage's resize (ndi.zoom, grid_mode=True, mode 'edge'
    # = 'nearest'): order 0 down, order 1 up (nnU-Net: order 3).
    shp = np.array(x.shape)
    target = np.maximum(1, np.round(shp * zoom).astype(int))
    down = ndimage.zoom(x.astype(np.float64), target / shp, order=0, mode="nearest", grid_mode=True)
    assert down.shape == tuple(target), (down.shape, target)
    up = ndimage.zoom(down, shp / target, order=1, mode="nearest", grid_mode=True)
    assert up.shape == x.shape
    return up


def main():
    rng = np.random.default_rng(34)
    vol_shape = (7, 8, 9)
    image = rng.standard_normal(vol_shape).astype(np.float32)
    label = rng.integers(0, 4, vol_shape).astype(np.int64)
    small = rng.standard_normal((5, 7, 9)).astype(np.float32)
    thin = rng.standard_normal((2, 7, 8)).astype(np.float32)
    cases = {}

    def spatial_case(name, start, size, angles, scale, elastic=None):
        params = {"start": list(start), "size": list(size), "angles": list(angles), "scale": scale}
        inputs = {"image": tensor(image), "label": tensor(label)}
        outputs = {}
        displacement = None
        if elastic is not None:
            alpha, sigma = elastic
            params.update({"alpha": alpha, "sigma": sigma})
            ds = []
            for a in range(3):
                noise = (rng.random(size) * 2 - 1).astype(np.float32)
                inputs["noise%d" % a] = tensor(noise)
                d = elastic_offsets(noise, alpha, sigma).astype(np.float32)
                outputs["displacement%d" % a] = tensor(d)
                ds.append(d)
            displacement = np.stack(ds)
        img, lab = spatial(image, label, start, size, angles, scale, displacement)
        outputs.update({"image": tensor(img), "label": tensor(lab)})
        cases[name] = {"op": "spatial_transform", "params": params, "inputs": inputs, "outputs": outputs}

    spatial_case("spatial_rotate", (1, -1, 2), (5, 6, 7), (0.3, -0.2, 0.45), 1.0)
    spatial_case("spatial_rotate_scale_up", (-2, 1, 0), (6, 6, 8), (-0.5, 0.1, 0.25), 1.3)
    spatial_case("spatial_scale_down", (0, 2, 1), (7, 5, 6), (0.0, 0.0, 0.0), 0.7)
    spatial_case("spatial_whole_volume_rotate", (0, 0, 0), vol_shape, (0.5236, 0.0, -0.4), 1.0)
    spatial_case("spatial_elastic_rotate", (1, 0, 1), (5, 6, 7), (0.2, 0.0, -0.1), 1.1, elastic=(2.5, 1.5))

    for sigma, x, tag in ((0.5, small, "small"), (0.8, small, "small"), (1.0, small, "small"), (1.0, thin, "thin")):
        cases["blur_sigma%g_%s" % (sigma, tag)] = {
            "op": "gaussian_blur", "params": {"sigma": sigma}, "inputs": {"image": tensor(x)},
            "outputs": {"image": tensor(ndimage.gaussian_filter(x, sigma))}}  # float32 in and out, as nnU-Net's data
    cases["brightness_1.2"] = {"op": "multiply_brightness", "params": {"factor": 1.2}, "inputs": {"image": tensor(small)},
                               "outputs": {"image": tensor(small.astype(np.float64) * 1.2)}}
    for factor, preserve in ((0.8, True), (1.25, True), (1.25, False)):
        cases["contrast_%g_%s" % (factor, "preserve" if preserve else "free")] = {
            "op": "adjust_contrast", "params": {"factor": factor, "preserve_range": preserve},
            "inputs": {"image": tensor(small)}, "outputs": {"image": tensor(contrast(small, factor, preserve))}}
    for zoom in (0.5, 0.73, 0.9):
        cases["low_resolution_%g" % zoom] = {
            "op": "simulate_low_resolution", "params": {"zoom": zoom}, "inputs": {"image": tensor(small)},
            "outputs": {"image": tensor(low_resolution(small, zoom))}}
    for g, invert, retain in ((0.7, True, True), (1.4, False, True), (1.2, False, False), (0.85, True, False)):
        cases["gamma_%g_%s_%s" % (g, "inverted" if invert else "plain", "retain" if retain else "free")] = {
            "op": "adjust_gamma", "params": {"gamma": g, "invert": invert, "retain_stats": retain},
            "inputs": {"image": tensor(small)}, "outputs": {"image": tensor(gamma(small, g, invert, retain))}}

    doc = {"generator": GENERATOR, "numpy": np.__version__, "scipy": scipy.__version__, "cases": cases}
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print("wrote %s: %d cases" % (os.path.normpath(OUT), len(cases)))


if __name__ == "__main__":
    main()
