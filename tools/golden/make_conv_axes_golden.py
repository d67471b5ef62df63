#!/usr/bin/python3
"""make_conv_axes_golden.py - PyTorch's values for per-axis (anisotropic) conv3d and conv_transpose3d:
nnU-Net's (1, 3, 3) kernels and (1, 2, 2) strides, per-axis padding, dilation on one axis and
conv_transpose3d's output_padding, for tests/ops/conv3d_axes_test.cpp.

Run from the repository root with Debian's PyTorch (CPU, 1.13):

    /usr/bin/python3 tools/golden/make_conv_axes_golden.py

It rewrites tests/golden/conv_axes.json only (make_golden.py's conv.json is left alone: its float32
conv values depend on PyTorch's thread count). The format is make_golden.py's (tests/golden.h reads
both). Every case is computed in float64 (the "_f64" convention: float32-exact inputs stored as
float32, to be loaded as float64), so the values do not depend on PyTorch's summation order.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (the generators, the JSON writer and the case conventions)

GENERATOR = "/usr/bin/python3 tools/golden/make_conv_axes_golden.py"
OUT = os.path.join(mg.OUT_DIR, "conv_axes.json")


def conv_axes():
    cases = {}
    specs = [  # name, x shape, Cout, kernel, stride, padding, dilation, bias
        ("conv3d_k133_s122_p011_bias_f64", (2, 3, 4, 7, 6), 4, (1, 3, 3), (1, 2, 2), (0, 1, 1), (1, 1, 1), True),
        ("conv3d_k313_p201_dil211_nobias_f64", (1, 2, 7, 5, 6), 3, (3, 1, 3), (1, 1, 1), (2, 0, 1), (2, 1, 1), False),
        ("conv3d_k331_s211_p110_bias_f64", (2, 2, 6, 5, 4), 3, (3, 3, 1), (2, 1, 1), (1, 1, 0), (1, 1, 1), True),
    ]
    for name, xs, cout, k, s, p, d, bias in specs:
        g = mg.gen_for(name)
        cin = xs[1]
        inputs = {"x": mg.randn(g, *xs), "weight": mg.randn(g, cout, cin, *k, scale=(cin * k[0] * k[1] * k[2]) ** -0.5)}
        if bias:
            inputs["bias"] = mg.randn(g, cout, scale=0.5)
        params = {"kernel": list(k), "stride": list(s), "padding": list(p), "dilation": list(d),
                  "output_padding": [0, 0, 0], "bias": bias, "weight_layout": "(Cout,Cin,kd,kh,kw)"}
        fn = lambda x, weight, bias=None, s=s, p=p, d=d: F.conv3d(x, weight, bias, stride=s, padding=p, dilation=d)
        cases[name] = mg.vjp_case(name, "conv3d", params, inputs, fn, list(inputs), dtype=torch.float64)
    tspecs = [  # name, x shape, Cout, kernel, stride, padding, output_padding, dilation
        ("conv_transpose3d_k122_s122_bias_f64", (2, 4, 3, 3, 4), 3, (1, 2, 2), (1, 2, 2), (0, 0, 0), (0, 0, 0),
         (1, 1, 1)),
        ("conv_transpose3d_k233_s122_p110_op111_dil211_bias_f64", (1, 3, 3, 4, 3), 2, (2, 3, 3), (1, 2, 2),
         (1, 1, 0), (1, 1, 1), (2, 1, 1)),
    ]
    for name, xs, cout, k, s, p, op, d in tspecs:
        g = mg.gen_for(name)
        cin = xs[1]
        inputs = {"x": mg.randn(g, *xs), "weight": mg.randn(g, cin, cout, *k, scale=(cin * k[0] * k[1] * k[2]) ** -0.5),
                  "bias": mg.randn(g, cout, scale=0.5)}
        params = {"kernel": list(k), "stride": list(s), "padding": list(p), "dilation": list(d),
                  "output_padding": list(op), "bias": True, "weight_layout": "(Cin,Cout,kd,kh,kw) as PyTorch",
                  "out_extent": "(in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1"}
        fn = lambda x, weight, bias, s=s, p=p, op=op, d=d: F.conv_transpose3d(
            x, weight, bias, stride=s, padding=p, output_padding=op, dilation=d)
        cases[name] = mg.vjp_case(name, "conv_transpose3d", params, inputs, fn, list(inputs), dtype=torch.float64)
    return cases


def main():
    torch.manual_seed(0)
    doc = {"generator": GENERATOR, "torch": torch.__version__, "conventions": mg.CONVENTIONS, "cases": conv_axes()}
    mg.write_json(OUT, doc)
    print("%s: %d cases, %d bytes" % (os.path.relpath(OUT, mg.REPO), len(doc["cases"]), os.path.getsize(OUT)))


if __name__ == "__main__":
    main()
