#!/usr/bin/python3
"""make_surface_metrics_golden.py - reference values of eval's boundary metrics (HD95 and the
normalised surface Dice, examples/05_unet3d/surface_distance.h) for
tests/examples/05_unet3d/surface_distance_test.cpp, computed by an independent implementation:
MONAI's definitions (monai.metrics: get_mask_edges, get_surface_distance, compute_hausdorff_distance
with percentile 95, compute_surface_dice with use_subvoxels False) written with numpy and
scipy.ndimage (binary_erosion, distance_transform_edt), as MONAI itself computes them.

Run from the repository root with Debian's numpy and scipy (apt install python3-scipy):

    /usr/bin/python3 tools/golden/make_surface_metrics_golden.py

It rewrites tests/golden/surface_metrics.json. Each case is a label map pair on a grid, built from
shapes the test builds the same way (spheres, ellipsoids and boxes in voxel-index space, later
shapes painted over earlier ones), with a spacing (z, y, x) in mm and a tolerance for the NSD.
"""
import json
import os

import numpy as np
from scipy import ndimage

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden", "surface_metrics.json")
GENERATOR = "/usr/bin/python3 tools/golden/make_surface_metrics_golden.py"


def paint(shape, shapes):
    """Label map (int64) from [{"kind": ..., "label": c, ...}] painted in order."""
    z, y, x = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    out = np.zeros(shape, dtype=np.int64)
    for s in shapes:
        if s["kind"] == "ellipsoid":  # centre (z, y, x), semi-axes (z, y, x) in voxels: sum ((i - c) / r)^2 <= 1
            (cz, cy, cx), (rz, ry, rx) = s["centre"], s["radii"]
            m = ((z - cz) / rz) ** 2 + ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1.0
        elif s["kind"] == "box":  # [lo, hi) per axis
            (lz, ly, lx), (hz, hy, hx) = s["lo"], s["hi"]
            m = (z >= lz) & (z < hz) & (y >= ly) & (y < hy) & (x >= lx) & (x < hx)
        else:
            raise ValueError(s["kind"])
        out[m] = s["label"]
    return out


def edges(mask):
    # get_mask_edges: the mask xor its binary erosion (scipy's default cross, border_value 0).
    return mask ^ ndimage.binary_erosion(mask)


def surface_distance(edges_from, edges_to, spacing):
    # get_surface_distance: distance_transform_edt of not edges_to, with sampling = spacing.
    if not edges_to.any():
        return np.full(int(edges_from.sum()), np.inf)
    dis = ndimage.distance_transform_edt(~edges_to, sampling=spacing)
    return dis[edges_from]


def scores(pred, target, num_classes, spacing, tol):
    rows = []
    for c in range(1, num_classes):
        p, t = pred == c, target == c
        if not p.any() and not t.any():
            rows.append({"hd95_mm": 0.0, "hd95_defined": True, "surface_dice": 1.0})
            continue
        if p.any() != t.any():
            rows.append({"hd95_mm": 0.0, "hd95_defined": False, "surface_dice": 0.0})
            continue
        ep, et = edges(p), edges(t)
        d_pt, d_tp = surface_distance(ep, et, spacing), surface_distance(et, ep, spacing)
        hd95 = max(np.percentile(d_pt, 95), np.percentile(d_tp, 95))
        nsd = (np.sum(d_pt <= tol) + np.sum(d_tp <= tol)) / (len(d_pt) + len(d_tp))
        rows.append({"hd95_mm": float(hd95), "hd95_defined": True, "surface_dice": float(nsd)})
    return rows


CASES = [
    {"name": "concentric spheres r6 / r8, 1 mm", "shape": [32, 32, 32], "num_classes": 2,
     "spacing": [1.0, 1.0, 1.0], "tolerance": 2.0,
     "pred": [{"kind": "ellipsoid", "label": 1, "centre": [16, 16, 16], "radii": [6, 6, 6]}],
     "target": [{"kind": "ellipsoid", "label": 1, "centre": [16, 16, 16], "radii": [8, 8, 8]}]},
    {"name": "boxes shifted 3 voxels in x, anisotropic (2, 1, 0.5) mm", "shape": [16, 20, 24], "num_classes": 2,
     "spacing": [2.0, 1.0, 0.5], "tolerance": 1.5,
     "pred": [{"kind": "box", "label": 1, "lo": [4, 4, 4], "hi": [12, 12, 12]}],
     "target": [{"kind": "box", "label": 1, "lo": [4, 4, 7], "hi": [12, 12, 15]}]},
    {"name": "ellipsoid against a shifted sphere, (1.5, 0.8, 0.8) mm", "shape": [24, 40, 40], "num_classes": 2,
     "spacing": [1.5, 0.8, 0.8], "tolerance": 2.0,
     "pred": [{"kind": "ellipsoid", "label": 1, "centre": [12, 20, 20], "radii": [5, 12, 9]}],
     "target": [{"kind": "ellipsoid", "label": 1, "centre": [11, 21, 18], "radii": [7, 10, 10]}]},
    {"name": "three classes: overlapping, missing from the prediction, absent from both", "shape": [20, 24, 28],
     "num_classes": 4, "spacing": [1.0, 1.25, 0.75], "tolerance": 1.0,
     "pred": [{"kind": "ellipsoid", "label": 1, "centre": [10, 12, 14], "radii": [6, 7, 8]}],
     "target": [{"kind": "ellipsoid", "label": 1, "centre": [10, 11, 15], "radii": [6, 8, 7]},
                {"kind": "box", "label": 2, "lo": [2, 2, 2], "hi": [5, 6, 7]}]},
    {"name": "masks touching the volume's faces (faces count as surface)", "shape": [10, 12, 14], "num_classes": 3,
     "spacing": [1.0, 1.0, 1.0], "tolerance": 0.0,
     "pred": [{"kind": "box", "label": 1, "lo": [0, 0, 0], "hi": [5, 12, 14]},
              {"kind": "box", "label": 2, "lo": [6, 0, 3], "hi": [10, 12, 9]}],
     "target": [{"kind": "box", "label": 1, "lo": [0, 0, 0], "hi": [6, 12, 14]},
                {"kind": "box", "label": 2, "lo": [7, 0, 4], "hi": [10, 12, 9]}]},
]


def main():
    out = {"generator": GENERATOR, "numpy": np.__version__, "scipy": __import__("scipy").__version__, "cases": []}
    for case in CASES:
        shape = tuple(case["shape"])
        pred, target = paint(shape, case["pred"]), paint(shape, case["target"])
        case = dict(case)
        case["expected"] = scores(pred, target, case["num_classes"], case["spacing"], case["tolerance"])
        out["cases"].append(case)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for c in out["cases"]:
        print(c["name"], c["expected"])


if __name__ == "__main__":
    main()
