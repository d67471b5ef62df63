#!/usr/bin/python3
"""make_golden.py - golden reference values from PyTorch for halfgrad's tests (STYLE.md, habit 10).

Run from the repository root with Debian's PyTorch (CPU):

    /usr/bin/python3 tools/golden/make_golden.py

It rewrites tests/golden/{elementwise,reduce,matmul,conv,pool,norm,activation,shape,loss,optim,half,shape_ops}.json;
`/usr/bin/python3 tools/golden/make_golden.py pool shape_ops` rewrites only the groups named.
The output is deterministic: every case draws its inputs from its own generator, seeded from the case
name, so adding a case changes no other case's values.

File format (tests/golden.h reads it):

    {"generator": "...", "torch": "<version>", "conventions": "...",
     "cases": {"<case>": {"op": "...", "params": {...},
                          "inputs":  {"<name>": {"shape": [...], "dtype": "float32", "data": [...]}},
                          "outputs": {"<name>": {...}},
                          "grads":   {"<input name>": {...}}}}}

  * data is flat, row-major (NCDHW for volumes); shape [] is a 0-d tensor holding one value.
  * dtype is "float32", "float64" or "int64". Inputs are drawn in float64 and rounded to float32, so a
    float32 value is exact; each number is written with the fewest digits that parse (decimal -> double
    -> float, round to nearest) back to the same float32, which the script checks. "_f64" cases hold
    the same float32-exact inputs as float64 and are computed in float64.
  * The differentiated output is "y"; "gy" (an input, same shape as y) is the cotangent, and
    grads[name] = vector-Jacobian product d<y, gy>/d name, i.e. what y.backward(gy) leaves in name.grad.
  * Everything else (running stats, pooling indices, optimiser trajectories) is an extra output.
"""
import json
import math
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

GENERATOR = "/usr/bin/python3 tools/golden/make_golden.py"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(REPO, "tests", "golden")

# One thread: the CPU kernels then always add in the same order, so reruns give identical bits.
torch.set_num_threads(1)

CONVENTIONS = ("data flat row-major (NCDHW); shape [] = 0-d; y is the differentiated output, gy its "
               "cotangent (an input); grads[name] = what y.backward(gy) accumulates into name.grad; "
               "float32 numbers parse exactly (decimal -> double -> float); _f64 cases use the same "
               "values in float64")


# ---- encoding -----------------------------------------------------------------------------------

def f32_number(v):
    """The shortest decimal that reads back (via double, as nlohmann-json + a float cast do) as v."""
    v = np.float32(v)
    if not np.isfinite(v):
        raise ValueError("JSON cannot hold a non-finite number: %r" % v)
    for s in (repr(float(np.format_float_scientific(v, unique=True))), "%.9g" % v):
        x = float(s)
        if np.float32(x) == v and math.copysign(1, x) == math.copysign(1, v):
            return x
    raise AssertionError("no exact decimal for %r" % v)


def enc(t):
    """A tensor as {"shape", "dtype", "data"}."""
    t = t.detach().cpu().contiguous()
    flat = t.reshape(-1).tolist()
    if t.dtype == torch.float32:
        dtype, data = "float32", [f32_number(v) for v in t.reshape(-1).numpy()]
    elif t.dtype == torch.float64:
        if not all(math.isfinite(v) for v in flat):
            raise ValueError("non-finite float64 value")
        dtype, data = "float64", flat
    elif t.dtype == torch.int64:
        dtype, data = "int64", [int(v) for v in flat]
    else:
        raise TypeError(t.dtype)
    return {"shape": list(t.shape), "dtype": dtype, "data": data}


def as_f32(t):
    """A float32-exact float64 tensor as float32 (checked), anything else unchanged."""
    if t.dtype != torch.float64:
        return t
    f = t.detach().float()
    assert torch.equal(f.double(), t.detach()), "input is not float32-exact"
    return f


def write_json(path, obj):
    """Indented JSON with every list of numbers on one line (readable, and diffs stay small)."""
    def dump(o, ind):
        pad = " " * ind
        if isinstance(o, dict):
            if not o:
                return "{}"
            items = [pad + " " + json.dumps(k) + ": " + dump(v, ind + 1) for k, v in o.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(o, list) and any(isinstance(v, (dict, list)) for v in o):
            return "[\n" + ",\n".join(pad + " " + dump(v, ind + 1) for v in o) + "\n" + pad + "]"
        return json.dumps(o, allow_nan=False, separators=(",", ":") if isinstance(o, list) else None)
    with open(path, "w") as f:
        f.write(dump(obj, 0) + "\n")


# ---- inputs -------------------------------------------------------------------------------------

def gen_for(name):
    g = torch.Generator()
    g.manual_seed(zlib.crc32(name.encode()))
    return g


def randn(g, *shape, scale=1.0):
    """N(0, scale^2) drawn in float64, rounded to float32."""
    return (torch.randn(tuple(shape), generator=g, dtype=torch.float64) * scale).float()


def uniform(g, lo, hi, *shape):
    return (torch.rand(tuple(shape), generator=g, dtype=torch.float64) * (hi - lo) + lo).float()


def away_from_zero(g, *shape):
    """Random sign times U[0.5, 2): safe divisors."""
    sign = torch.randint(0, 2, tuple(shape), generator=g).double() * 2 - 1
    return (sign * (torch.rand(tuple(shape), generator=g, dtype=torch.float64) * 1.5 + 0.5)).float()


# ---- case builder -------------------------------------------------------------------------------

def vjp_case(name, op, params, inputs, fn, diff, dtype=torch.float32, extra=None):
    """Run fn(**inputs) -> y (or (y, {extra outputs})), backprop a random float32-exact cotangent gy
    into the inputs named in `diff`, and return the case's JSON."""
    g = gen_for(name + "/gy")
    leaves = {}
    for k, v in inputs.items():
        v = v.clone()
        if v.is_floating_point():
            v = v.to(dtype)
        leaves[k] = v.requires_grad_(k in diff)
    out = fn(**leaves)
    y, extra_out = (out if isinstance(out, tuple) else (out, {}))
    gy = randn(g, *y.shape).to(dtype)
    y.backward(gy)
    case = {
        "op": op,
        "params": dict(params, dtype="float64" if dtype == torch.float64 else "float32"),
        # Inputs are float32-exact in every case, so they are stored as float32 even in _f64 cases.
        "inputs": dict({k: enc(as_f32(v)) for k, v in leaves.items()}, gy=enc(as_f32(gy))),
        "outputs": dict({"y": enc(y)}, **{k: enc(v) for k, v in extra_out.items()}),
        "grads": {k: enc(leaves[k].grad) for k in diff},
    }
    return case


def with_f64(cases, name, *args, **kw):
    """Add case `name` in float32 and `name_f64` in float64 from the same inputs."""
    cases[name] = vjp_case(name, *args, **kw)
    cases[name + "_f64"] = vjp_case(name, *args, dtype=torch.float64, **kw)


# ---- groups -------------------------------------------------------------------------------------

def elementwise():
    cases = {}
    fns = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
    layouts = {  # name -> (shape of a, shape of b)
        "same": ((2, 3, 4, 5), (2, 3, 4, 5)),
        "bias5d": ((2, 3, 3, 4, 5), (1, 3, 1, 1, 1)),
        "scalar_tensor": ((), (2, 3, 4)),
        "tensor_scalar": ((2, 3, 4), ()),
        "outer": ((3, 1), (1, 4)),
    }
    for op, fn in fns.items():
        for layout, (sa, sb) in layouts.items():
            name = op + "_" + layout
            g = gen_for(name)
            a = randn(g, *sa)
            b = away_from_zero(g, *sb) if op == "div" else randn(g, *sb)
            params = {"broadcast": "numpy rules; grads are summed back to each input's shape"}
            build = with_f64 if layout in ("same", "bias5d") else _plain
            build(cases, name, op, params, {"a": a, "b": b}, lambda a, b, fn=fn: fn(a, b), ["a", "b"])
    return cases


def _plain(cases, name, *args, **kw):
    cases[name] = vjp_case(name, *args, **kw)


def reduce():
    cases = {}
    x5 = randn(gen_for("reduce/x5"), 2, 3, 3, 4, 5)
    variants = [  # name suffix, dims (None = all), keepdim
        ("all", None, False),
        ("dims0234_keepdim", (0, 2, 3, 4), True),
        ("dims0234", (0, 2, 3, 4), False),
        ("dim1_keepdim", (1,), True),
        ("dim1", (1,), False),
    ]
    for op in ("sum", "mean"):
        fn = getattr(torch, op)
        for suffix, dims, keepdim in variants:
            name = op + "_" + suffix
            params = {"dims": list(dims) if dims else [0, 1, 2, 3, 4], "keepdim": keepdim,
                      "all": dims is None}
            f = (lambda x, fn=fn: fn(x)) if dims is None else \
                (lambda x, fn=fn, d=dims, k=keepdim: fn(x, dim=d, keepdim=k))
            build = with_f64 if suffix in ("all", "dims0234_keepdim") else _plain
            build(cases, name, op, params, {"x": x5}, f, ["x"])
    x2 = randn(gen_for("reduce/x2"), 7, 5)
    _plain(cases, "sum_dim0_2d", "sum", {"dims": [0], "keepdim": False, "all": False}, {"x": x2},
           lambda x: x.sum(0), ["x"])
    return cases


def matmul():
    cases = {}
    for m, k, n in ((7, 5, 3), (13, 17, 11)):
        name = "matmul_%dx%dx%d" % (m, k, n)
        g = gen_for(name)
        params = {"M": m, "K": k, "N": n, "formula": "y = a @ b, a (M,K), b (K,N)"}
        with_f64(cases, name, "matmul", params, {"a": randn(g, m, k), "b": randn(g, k, n)},
                 lambda a, b: a @ b, ["a", "b"])
    for bias in (True, False):
        name = "linear_bias" if bias else "linear_nobias"
        g = gen_for(name)
        inputs = {"x": randn(g, 5, 7), "weight": randn(g, 3, 7, scale=0.4)}
        if bias:
            inputs["bias"] = randn(g, 3)
        params = {"in_features": 7, "out_features": 3, "bias": bias,
                  "formula": "y = x @ weight^T + bias, x (N,in), weight (out,in), bias (out)"}
        with_f64(cases, name, "linear", params, inputs,
                 lambda x, weight, bias=None: F.linear(x, weight, bias), list(inputs))
    return cases


def conv():
    cases = {}
    specs = [  # name, x shape, Cout, kernel, stride, padding, bias
        ("conv3d_k3_s1_p1_bias", (2, 2, 5, 6, 7), 3, 3, 1, 1, True),
        ("conv3d_k3_s1_p1_nobias", (2, 2, 5, 6, 7), 3, 3, 1, 1, False),
        ("conv3d_k3_s2_p0_bias", (2, 2, 5, 6, 7), 3, 3, 2, 0, True),
        ("conv3d_k1_head", (2, 4, 5, 6, 7), 3, 1, 1, 0, True),
        ("conv3d_cin1_k3_s1_p1_nobias", (2, 1, 5, 6, 7), 3, 3, 1, 1, False),
    ]
    for name, xs, cout, k, s, p, bias in specs:
        g = gen_for(name)
        cin = xs[1]
        inputs = {"x": randn(g, *xs), "weight": randn(g, cout, cin, k, k, k, scale=(cin * k ** 3) ** -0.5)}
        if bias:
            inputs["bias"] = randn(g, cout, scale=0.5)
        params = {"stride": s, "padding": p, "kernel": k, "bias": bias, "weight_layout": "(Cout,Cin,k,k,k)"}
        fn = lambda x, weight, bias=None, s=s, p=p: F.conv3d(x, weight, bias, stride=s, padding=p)
        build = with_f64 if name == "conv3d_k3_s1_p1_bias" else _plain
        build(cases, name, "conv3d", params, inputs, fn, list(inputs))
    tspecs = [  # name, x shape, Cout, kernel, stride, padding
        ("conv_transpose3d_k2_s2_bias", (2, 3, 3, 4, 5), 2, 2, 2, 0),
        ("conv_transpose3d_k3_s1_p1_bias", (2, 3, 3, 4, 5), 2, 3, 1, 1),
    ]
    for name, xs, cout, k, s, p in tspecs:
        g = gen_for(name)
        cin = xs[1]
        inputs = {"x": randn(g, *xs), "weight": randn(g, cin, cout, k, k, k, scale=(cin * k ** 3) ** -0.5),
                  "bias": randn(g, cout, scale=0.5)}
        params = {"stride": s, "padding": p, "kernel": k, "output_padding": 0, "bias": True,
                  "weight_layout": "(Cin,Cout,k,k,k) as PyTorch",
                  "out_extent": "(in - 1) * stride - 2 * padding + kernel"}
        fn = lambda x, weight, bias, s=s, p=p: F.conv_transpose3d(x, weight, bias, stride=s, padding=p)
        build = with_f64 if name == "conv_transpose3d_k2_s2_bias" else _plain
        build(cases, name, "conv_transpose3d", params, inputs, fn, list(inputs))
    return cases


def distinct(g, *shape):
    """A permutation of evenly spaced float32 values in [-2, 2): no ties decide an argmax."""
    n = int(np.prod(shape))
    return (torch.randperm(n, generator=g).double() * (4.0 / n) - 2.0).float().reshape(shape)


def pool():
    cases = {}
    for name, xs in (("max_pool3d_k2_s2", (2, 3, 4, 6, 8)), ("max_pool3d_k2_s2_odd", (2, 2, 5, 7, 9))):
        x = distinct(gen_for(name), *xs)
        params = {"kernel": 2, "stride": 2, "padding": 0, "ceil_mode": False,
                  "indices": "flat index into D*H*W of each (n, c) plane, as return_indices=True"}

        def fn(x):
            y, idx = F.max_pool3d(x, 2, 2, return_indices=True)
            return y, {"indices": idx}
        cases[name] = vjp_case(name, "max_pool3d", params, {"x": x}, fn, ["x"])

    # Per-axis windows and padding (issue 10). kernel / stride / padding are [d, h, w].
    for name, xs, k, st, pad in (("max_pool3d_k122_s122", (1, 2, 3, 6, 8), [1, 2, 2], [1, 2, 2], [0, 0, 0]),
                                 ("max_pool3d_k3_s2_p1", (1, 2, 5, 7, 6), [3, 3, 3], [2, 2, 2], [1, 1, 1]),
                                 ("max_pool3d_k132_s121_p011", (1, 2, 4, 7, 6), [1, 3, 2], [1, 2, 1], [0, 1, 1])):
        x = distinct(gen_for(name), *xs)
        params = {"kernel": k, "stride": st, "padding": pad, "ceil_mode": False,
                  "indices": "flat index into D*H*W of each (n, c) plane, as return_indices=True"}

        def fn(x, k=k, st=st, pad=pad):
            y, idx = F.max_pool3d(x, k, st, pad, return_indices=True)
            return y, {"indices": idx}
        build = with_f64 if name == "max_pool3d_k3_s2_p1" else _plain
        build(cases, name, "max_pool3d", params, {"x": x}, fn, ["x"])

    # avg_pool3d: name, input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    for name, xs, k, st, pad, ceil, cip, div in (
            ("avg_pool3d_k2", (2, 2, 2, 4, 6), [2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, None),
            ("avg_pool3d_k122", (2, 2, 3, 6, 5), [1, 2, 2], [1, 2, 2], [0, 0, 0], False, True, None),
            ("avg_pool3d_k3_s2_p1", (1, 2, 5, 7, 6), [3, 3, 3], [2, 2, 2], [1, 1, 1], False, True, None),
            ("avg_pool3d_k3_s2_p1_nopad", (1, 2, 5, 7, 6), [3, 3, 3], [2, 2, 2], [1, 1, 1], False, False, None),
            ("avg_pool3d_k3_s2_p1_ceil", (1, 1, 6, 8, 5), [3, 3, 3], [2, 2, 2], [1, 1, 1], True, True, None),
            ("avg_pool3d_k3_s2_p1_ceil_nopad", (1, 1, 6, 8, 5), [3, 3, 3], [2, 2, 2], [1, 1, 1], True, False, None),
            ("avg_pool3d_k232_s121_p110", (1, 2, 4, 5, 6), [2, 3, 2], [1, 2, 1], [1, 1, 0], False, True, None),
            ("avg_pool3d_k2_divisor5", (1, 2, 4, 4, 6), [2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, 5)):
        x = randn(gen_for(name), *xs)
        params = {"kernel": k, "stride": st, "padding": pad, "ceil_mode": ceil, "count_include_pad": cip,
                  "divisor_override": div}
        fn = (lambda x, k=k, st=st, pad=pad, ceil=ceil, cip=cip, div=div:
              F.avg_pool3d(x, k, st, pad, ceil_mode=ceil, count_include_pad=cip, divisor_override=div))
        build = with_f64 if name == "avg_pool3d_k3_s2_p1_ceil_nopad" else _plain
        build(cases, name, "avg_pool3d", params, {"x": x}, fn, ["x"])

    for name, xs, out in (("adaptive_avg_pool3d_234", (1, 2, 5, 7, 9), [2, 3, 4]),
                          ("adaptive_avg_pool3d_global", (2, 3, 3, 4, 5), [1, 1, 1]),
                          ("adaptive_avg_pool3d_753", (1, 2, 5, 4, 3), [7, 5, 3])):
        x = randn(gen_for(name), *xs)
        fn = lambda x, out=out: F.adaptive_avg_pool3d(x, out)
        build = with_f64 if name == "adaptive_avg_pool3d_234" else _plain
        build(cases, name, "adaptive_avg_pool3d", {"output_size": out}, {"x": x}, fn, ["x"])

    # Upsampling: "size" is the op's output size; "scale_factor" (when not null) is what F.interpolate
    # was given, and the coordinate mapping uses it (recompute_scale_factor unset).
    for name, xs, mode, size, scale, ac in (
            ("upsample_nearest_x2", (1, 2, 2, 3, 4), "nearest", None, [2.0, 2.0, 2.0], None),
            ("upsample_nearest_size", (1, 1, 4, 3, 5), "nearest", [7, 5, 6], None, None),
            ("upsample_nearest_x1p5", (1, 1, 4, 3, 5), "nearest", None, [1.5, 1.5, 1.5], None),
            ("upsample_nearest_down", (1, 2, 7, 6, 5), "nearest", [3, 4, 2], None, None),
            ("upsample_trilinear_x2", (1, 2, 2, 3, 4), "trilinear", None, [2.0, 2.0, 2.0], False),
            ("upsample_trilinear_x2_ac", (1, 2, 2, 3, 4), "trilinear", None, [2.0, 2.0, 2.0], True),
            ("upsample_trilinear_size", (1, 1, 4, 3, 5), "trilinear", [7, 5, 6], None, False),
            ("upsample_trilinear_size_ac", (1, 1, 4, 3, 5), "trilinear", [7, 5, 6], None, True),
            ("upsample_trilinear_x1p5", (1, 1, 4, 3, 5), "trilinear", None, [1.5, 1.5, 1.5], False),
            ("upsample_trilinear_122", (1, 1, 3, 4, 3), "trilinear", None, [1.0, 2.0, 2.0], False),
            ("upsample_trilinear_down_ac", (1, 2, 7, 6, 5), "trilinear", [3, 4, 1], None, True)):
        x = randn(gen_for(name), *xs)
        out_size = size if size is not None else [int(math.floor(xs[2 + a] * scale[a])) for a in range(3)]
        params = {"mode": mode, "size": out_size, "scale_factor": scale, "align_corners": ac}
        if size is not None:
            fn = lambda x, mode=mode, size=size, ac=ac: F.interpolate(x, size=size, mode=mode, align_corners=ac)
        else:
            fn = lambda x, mode=mode, scale=scale, ac=ac: F.interpolate(x, scale_factor=scale, mode=mode,
                                                                        align_corners=ac)
        build = with_f64 if name in ("upsample_trilinear_size_ac", "upsample_trilinear_x1p5") else _plain
        build(cases, name, "upsample", params, {"x": x}, fn, ["x"])
    return cases


def shape_ops():  # (its generators keep the names "layers/..." they had when the group was called layers)
    """Issue 10's small ops: permute / transpose / view, sqrt, clamp, and sum / mean over negative dims."""
    cases = {}
    x = randn(gen_for("permute_neg"), 2, 3, 2, 3, 4)
    _plain(cases, "permute_neg", "permute", {"dims": [0, -1, 1, 2, 3]}, {"x": x},
           lambda x: x.permute(0, -1, 1, 2, 3), ["x"])
    x = randn(gen_for("permute_3d"), 3, 4, 5)
    _plain(cases, "permute_3d", "permute", {"dims": [2, 0, 1]}, {"x": x}, lambda x: x.permute(2, 0, 1), ["x"])
    x = randn(gen_for("transpose_1_neg1"), 1, 3, 2, 4, 5)
    _plain(cases, "transpose_1_neg1", "transpose", {"d0": 1, "d1": -1}, {"x": x},
           lambda x: x.transpose(1, -1), ["x"])
    x = randn(gen_for("view_infer"), 2, 3, 4, 5)
    _plain(cases, "view_infer", "view", {"shape": [6, -1, 5]}, {"x": x}, lambda x: x.view(6, -1, 5), ["x"])

    x = uniform(gen_for("sqrt"), 0.05, 4.0, 3, 4, 5)
    with_f64(cases, "sqrt", "sqrt", {}, {"x": x}, lambda x: torch.sqrt(x), ["x"])
    for name, lo, hi in (("clamp_both", -0.5, 0.75), ("clamp_min", -0.5, None), ("clamp_max", None, 0.75),
                         ("clamp_inverted", 0.75, -0.5)):
        x = randn(gen_for(name), 3, 4, 5)
        flat = x.view(-1)
        flat[:3] = -0.5  # values exactly on the bounds: the gradient passes there (both ends included)
        flat[3:6] = 0.75
        build = with_f64 if name == "clamp_both" else _plain
        build(cases, name, "clamp", {"min": lo, "max": hi}, {"x": x},
              lambda x, lo=lo, hi=hi: torch.clamp(x, min=lo, max=hi), ["x"])

    x5 = randn(gen_for("layers/x5"), 2, 3, 2, 3, 4)
    for op in ("sum", "mean"):
        fn = getattr(torch, op)
        for suffix, dims, keepdim in (("neg1", (-1,), False), ("neg1_neg3_keepdim", (-1, -3), True),
                                      ("1_neg1_keepdim", (1, -1), True), ("neg5", (-5,), False)):
            name = op + "_dims_" + suffix
            build = with_f64 if suffix == "neg1_neg3_keepdim" else _plain
            build(cases, name, op, {"dims": list(dims), "keepdim": keepdim}, {"x": x5},
                  lambda x, fn=fn, d=dims, k=keepdim: fn(x, dim=d, keepdim=k), ["x"])
    return cases


def norm():
    cases = {}
    xs = (2, 3, 3, 4, 5)
    for name in ("batch_norm_train", "batch_norm_eval"):
        g = gen_for(name)
        training = name.endswith("train")
        inputs = {"x": randn(g, *xs) * 1.5 + 0.3, "weight": uniform(g, 0.5, 1.5, 3), "bias": randn(g, 3, scale=0.3),
                  "running_mean": randn(g, 3, scale=0.2), "running_var": uniform(g, 0.5, 2.0, 3)}
        params = {"training": training, "momentum": 0.1, "eps": 1e-5, "affine": True,
                  "stats_dims": [0, 2, 3, 4],
                  "running_update": "running = (1 - momentum) * running + momentum * batch_stat; "
                                    "running_var uses the unbiased batch variance (n / (n - 1))"
                                    if training else "none (eval uses running stats, leaves them unchanged)"}

        def fn(x, weight, bias, running_mean, running_var, training=training):
            rm, rv = running_mean.detach().clone(), running_var.detach().clone()
            y = F.batch_norm(x, rm, rv, weight, bias, training=training, momentum=0.1, eps=1e-5)
            extra = {"running_mean": rm, "running_var": rv}
            if training:
                extra["batch_mean"] = x.detach().mean((0, 2, 3, 4))
                extra["batch_var_biased"] = x.detach().var((0, 2, 3, 4), unbiased=False)
            return y, extra
        with_f64(cases, name, "batch_norm", params, inputs, fn, ["x", "weight", "bias"])
    for affine in (True, False):
        name = "instance_norm_affine" if affine else "instance_norm_noaffine"
        g = gen_for(name)
        inputs = {"x": randn(g, *xs) * 1.5 + 0.3}
        if affine:
            inputs["weight"] = uniform(g, 0.5, 1.5, 3)
            inputs["bias"] = randn(g, 3, scale=0.3)
        params = {"eps": 1e-5, "affine": affine, "stats_dims": [2, 3, 4],
                  "formula": "y = (x - mean) / sqrt(biased_var + eps) [* weight[c] + bias[c]], stats per (n, c)"}
        fn = lambda x, weight=None, bias=None: F.instance_norm(x, weight=weight, bias=bias, eps=1e-5)
        build = with_f64 if affine else _plain
        build(cases, name, "instance_norm", params, inputs, fn, list(inputs))
    return cases


def activation():
    cases = {}
    xs = (2, 3, 3, 4, 5)
    x = randn(gen_for("activation/x"), *xs)  # no exact zeros, so the derivative at 0 never matters
    _plain(cases, "relu", "relu", {}, {"x": x}, lambda x: F.relu(x), ["x"])
    for slope in (0.01, 0.2):
        _plain(cases, "leaky_relu_%g" % slope, "leaky_relu", {"negative_slope": slope}, {"x": x},
               lambda x, s=slope: F.leaky_relu(x, s), ["x"])
    # The smooth activations of ops/activation/smooth.h, on x * 3 so that the tails (|x| up to ~10)
    # are exercised, in float32 and float64.
    x3 = x * 3
    for name, fn in (("sigmoid", lambda x: torch.sigmoid(x)), ("tanh", lambda x: torch.tanh(x)), ("silu", lambda x: F.silu(x)),
                     ("gelu", lambda x: F.gelu(x)), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"))):
        with_f64(cases, name, name, {}, {"x": x3}, fn, ["x"])
    x2 = x * 2
    with_f64(cases, "softmax_dim1", "softmax", {"dim": 1}, {"x": x2}, lambda x: x.softmax(1), ["x"])
    with_f64(cases, "log_softmax_dim1", "log_softmax", {"dim": 1}, {"x": x2}, lambda x: x.log_softmax(1), ["x"])
    return cases


def shape():
    cases = {}
    g = gen_for("cat_dim1")
    a, b = randn(g, 2, 3, 2, 3, 4), randn(g, 2, 5, 2, 3, 4)
    _plain(cases, "cat_dim1", "cat", {"dim": 1, "order": ["a", "b"]}, {"a": a, "b": b},
           lambda a, b: torch.cat([a, b], 1), ["a", "b"])
    g = gen_for("cat_dim0")
    a, b = randn(g, 1, 2, 2, 3, 4), randn(g, 2, 2, 2, 3, 4)
    _plain(cases, "cat_dim0", "cat", {"dim": 0, "order": ["a", "b"]}, {"a": a, "b": b},
           lambda a, b: torch.cat([a, b], 0), ["a", "b"])
    x = randn(gen_for("permute_0_4_1_2_3"), 2, 3, 4, 5, 3)
    _plain(cases, "permute_0_4_1_2_3", "permute", {"dims": [0, 4, 1, 2, 3]}, {"x": x},
           lambda x: x.permute(0, 4, 1, 2, 3), ["x"])
    return cases


def dice_part(logits, target, ncls):
    """The soft Dice term of loss_fn in shared/reference/torch_unet_step.py."""
    p = logits.softmax(1)
    oh = F.one_hot(target, ncls).permute(0, 4, 1, 2, 3).to(logits.dtype)
    inter = (p * oh).sum((0, 2, 3, 4))
    den = p.sum((0, 2, 3, 4)) + oh.sum((0, 2, 3, 4))
    return 1 - ((2 * inter + 1e-5) / (den + 1e-5)).mean()


def loss():
    cases = {}
    ncls, xs = 3, (2, 3, 3, 4, 5)
    dice_formula = ("p = softmax(logits, 1); oh = one_hot(target, C) as (N,C,D,H,W); "
                    "inter[c] = sum_{n,d,h,w} p*oh; den[c] = sum p + sum oh (over 0,2,3,4); "
                    "dice = 1 - mean_c((2*inter + 1e-5) / (den + 1e-5))")
    ce_formula = "mean over (n,d,h,w) of -log_softmax(logits, 1)[n, target, d, h, w]"
    for name, classes in (("", ncls), ("_absent_class", 2)):
        g = gen_for("loss" + name)
        logits = randn(g, *xs, scale=2.0)
        target = torch.randint(0, classes, (xs[0],) + xs[2:], generator=g)
        inputs = {"logits": logits, "target": target}
        note = {"num_classes": ncls, "target_classes_present": list(range(classes))}
        build = with_f64 if name == "" else _plain
        build(cases, "cross_entropy" + name, "cross_entropy",
              dict(note, reduction="mean", formula=ce_formula), inputs,
              lambda logits, target: F.cross_entropy(logits, target), ["logits"])
        build(cases, "dice_loss" + name, "dice_loss", dict(note, smooth=1e-5, formula=dice_formula), inputs,
              lambda logits, target: dice_part(logits, target, ncls), ["logits"])
        build(cases, "unet_loss" + name, "unet_loss",
              dict(note, smooth=1e-5, formula="cross_entropy + dice (loss_fn of torch_unet_step.py)"),
              inputs, lambda logits, target: F.cross_entropy(logits, target) + dice_part(logits, target, ncls),
              ["logits"])
    return cases


def optim():
    """100 optimiser steps on loss = sum((A @ w - b)^2) + sum(c * (W - D)^2)."""
    g = gen_for("optim/data")
    data = {"A": randn(g, 6, 10, scale=10 ** -0.5), "b": randn(g, 6, 1), "c": uniform(g, 0.5, 1.5, 3, 4),
            "D": randn(g, 3, 4)}
    init = {"w": randn(g, 10, 1), "W": randn(g, 3, 4)}
    steps, every = 100, 10
    configs = {
        "adamw": (torch.optim.AdamW, {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 1e-2,
                                      "amsgrad": False},
                  "t += 1; p *= 1 - lr*weight_decay; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; "
                  "p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); m, v start at 0"),
        "sgd_momentum": (torch.optim.SGD, {"lr": 1e-2, "momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0,
                                           "nesterov": False},
                         "g += weight_decay*p; buf = g on the first step, else buf = momentum*buf + g; p -= lr*buf"),
        "sgd_momentum_wd": (torch.optim.SGD, {"lr": 1e-2, "momentum": 0.9, "dampening": 0.0,
                                              "weight_decay": 1e-3, "nesterov": False},
                            "g += weight_decay*p; buf = g on the first step, else buf = momentum*buf + g; p -= lr*buf"),
    }
    cases = {}
    for name, (cls, hyper, update) in configs.items():
        for dtype, suffix in ((torch.float32, ""), (torch.float64, "_f64")):
            d = {k: v.to(dtype) for k, v in data.items()}
            p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in init.items()}
            kw = dict(hyper)
            if "betas" in kw:
                kw["betas"] = tuple(kw["betas"])
            opt = cls([p["w"], p["W"]], **kw)
            losses, outputs = [], {}
            for t in range(1, steps + 1):
                opt.zero_grad()
                l = ((d["A"] @ p["w"] - d["b"]) ** 2).sum() + (d["c"] * (p["W"] - d["D"]) ** 2).sum()
                l.backward()
                losses.append(l.detach().clone())
                opt.step()
                if t % every == 0:
                    for k in ("w", "W"):
                        outputs["%s_step%d" % (k, t)] = enc(p[k])
            params = {
                "optimizer": name.split("_")[0], "dtype": "float64" if suffix else "float32",
                "hyper": hyper, "update": update, "steps": steps, "record_every": every,
                "loss": "sum((A @ w - b)^2) + sum(c * (W - D)^2); w (10,1), A (6,10), b (6,1), W, c, D (3,4)",
                "param_order": ["w", "W"],
                "loop": "for t in 1..steps: zero_grad; l = loss(w, W); l.backward(); step(); "
                        "outputs loss[t-1] = l (before the step), <p>_step<t> = p after step t",
            }
            cases[name + suffix] = {
                "op": "optim", "params": params,
                "inputs": dict({k: enc(v) for k, v in data.items()}, **{k: enc(v) for k, v in init.items()}),
                "outputs": dict({"loss": enc(torch.stack(losses))}, **outputs),
                "grads": {},
            }
    return cases


def half():
    """float32 -> float16 round-to-nearest-even, as numpy does it."""
    labelled = []

    def add(label, v):
        labelled.append((label, np.float32(v)))
    for e in (-14, -5, 0, 3, 10, 15):  # ties at several exponents: ulp of half at 2^e is 2^(e-10)
        base, ulp = 2.0 ** e, 2.0 ** (e - 10)
        add("2^%d + ulp/2 (tie -> even, down)" % e, base + ulp / 2)
        add("2^%d + 3ulp/2 (tie -> even, up)" % e, base + 3 * ulp / 2)
        add("-(2^%d + 3ulp/2)" % e, -(base + 3 * ulp / 2))
        add("just above 2^%d + ulp/2" % e, np.nextafter(np.float32(base + ulp / 2), np.float32(np.inf)))
        add("just below 2^%d + 3ulp/2" % e, np.nextafter(np.float32(base + 3 * ulp / 2), np.float32(0)))
    for label, v in [("65504 (max half)", 65504.0), ("65519.99 -> 65504", 65519.99), ("65520 -> inf", 65520.0),
                     ("65536", 65536.0), ("-65520 -> -inf", -65520.0), ("1e5", 1e5), ("huge 1e30", 1e30),
                     ("float max", np.finfo(np.float32).max), ("1e-8 -> 0", 1e-8),
                     ("2^-24 (min subnormal)", 2.0 ** -24), ("2^-25 (tie -> 0)", 2.0 ** -25),
                     ("3*2^-26 -> 2^-24", 3 * 2.0 ** -26), ("-2^-25 -> -0", -(2.0 ** -25)),
                     ("1.5*2^-24 (subnormal tie -> 2)", 1.5 * 2.0 ** -24),
                     ("2.5*2^-24 (subnormal tie -> 2)", 2.5 * 2.0 ** -24),
                     ("3.5*2^-24 (subnormal tie -> 4)", 3.5 * 2.0 ** -24),
                     ("1023.5*2^-24 (tie -> min normal)", 1023.5 * 2.0 ** -24),
                     ("2^-14 (min normal)", 2.0 ** -14), ("just below 2^-14", np.nextafter(np.float32(2.0 ** -14), np.float32(0))),
                     ("0", 0.0), ("-0", -0.0), ("tiny 1e-40 (float32 subnormal)", 1e-40), ("-1e-40", -1e-40),
                     ("1", 1.0), ("-2", -2.0), ("0.1", 0.1), ("1/3", 1 / 3), ("pi", math.pi)]:
        add(label, v)
    rng = np.random.RandomState(20240601)
    for i in range(200):  # random magnitudes from below the subnormals to past the max
        add("random %d" % i, rng.choice([-1, 1]) * math.exp(rng.uniform(math.log(1e-9), math.log(1e5))))
    labels = [l for l, _ in labelled]
    x = np.array([v for _, v in labelled], dtype=np.float32)
    with np.errstate(over="ignore"):  # the overflow to inf is the point of several values
        hbits = x.astype(np.float16).view(np.uint16).astype(np.int64)
    xbits = x.view(np.uint32).astype(np.int64)
    # Cross-check numpy against torch's conversion.
    tbits = torch.from_numpy(x.copy()).half().view(torch.int16).numpy().astype(np.int64) & 0xFFFF
    assert (tbits == hbits).all(), "numpy and torch disagree on float16 rounding"
    cases = {"float_to_half_finite": {
        "op": "float_to_half",
        "params": {"rounding": "nearest, ties to even; |x| >= 65520 -> inf", "labels": labels,
                   "x_bits": "float32 bit pattern of x as an unsigned 32-bit int",
                   "half_bits": "numpy.float16 bit pattern as an unsigned 16-bit int"},
        "inputs": {"x": enc(torch.from_numpy(x.copy())), "x_bits": enc(torch.from_numpy(xbits))},
        "outputs": {"half_bits": enc(torch.from_numpy(hbits))}, "grads": {}}}

    nonfinite = [("inf", 0x7F800000), ("-inf", 0xFF800000), ("quiet NaN", 0x7FC00000),
                 ("negative quiet NaN", 0xFFC00000), ("signalling NaN with low payload", 0x7F800001),
                 ("NaN with high payload", 0x7FFFE000)]
    nb = np.array([b for _, b in nonfinite], dtype=np.uint32)
    nh = nb.view(np.float32).astype(np.float16).view(np.uint16).astype(np.int64)
    cases["float_to_half_nonfinite"] = {
        "op": "float_to_half",
        "params": {"labels": [l for l, _ in nonfinite],
                   "compare": "inf bits exactly; for NaN inputs only that the result is a NaN "
                              "(exponent 31, mantissa != 0): payloads are not specified"},
        "inputs": {"x_bits": enc(torch.from_numpy(nb.astype(np.int64)))},
        "outputs": {"half_bits": enc(torch.from_numpy(nh))}, "grads": {}}

    hb = sorted(set([0, 1, 2, 0x3FF, 0x400, 0x401, 0x3C00, 0x3C01, 0x7BFF, 0x8000, 0x8001, 0x83FF, 0xFBFF]
                    + [int(v) for v in rng.randint(0, 0x7C00, 100)] + [int(v) for v in rng.randint(0x8000, 0xFC00, 50)]))
    hbarr = np.array(hb, dtype=np.uint16)  # finite halves only: 0x7C00 and up (either sign) is inf/NaN
    cases["half_to_float"] = {
        "op": "half_to_float",
        "params": {"exact": "every finite half is a float32: compare exactly"},
        "inputs": {"half_bits": enc(torch.from_numpy(hbarr.astype(np.int64)))},
        "outputs": {"x": enc(torch.from_numpy(hbarr.view(np.float16).astype(np.float32)))}, "grads": {}}
    return cases


GROUPS = {"elementwise": elementwise, "reduce": reduce, "matmul": matmul, "conv": conv, "pool": pool,
          "norm": norm, "activation": activation, "shape": shape, "loss": loss, "optim": optim, "half": half,
          "shape_ops": shape_ops}


def main():
    # Group names on the command line rewrite only those files (`make_golden.py pool shape_ops`);
    # none rewrites every file.
    wanted = sys.argv[1:] or list(GROUPS)
    unknown = [w for w in wanted if w not in GROUPS]
    assert not unknown, "unknown groups %s (known: %s)" % (unknown, ", ".join(GROUPS))
    os.makedirs(OUT_DIR, exist_ok=True)
    total = 0
    for group in wanted:
        fn = GROUPS[group]
        torch.manual_seed(0)  # nothing should draw from the global generator; this keeps it fixed if one does
        doc = {"generator": GENERATOR, "torch": torch.__version__, "conventions": CONVENTIONS, "cases": fn()}
        path = os.path.join(OUT_DIR, group + ".json")
        write_json(path, doc)
        size = os.path.getsize(path)
        total += size
        print("%-18s %3d cases %8d bytes" % (group + ".json", len(doc["cases"]), size))
    print("total %d bytes" % total)
    # 2.5 MiB for the whole set since issue 10 added pool.json cases and shape_ops.json (small shapes).
    assert total < 5 * 512 * 1024, "golden files are too large"


if __name__ == "__main__":
    main()
