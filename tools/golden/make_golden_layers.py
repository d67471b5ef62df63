#!/usr/bin/python3
"""make_golden_layers.py - PyTorch golden values for the layers of issue 10 (Linear, GroupNorm,
LayerNorm, the elementwise losses), in tests/golden/layers.json.

Run from the repository root with Debian's PyTorch (CPU):

    /usr/bin/python3 tools/golden/make_golden_layers.py

It uses make_golden.py's encoding and case builder (same file format and conventions, documented
there) and rewrites only tests/golden/layers.json. Dropout has no golden values: halfgrad's masks are
not PyTorch's (tests/ops/dropout_test.cpp checks the statistics instead); flatten is a reshape
(tests/ops/flatten_test.cpp checks its shapes and order).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (sets one CPU thread, so reruns give identical bits)

GENERATOR = "/usr/bin/python3 tools/golden/make_golden_layers.py"


def linear(cases):
    g = mg.gen_for("linear")
    inputs = {"x": mg.randn(g, 2, 3, 4), "weight": mg.uniform(g, -0.5, 0.5, 5, 4), "bias": mg.uniform(g, -0.5, 0.5, 5)}
    mg.with_f64(cases, "linear_3d", "linear", {"in_features": 4, "out_features": 5, "formula": "x w^T + b over (*, in)"},
                inputs, lambda x, weight, bias: F.linear(x, weight, bias), ["x", "weight", "bias"])


def group_norm(cases):
    for name, shape, groups, affine in (("group_norm_affine", (2, 6, 2, 3, 4), 3, True),
                                        ("group_norm_noaffine", (2, 4, 2, 3, 3), 2, False),
                                        ("group_norm_3d_g1", (3, 4, 7), 1, True),
                                        ("group_norm_instance", (2, 3, 4, 5), 3, True)):
        g = mg.gen_for(name)
        C = shape[1]
        inputs = {"x": mg.randn(g, *shape) * 1.5 + 0.3}
        if affine:
            inputs["weight"] = mg.uniform(g, 0.5, 1.5, C)
            inputs["bias"] = mg.randn(g, C, scale=0.3)
        params = {"num_groups": groups, "eps": 1e-5, "affine": affine,
                  "formula": "stats per (n, group of C/G channels), biased var; affine per channel"}
        fn = lambda x, weight=None, bias=None, G=groups: F.group_norm(x, G, weight, bias, eps=1e-5)
        mg.with_f64(cases, name, "group_norm", params, inputs, fn, list(inputs))


def layer_norm(cases):
    for name, shape, norm_shape, affine in (("layer_norm_affine", (2, 3, 4, 5), (4, 5), True),
                                            ("layer_norm_noaffine", (2, 3, 7), (7,), False),
                                            ("layer_norm_5d_last3", (2, 2, 2, 3, 4), (2, 3, 4), True)):
        g = mg.gen_for(name)
        inputs = {"x": mg.randn(g, *shape) * 1.5 + 0.3}
        if affine:
            inputs["weight"] = mg.uniform(g, 0.5, 1.5, *norm_shape)
            inputs["bias"] = mg.randn(g, *norm_shape, scale=0.3)
        params = {"normalized_shape": list(norm_shape), "eps": 1e-5, "elementwise_affine": affine}
        fn = lambda x, weight=None, bias=None, ns=norm_shape: F.layer_norm(x, ns, weight, bias, eps=1e-5)
        mg.with_f64(cases, name, "layer_norm", params, inputs, fn, list(inputs))


def losses(cases):
    shape = (2, 3, 4, 5)
    for red in ("mean", "sum", "none"):
        g = mg.gen_for("mse_l1_" + red)
        inputs = {"x": mg.randn(g, *shape), "target": mg.randn(g, *shape)}  # no ties: |x - t| > 0
        mg.with_f64(cases, "mse_loss_" + red, "mse_loss", {"reduction": red}, inputs,
                    lambda x, target, r=red: F.mse_loss(x, target, reduction=r), ["x", "target"])
        mg.with_f64(cases, "l1_loss_" + red, "l1_loss", {"reduction": red}, inputs,
                    lambda x, target, r=red: F.l1_loss(x, target, reduction=r), ["x", "target"])
        g = mg.gen_for("bce_" + red)
        # Logits up to |x| ~ 24: exp(x) would overflow float16 and the naive form loses all bits.
        inputs = {"x": mg.randn(g, *shape, scale=8.0), "target": mg.uniform(g, 0.0, 1.0, *shape)}
        mg.with_f64(cases, "bce_with_logits_" + red, "binary_cross_entropy_with_logits", {"reduction": red}, inputs,
                    lambda x, target, r=red: F.binary_cross_entropy_with_logits(x, target, reduction=r),
                    ["x", "target"])
    g = mg.gen_for("bce_weights")
    inputs = {"x": mg.randn(g, *shape, scale=3.0), "target": mg.uniform(g, 0.0, 1.0, *shape),
              "weight": mg.uniform(g, 0.5, 2.0, 1, 3, 1, 1), "pos_weight": mg.uniform(g, 0.5, 3.0, 5)}
    mg.with_f64(cases, "bce_with_logits_weights", "binary_cross_entropy_with_logits",
                {"reduction": "mean", "weight_shape": [1, 3, 1, 1], "pos_weight_shape": [5]}, inputs,
                lambda x, target, weight, pos_weight: F.binary_cross_entropy_with_logits(
                    x, target, weight=weight, pos_weight=pos_weight), ["x", "target"])


def main():
    torch.manual_seed(0)
    cases = {}
    for fn in (linear, group_norm, layer_norm, losses):
        fn(cases)
    doc = {"generator": GENERATOR, "torch": torch.__version__, "conventions": mg.CONVENTIONS, "cases": cases}
    path = os.path.join(mg.OUT_DIR, "layers.json")
    mg.write_json(path, doc)
    print("%-18s %3d cases %8d bytes" % ("layers.json", len(cases), os.path.getsize(path)))


if __name__ == "__main__":
    main()
