#!/usr/bin/python3
"""make_nonfinite_golden.py - what PyTorch gives when NaN, +inf and -inf reach each op (forward and
backward), for tests/ops/nonfinite_test.cpp and tests/cuda/nonfinite_cuda_test.cpp.

Run from the repository root with Debian's PyTorch (CPU, 1.13):

    /usr/bin/python3 tools/golden/make_nonfinite_golden.py

It rewrites tests/golden/nonfinite.json. The format is make_golden.py's (tests/golden.h reads both),
with one addition: a float32 value that is not finite is written as the string "nan", "inf" or
"-inf" (JSON has no such numbers). Every case takes random float32-exact inputs from
make_golden.py's generators, plants NaN / +inf / -inf at fixed positions (named in the case's
params["planted"]) and records y, the extra outputs and the gradients of y.backward(gy). The
cotangent gy is finite unless the case name says "_gy" (then it holds the planted values).

PyTorch 2.11 (this script run by it on the CPU, 2026-12-01, on the H200 machine): every case gives
the same NaN/inf positions as 1.13 but one: conv3d's dweight when dy holds an inf or NaN (the "_gy"
cases). 1.13's CPU kernel (vol2col + GEMM) multiplies the zero padding of x by that dy, so 0 * inf
makes 48 more NaNs in dweight; 2.11's oneDNN kernel never forms those products. halfgrad (CPU, and
the CUDA wgrad, which zero-fills the padding in its tiles) does as 1.13. Also seen there with 2.11,
CPU and CUDA (cuDNN) alike: a NaN weight reaches dx only where its tap does (36 of 128 for
conv3d_weight_nan's shape), where halfgrad's stride-1 dgrad (zero-padded dy convolved with the
flipped weight) and CUDA implicit-GEMM dgrad make the border NaN too; max_pool3d's last NaN wins,
argmax's first NaN, relu passes dy at a NaN, batch_norm of {+inf, 5} has mean +inf and var NaN.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (the generators, the JSON writer and the case conventions)

GENERATOR = "/usr/bin/python3 tools/golden/make_nonfinite_golden.py"
OUT = os.path.join(mg.OUT_DIR, "nonfinite.json")
NAN, INF = float("nan"), float("inf")

torch.set_num_threads(1)


def enc(t):
    """make_golden.enc, with non-finite float32 values written as "nan" / "inf" / "-inf"."""
    t = t.detach().cpu().contiguous()
    if t.dtype != torch.float32:
        return mg.enc(t)
    data = []
    for v in t.reshape(-1).numpy():
        if np.isnan(v):
            data.append("nan")
        elif np.isinf(v):
            data.append("inf" if v > 0 else "-inf")
        else:
            data.append(mg.f32_number(v))
    return {"shape": list(t.shape), "dtype": "float32", "data": data}


def plant(t, where):
    """A copy of t with t[index] = value for each (index, value) of `where`."""
    t = t.clone()
    for idx, v in where:
        t[idx] = v
    return t


def describe(where):
    return [[list(idx), "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")] for idx, v in where]


def case(name, op, params, inputs, fn, diff, gy_where=None, extra_params=None):
    """Run fn(**inputs) -> y or (y, {extras}); backprop gy (random, with gy_where planted) into `diff`."""
    leaves = {k: (v.clone().requires_grad_(k in diff) if v.is_floating_point() else v) for k, v in inputs.items()}
    out = fn(**leaves)
    y, extra = out if isinstance(out, tuple) else (out, {})
    gy = mg.randn(mg.gen_for(name + "/gy"), *y.shape)
    if gy_where:
        gy = plant(gy, gy_where)
    if diff:
        y.backward(gy)
    return {
        "op": op,
        "params": dict(params, **(extra_params or {})),
        "inputs": dict({k: enc(v) for k, v in leaves.items()}, gy=enc(gy)),
        "outputs": dict({"y": enc(y)}, **{k: enc(v) for k, v in extra.items()}),
        "grads": {k: enc(leaves[k].grad) for k in diff},
    }


# Planted positions. Volumes are (N, C, D, H, W); each kind of value sits in its own place so that
# the test can tell which one produced which NaN.
def vol_where(C=2):
    return [((0, 0, 1, 1, 1), NAN), ((0, C - 1, 2, 0, 3), INF), ((1, 0, 0, 3, 0), -INF)]


def groups():
    cases = {}

    # ---- conv3d / conv_transpose3d ----------------------------------------------------------------
    for k, s, p in ((3, 1, 1), (3, 2, 1)):
        base = "conv3d_k%d_s%d_p%d" % (k, s, p)
        g = mg.gen_for(base)
        x = mg.randn(g, 2, 2, 4, 4, 4)
        w = mg.randn(g, 3, 2, k, k, k, scale=0.3)
        b = mg.randn(g, 3, scale=0.1)
        prm = {"stride": s, "padding": p}
        fn = lambda x, weight, bias, s=s, p=p: F.conv3d(x, weight, bias, stride=s, padding=p)
        where = vol_where()
        cases[base + "_x"] = case(base + "_x", "conv3d", dict(prm, planted={"x": describe(where)}),
                                  {"x": plant(x, where), "weight": w, "bias": b}, fn, ["x", "weight", "bias"])
        ys = F.conv3d(x, w, b, stride=s, padding=p).shape
        gwhere = [((0, 0, 1, 1, 1), NAN), ((0, 2, 0, 1, 0), INF), ((1, 1, 1, 0, 1), -INF)]
        cases[base + "_gy"] = case(base + "_gy", "conv3d", dict(prm, planted={"gy": describe(gwhere)}),
                                   {"x": x, "weight": w, "bias": b}, fn, ["x", "weight", "bias"], gy_where=gwhere)
        assert all(i[d + 2] < ys[d + 2] for i, _ in gwhere for d in range(3))
    # A NaN weight: every output of its output channel is NaN (zero padding times NaN is NaN too).
    g = mg.gen_for("conv3d_weight_nan")
    x, w, b = mg.randn(g, 1, 2, 4, 4, 4), mg.randn(g, 3, 2, 3, 3, 3, scale=0.3), mg.randn(g, 3, scale=0.1)
    wwhere = [((1, 0, 0, 2, 1), NAN)]
    cases["conv3d_weight_nan"] = case("conv3d_weight_nan", "conv3d",
                                      {"stride": 1, "padding": 1, "planted": {"weight": describe(wwhere)}},
                                      {"x": x, "weight": plant(w, wwhere), "bias": b},
                                      lambda x, weight, bias: F.conv3d(x, weight, bias, stride=1, padding=1),
                                      ["x", "weight", "bias"])
    for suffix in ("_x", "_gy"):
        name = "conv_transpose3d_k2_s2" + suffix
        g = mg.gen_for(name)
        x, w, b = mg.randn(g, 2, 2, 3, 3, 3), mg.randn(g, 2, 3, 2, 2, 2, scale=0.3), mg.randn(g, 3, scale=0.1)
        fn = lambda x, weight, bias: F.conv_transpose3d(x, weight, bias, stride=2)
        if suffix == "_x":
            where = [((0, 0, 1, 1, 1), NAN), ((0, 1, 2, 0, 2), INF), ((1, 0, 0, 2, 0), -INF)]
            cases[name] = case(name, "conv_transpose3d", {"stride": 2, "padding": 0, "planted": {"x": describe(where)}},
                               {"x": plant(x, where), "weight": w, "bias": b}, fn, ["x", "weight", "bias"])
        else:
            gwhere = [((0, 0, 1, 1, 1), NAN), ((0, 2, 5, 0, 3), INF), ((1, 1, 0, 4, 2), -INF)]
            cases[name] = case(name, "conv_transpose3d", {"stride": 2, "padding": 0, "planted": {"gy": describe(gwhere)}},
                               {"x": x, "weight": w, "bias": b}, fn, ["x", "weight", "bias"], gy_where=gwhere)

    # ---- batch_norm / instance_norm ---------------------------------------------------------------
    # Channels: 0 holds a NaN, 1 a +inf, 2 a -inf, 3 both +inf and -inf, 4 nothing planted.
    nwhere = [((0, 0, 1, 1, 2), NAN), ((1, 1, 0, 2, 1), INF), ((0, 2, 1, 0, 0), -INF), ((1, 3, 1, 2, 3), INF),
              ((0, 3, 0, 0, 1), -INF)]
    g = mg.gen_for("batch_norm")
    x = mg.randn(g, 2, 5, 2, 3, 4) * 1.5 + 0.3
    w, b = mg.uniform(g, 0.5, 1.5, 5), mg.randn(g, 5, scale=0.3)
    rm, rv = mg.randn(g, 5, scale=0.2), mg.uniform(g, 0.5, 2.0, 5)

    def bn(training):
        def fn(x, weight, bias, running_mean, running_var):
            rm2, rv2 = running_mean.detach().clone(), running_var.detach().clone()
            y = F.batch_norm(x, rm2, rv2, weight, bias, training=training, momentum=0.1, eps=1e-5)
            return y, {"running_mean": rm2, "running_var": rv2}
        return fn
    prm = {"momentum": 0.1, "eps": 1e-5}
    ins = {"x": plant(x, nwhere), "weight": w, "bias": b, "running_mean": rm, "running_var": rv}
    cases["batch_norm_train_x"] = case("batch_norm_train_x", "batch_norm",
                                       dict(prm, training=True, planted={"x": describe(nwhere)}),
                                       ins, bn(True), ["x", "weight", "bias"])
    cases["batch_norm_eval_x"] = case("batch_norm_eval_x", "batch_norm",
                                      dict(prm, training=False, planted={"x": describe(nwhere)}),
                                      ins, bn(False), ["x", "weight", "bias"])
    # Evaluation with non-finite running statistics: channel 0 mean NaN, 1 var NaN, 2 mean +inf, 3 var +inf.
    rwhere_m, rwhere_v = [((0,), NAN), ((2,), INF)], [((1,), NAN), ((3,), INF)]
    cases["batch_norm_eval_running"] = case(
        "batch_norm_eval_running", "batch_norm",
        dict(prm, training=False, planted={"running_mean": describe(rwhere_m), "running_var": describe(rwhere_v)}),
        {"x": x, "weight": w, "bias": b, "running_mean": plant(rm, rwhere_m), "running_var": plant(rv, rwhere_v)},
        bn(False), ["x", "weight", "bias"])
    gwhere = [((0, 0, 1, 1, 2), NAN), ((1, 1, 0, 2, 1), INF), ((0, 2, 1, 0, 0), -INF)]
    cases["batch_norm_train_gy"] = case("batch_norm_train_gy", "batch_norm",
                                        dict(prm, training=True, planted={"gy": describe(gwhere)}),
                                        {"x": x, "weight": w, "bias": b, "running_mean": rm, "running_var": rv},
                                        bn(True), ["x", "weight", "bias"], gy_where=gwhere)
    g = mg.gen_for("instance_norm")
    x = mg.randn(g, 2, 3, 2, 3, 4) * 1.5 + 0.3
    w, b = mg.uniform(g, 0.5, 1.5, 3), mg.randn(g, 3, scale=0.3)
    iwhere = [((0, 0, 1, 1, 2), NAN), ((1, 1, 0, 2, 1), INF), ((0, 2, 1, 0, 0), -INF), ((1, 2, 1, 1, 1), INF),
              ((1, 2, 0, 0, 0), -INF)]
    cases["instance_norm_x"] = case("instance_norm_x", "instance_norm", {"eps": 1e-5, "planted": {"x": describe(iwhere)}},
                                    {"x": plant(x, iwhere), "weight": w, "bias": b},
                                    lambda x, weight, bias: F.instance_norm(x, weight=weight, bias=bias, eps=1e-5),
                                    ["x", "weight", "bias"])

    # ---- activations ------------------------------------------------------------------------------
    # Elementwise, so one row says it all: x and gy each hold every kind of value at every kind of
    # partner value. x = [NaN, +inf, -inf, 0, 1.5, -2, 3, -1, 0.5, -0.5], gy planted at 6..9.
    x = torch.tensor([NAN, INF, -INF, 0.0, 1.5, -2.0, 3.0, -1.0, 0.5, -0.5])
    gwhere = [((6,), NAN), ((7,), INF), ((8,), -INF), ((9,), INF)]
    cases["relu"] = case("relu", "relu", {"planted": {"x": "[NaN, +inf, -inf] at 0..2", "gy": describe(gwhere)}},
                         {"x": x}, lambda x: F.relu(x), ["x"], gy_where=gwhere)
    cases["leaky_relu_0.01"] = case("leaky_relu_0.01", "leaky_relu",
                                    {"negative_slope": 0.01,
                                     "planted": {"x": "[NaN, +inf, -inf] at 0..2", "gy": describe(gwhere)}},
                                    {"x": x}, lambda x: F.leaky_relu(x, 0.01), ["x"], gy_where=gwhere)

    # ---- max_pool3d -------------------------------------------------------------------------------
    # (1, 2, 4, 4, 4), k = s = 2: eight windows per channel. Channel 0: window (0, 0, 0) holds two NaNs
    # (the last one wins), window (0, 0, 1) a NaN in its first element and a later +inf (the NaN
    # stays), window (0, 1, 0) is all -inf (the index of its first element), window (1, 0, 0) a -inf
    # among numbers. Channel 1: finite.
    g = mg.gen_for("max_pool3d")
    x = mg.randn(g, 1, 2, 4, 4, 4)
    pwhere = [((0, 0, 0, 0, 1), NAN), ((0, 0, 1, 1, 0), NAN), ((0, 0, 0, 0, 2), NAN), ((0, 0, 1, 0, 2), INF),
              ((0, 0, 2, 0, 0), -INF)]
    for d in range(2):
        for h in range(2, 4):
            for w_ in range(2):
                pwhere.append(((0, 0, d, h, w_), -INF))

    def pool(k, s):
        def fn(x):
            y, idx = F.max_pool3d(x, k, s, return_indices=True)
            return y, {"indices": idx}
        return fn
    cases["max_pool3d_k2_s2"] = case("max_pool3d_k2_s2", "max_pool3d", {"kernel": 2, "stride": 2,
                                                                          "planted": {"x": describe(pwhere)}},
                                     {"x": plant(x, pwhere)}, pool(2, 2), ["x"])
    g = mg.gen_for("max_pool3d_k3_s1")
    x = mg.randn(g, 1, 1, 4, 4, 4)
    # Overlapping windows (starts 0 and 1 per dim): the NaN at (0, 0, 0) is in window (0, 0, 0) only; the
    # NaNs at (0, 3, 3) and (1, 3, 3) are both in window (0, 1, 1), where the later one wins, and the
    # second is also alone in window (1, 1, 1), so it takes both windows' dy; the +inf at (3, 0, 3) is
    # window (1, 0, 1)'s maximum; the other four windows are finite.
    owhere = [((0, 0, 0, 0, 0), NAN), ((0, 0, 0, 3, 3), NAN), ((0, 0, 1, 3, 3), NAN), ((0, 0, 3, 0, 3), INF)]
    cases["max_pool3d_k3_s1"] = case("max_pool3d_k3_s1", "max_pool3d", {"kernel": 3, "stride": 1,
                                                                          "planted": {"x": describe(owhere)}},
                                     {"x": plant(x, owhere)}, pool(3, 1), ["x"])

    # ---- softmax / log_softmax over the class dim ------------------------------------------------
    g = mg.gen_for("softmax")
    x = mg.randn(g, 2, 3, 2, 2, 3)
    swhere = [((0, 0, 0, 0, 0), NAN), ((0, 1, 0, 0, 1), INF), ((0, 2, 0, 1, 0), -INF), ((1, 0, 1, 1, 1), INF),
              ((1, 2, 1, 1, 1), INF)]
    for c in range(3):
        swhere.append(((1, c, 0, 0, 2), -INF))  # a position where every class is -inf
    for opname, f in (("softmax", lambda x: x.softmax(1)), ("log_softmax", lambda x: x.log_softmax(1))):
        cases[opname + "_dim1"] = case(opname + "_dim1", opname, {"dim": 1, "planted": {"x": describe(swhere)}},
                                       {"x": plant(x, swhere)}, f, ["x"])

    # ---- losses -----------------------------------------------------------------------------------
    # logits (2, 3, 2, 2, 3): a NaN at one position, +inf at a non-target class at another, -inf at
    # the target class at a third (CE = +inf there), -inf at a non-target class at a fourth (finite).
    g = mg.gen_for("loss")
    logits = mg.randn(g, 2, 3, 2, 2, 3, scale=2.0)
    target = torch.randint(0, 3, (2, 2, 2, 3), generator=g)
    t = lambda *i: int(target[i])
    lwhere = [((0, 0, 0, 0, 0), NAN),
              ((0, (t(0, 0, 1, 1) + 1) % 3, 0, 1, 1), INF),
              ((1, t(1, 1, 0, 2), 1, 0, 2), -INF),
              ((1, (t(1, 0, 1, 0) + 2) % 3, 0, 1, 0), -INF)]
    only_finite = [lwhere[3]]
    target_inf = [lwhere[2], lwhere[3]]
    dice = lambda logits, target: mg.dice_part(logits, target, 3)
    for name, where in (("all", lwhere), ("neg_inf_other_class", only_finite), ("neg_inf_target", target_inf)):
        ins = {"logits": plant(logits, where), "target": target}
        prm = {"num_classes": 3, "planted": {"logits": describe(where)}}
        cases["cross_entropy_" + name] = case("cross_entropy_" + name, "cross_entropy", prm, ins,
                                              lambda logits, target: F.cross_entropy(logits, target), ["logits"])
        cases["dice_loss_" + name] = case("dice_loss_" + name, "dice_loss", dict(prm, smooth=1e-5), ins, dice,
                                          ["logits"])
        cases["unet_loss_" + name] = case("unet_loss_" + name, "unet_loss", dict(prm, smooth=1e-5), ins,
                                          lambda logits, target: F.cross_entropy(logits, target) + dice(logits, target),
                                          ["logits"])

    # ---- reductions -------------------------------------------------------------------------------
    g = mg.gen_for("reduce")
    x = mg.randn(g, 2, 3, 4)
    rwhere = [((0, 0, 1), NAN), ((0, 1, 2), INF), ((1, 2, 0), -INF), ((1, 1, 3), INF), ((1, 1, 0), -INF)]
    xr = plant(x, rwhere)
    pr = {"planted": {"x": describe(rwhere)}}
    cases["sum_all"] = case("sum_all", "sum", dict(pr, dims=None), {"x": xr}, lambda x: x.sum(), ["x"])
    cases["sum_dims_2"] = case("sum_dims_2", "sum", dict(pr, dims=[2]), {"x": xr}, lambda x: x.sum(2), ["x"])
    cases["mean_dims_0_2"] = case("mean_dims_0_2", "mean", dict(pr, dims=[0, 2]), {"x": xr}, lambda x: x.mean((0, 2)),
                                  ["x"])
    gwhere = [((0, 1), NAN), ((1, 2), INF)]
    cases["sum_dims_2_gy"] = case("sum_dims_2_gy", "sum", {"dims": [2], "planted": {"gy": describe(gwhere)}},
                                  {"x": x}, lambda x: x.sum(2), ["x"], gy_where=gwhere)
    big = torch.full((4,), 3e38)
    cases["sum_overflow"] = case("sum_overflow", "sum", {"dims": None, "note": "4 * 3e38 overflows float32 to +inf"},
                                 {"x": big}, lambda x: x.sum(), ["x"])
    x = torch.tensor([[1.0, NAN, 3.0, NAN], [2.0, INF, INF, 1.0], [-INF, -INF, -INF, -INF], [NAN, 5.0, 6.0, 7.0],
                      [0.5, 0.25, -INF, 0.75]])
    cases["argmax_dim1"] = case("argmax_dim1", "argmax", {"dim": 1}, {"x": x}, lambda x: (x.sum(), {"index": x.argmax(1)}),
                                [])

    # ---- matmul / linear --------------------------------------------------------------------------
    g = mg.gen_for("matmul")
    a, bm = mg.randn(g, 4, 5), mg.randn(g, 5, 3)
    mwhere = [((0, 1), NAN), ((2, 3), INF), ((3, 0), -INF)]
    cases["matmul_a"] = case("matmul_a", "matmul", {"planted": {"a": describe(mwhere)}},
                             {"a": plant(a, mwhere), "b": bm}, lambda a, b: a @ b, ["a", "b"])
    g = mg.gen_for("linear")
    x, w, b = mg.randn(g, 4, 5), mg.randn(g, 3, 5, scale=0.4), mg.randn(g, 3, scale=0.1)
    lnw = [((1, 2), NAN), ((3, 4), -INF)]
    cases["linear_x"] = case("linear_x", "linear", {"planted": {"x": describe(lnw)}},
                             {"x": plant(x, lnw), "weight": w, "bias": b},
                             lambda x, weight, bias: F.linear(x, weight, bias), ["x", "weight", "bias"])

    # ---- elementwise ------------------------------------------------------------------------------
    # Every pairing of the special values: a = [NaN, inf, -inf, inf, 0, 1, 2, -inf, 0], b = [1, 2, 3,
    # inf, 0, 0, -inf, -inf, NaN] (so inf - inf, inf * 0, 0 / 0 and x / 0 all occur).
    a = torch.tensor([NAN, INF, -INF, INF, 0.0, 1.0, 2.0, -INF, 0.0])
    bb = torch.tensor([1.0, 2.0, 3.0, INF, 0.0, 0.0, -INF, -INF, NAN])
    for name, f in (("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
                    ("div", lambda a, b: a / b)):
        cases[name] = case(name, name, {"planted": "a, b: every pairing of NaN, +-inf, 0 and numbers"},
                           {"a": a, "b": bb}, f, ["a", "b"])
    x = torch.tensor([0.0, -1.0, 100.0, -INF, INF, NAN, 2.0])
    cases["exp"] = case("exp", "exp", {"planted": "x: 0, -1, 100 (exp overflows), -inf, inf, NaN, 2"}, {"x": x},
                        torch.exp, ["x"])
    cases["log"] = case("log", "log", {"planted": "x: 0 (-inf), -1 (NaN), 100, -inf, inf, NaN, 2"}, {"x": x},
                        torch.log, ["x"])
    cases["pow_2"] = case("pow_2", "pow", {"exponent": 2.0}, {"x": x}, lambda x: x.pow(2.0), ["x"])
    cases["pow_0"] = case("pow_0", "pow", {"exponent": 0.0, "note": "dx = 0 everywhere (pow_backward)"}, {"x": x},
                          lambda x: x.pow(0.0), ["x"], gy_where=[((1,), NAN), ((2,), INF)])

    # ---- cast to float16 --------------------------------------------------------------------------
    x = torch.tensor([NAN, INF, -INF, 65504.0, 65519.0, 65520.0, -65520.0, 1e6, 1e-8, 3e-8, -1e-10, 1.0])
    cases["cast_float16"] = case("cast_float16", "cast", {"to": "float16", "y": "the float16 values, as float32"},
                                 {"x": x}, lambda x: x.half().float(), ["x"])

    # ---- the layers of issue 10 ------------------------------------------------------------------
    # Smooth activations, on relu's row of special values (x and gy each hold NaN / +inf / -inf).
    x = torch.tensor([NAN, INF, -INF, 0.0, 1.5, -2.0, 3.0, -1.0, 0.5, -0.5])
    gwhere = [((6,), NAN), ((7,), INF), ((8,), -INF), ((9,), INF)]
    act_planted = {"x": "[NaN, +inf, -inf] at 0..2", "gy": describe(gwhere)}
    for name, f, prm in (("sigmoid", lambda x: torch.sigmoid(x), {}), ("tanh", lambda x: torch.tanh(x), {}), ("silu", lambda x: F.silu(x), {}),
                         ("gelu", lambda x: F.gelu(x), {"approximate": "none"}),
                         ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), {"approximate": "tanh"})):
        cases[name] = case(name, "gelu" if name.startswith("gelu") else name, dict(prm, planted=act_planted),
                           {"x": x}, f, ["x"], gy_where=gwhere)
    x = torch.tensor([0.0, -1.0, 100.0, -INF, INF, NAN, 2.0, 0.25])
    cases["sqrt"] = case("sqrt", "sqrt", {"planted": "x: 0 (dx inf), -1 (NaN), 100, -inf, inf, NaN, 2, 0.25"},
                         {"x": x}, lambda x: torch.sqrt(x), ["x"])
    cases["clamp_-1_2"] = case("clamp_-1_2", "clamp", {"min": -1.0, "max": 2.0, "planted": "x: NaN passes through"},
                               {"x": x}, lambda x: x.clamp(-1.0, 2.0), ["x"], gy_where=[((7,), NAN)])
    cases["clamp_min_0"] = case("clamp_min_0", "clamp", {"min": 0.0, "max": None}, {"x": x},
                                lambda x: x.clamp(min=0.0), ["x"])
    # Elementwise losses: NaN / inf in the input and in the target, reduction none and mean.
    g = mg.gen_for("elementwise_loss")
    xi, ti = mg.randn(g, 2, 5), mg.randn(g, 2, 5)
    xw, tw = [((0, 1), NAN), ((1, 2), INF), ((1, 4), -INF)], [((0, 3), NAN), ((1, 0), INF)]
    ins = {"input": plant(xi, xw), "target": plant(ti, tw)}
    lp = {"planted": {"input": describe(xw), "target": describe(tw)}}
    for opname, f in (("mse_loss", F.mse_loss), ("l1_loss", F.l1_loss)):
        for red in ("none", "mean"):
            cases["%s_%s" % (opname, red)] = case("%s_%s" % (opname, red), opname, dict(lp, reduction=red), ins,
                                                  lambda input, target, f=f, red=red: f(input, target, reduction=red),
                                                  ["input", "target"])
    # BCE with logits: logits +-inf and NaN against targets 0, 1 and 0.5 (PyTorch's max-shifted form).
    xb = torch.tensor([[INF, INF, -INF, -INF, NAN, 2.0], [INF, -INF, 0.5, -3.0, 1.0, -1.0]])
    tb = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0, 0.0], [0.5, 0.5, NAN, 1.0, 0.0, 1.0]])
    for red in ("none", "mean"):
        cases["bce_with_logits_" + red] = case("bce_with_logits_" + red, "bce_with_logits",
                                               {"reduction": red, "planted": "input +-inf / NaN against targets 0, 1, 0.5; "
                                                "one NaN target"},
                                               {"input": xb, "target": tb},
                                               lambda input, target, red=red: F.binary_cross_entropy_with_logits(
                                                   input, target, reduction=red), ["input", "target"])
    # layer_norm over the last dim (2, 3, 4): row 0 a NaN, row 1 +inf, row 2 +inf and -inf, rows 3.. finite.
    g = mg.gen_for("layer_norm")
    x, w, b = mg.randn(g, 2, 3, 4), mg.uniform(g, 0.5, 1.5, 4), mg.randn(g, 4, scale=0.3)
    lw = [((0, 0, 1), NAN), ((0, 1, 2), INF), ((0, 2, 0), INF), ((0, 2, 3), -INF)]
    cases["layer_norm_x"] = case("layer_norm_x", "layer_norm", {"normalized_shape": [4], "eps": 1e-5,
                                                                 "planted": {"x": describe(lw)}},
                                 {"x": plant(x, lw), "weight": w, "bias": b},
                                 lambda x, weight, bias: F.layer_norm(x, (4,), weight, bias, 1e-5),
                                 ["x", "weight", "bias"])
    # group_norm (2, 4, 2, 2, 3), 2 groups: (n0, g0) a NaN, (n0, g1) +inf, (n1, g0) +inf and -inf, (n1, g1) finite.
    g = mg.gen_for("group_norm")
    x, w, b = mg.randn(g, 2, 4, 2, 2, 3) * 1.5 + 0.3, mg.uniform(g, 0.5, 1.5, 4), mg.randn(g, 4, scale=0.3)
    gw = [((0, 1, 1, 0, 2), NAN), ((0, 2, 0, 1, 1), INF), ((1, 0, 1, 1, 0), INF), ((1, 1, 0, 0, 1), -INF)]
    cases["group_norm_x"] = case("group_norm_x", "group_norm", {"groups": 2, "eps": 1e-5, "planted": {"x": describe(gw)}},
                                 {"x": plant(x, gw), "weight": w, "bias": b},
                                 lambda x, weight, bias: F.group_norm(x, 2, weight, bias, 1e-5), ["x", "weight", "bias"])
    # Pooling and resampling of a (1, 2, 4, 4, 4) volume with NaN / +inf / -inf, and +inf with -inf in one window.
    g = mg.gen_for("avg_pool3d")
    x = mg.randn(g, 1, 2, 4, 4, 4)
    aw = [((0, 0, 0, 0, 1), NAN), ((0, 0, 2, 2, 2), INF), ((0, 1, 0, 2, 0), -INF), ((0, 1, 3, 3, 3), INF),
          ((0, 1, 2, 2, 2), -INF)]
    xa = plant(x, aw)
    ap = {"planted": {"x": describe(aw)}}
    cases["avg_pool3d_k2_s2"] = case("avg_pool3d_k2_s2", "avg_pool3d", dict(ap, kernel=2, stride=2, padding=0),
                                     {"x": xa}, lambda x: F.avg_pool3d(x, 2, 2), ["x"])
    cases["avg_pool3d_k3_s1_p1"] = case("avg_pool3d_k3_s1_p1", "avg_pool3d", dict(ap, kernel=3, stride=1, padding=1),
                                        {"x": xa}, lambda x: F.avg_pool3d(x, 3, 1, 1), ["x"])
    cases["adaptive_avg_pool3d_3x2x1"] = case("adaptive_avg_pool3d_3x2x1", "adaptive_avg_pool3d",
                                              dict(ap, output_size=[3, 2, 1]), {"x": xa},
                                              lambda x: F.adaptive_avg_pool3d(x, (3, 2, 1)), ["x"])
    g = mg.gen_for("upsample")
    x = mg.randn(g, 1, 2, 2, 3, 2)
    uw = [((0, 0, 0, 1, 1), NAN), ((0, 1, 1, 0, 0), INF), ((0, 1, 1, 2, 1), -INF)]
    up = {"planted": {"x": describe(uw)}, "size": [4, 5, 4]}
    cases["upsample_nearest3d"] = case("upsample_nearest3d", "upsample_nearest3d", up, {"x": plant(x, uw)},
                                       lambda x: F.interpolate(x, size=(4, 5, 4), mode="nearest"), ["x"])
    for ac in (False, True):
        name = "upsample_trilinear3d_align%d" % ac
        cases[name] = case(name, "upsample_trilinear3d", dict(up, align_corners=ac), {"x": plant(x, uw)},
                           lambda x, ac=ac: F.interpolate(x, size=(4, 5, 4), mode="trilinear", align_corners=ac), ["x"])

    # ---- optimisers: one step with a NaN / inf gradient element, then a finite step ----------------
    g = mg.gen_for("optim")
    p0 = mg.randn(g, 6)
    g1 = plant(mg.randn(g, 6), [((1,), NAN), ((4,), INF)])
    g2 = mg.randn(g, 6)
    for name, make in (("adamw", lambda p: torch.optim.AdamW([p], lr=1e-2, weight_decay=1e-2)),
                       ("sgd_momentum", lambda p: torch.optim.SGD([p], lr=1e-2, momentum=0.9)),
                       ("sgd", lambda p: torch.optim.SGD([p], lr=1e-2))):
        p = p0.clone().requires_grad_(True)
        opt = make(p)
        outs = {}
        for step, grad in ((1, g1), (2, g2)):
            p.grad = grad.clone()
            opt.step()
            outs["p_step%d" % step] = enc(p)
        cases["optim_" + name] = {
            "op": "optim", "params": {"optimizer": name, "hyper": opt.defaults and {
                k: v for k, v in opt.defaults.items() if isinstance(v, (int, float, bool, tuple))},
                "loop": "p.grad = g1; step(); p.grad = g2; step()", "planted": {"g1": [[[1], "nan"], [[4], "inf"]]}},
            "inputs": {"p": enc(p0), "g1": enc(g1), "g2": enc(g2)},
            "outputs": outs, "grads": {}}
    # clip_grad_norm_ (error_if_nonfinite=False): total NaN or inf, and the grads it leaves.
    for name, where in (("inf", [((2,), INF)]), ("nan", [((3,), NAN)])):
        ga, gb = mg.randn(g, 5), plant(mg.randn(g, 4), where)
        pa, pb = torch.zeros(5, requires_grad=True), torch.zeros(4, requires_grad=True)
        pa.grad, pb.grad = ga.clone(), gb.clone()
        total = torch.nn.utils.clip_grad_norm_([pa, pb], 1.0, error_if_nonfinite=False)
        cases["clip_grad_norm_" + name] = {
            "op": "clip_grad_norm", "params": {"max_norm": 1.0, "norm_type": 2.0, "planted": {"gb": describe(where)}},
            "inputs": {"ga": enc(ga), "gb": enc(gb)},
            "outputs": {"total": enc(total.reshape(())), "ga": enc(pa.grad), "gb": enc(pb.grad)}, "grads": {}}
    return cases


def main():
    cases = groups()
    doc = {"generator": GENERATOR, "torch": torch.__version__,
           "conventions": mg.CONVENTIONS + "; a non-finite float32 is the string \"nan\", \"inf\" or \"-inf\"",
           "cases": cases}
    mg.write_json(OUT, doc)
    print("nonfinite.json %d cases %d bytes" % (len(cases), os.path.getsize(OUT)))


if __name__ == "__main__":
    main()
