#!/usr/bin/env python3
"""make_grad_scaler_golden.py - golden trajectories of torch.amp.GradScaler for halfgrad's GradScaler.

Needs PyTorch >= 2.3 (torch.amp.GradScaler with a device argument). Run from the repository root:

    python3 tools/golden/make_grad_scaler_golden.py [output.json]   # default tests/golden/grad_scaler.json

It uses CUDA when available, else the CPU scaler (torch.amp.GradScaler("cpu")); the file's "device"
field and every case's params say which. Debian's PyTorch 1.13 cannot run it (its scaler needs CUDA).

What it replays, per case: one SGD optimiser (lr 0.1, momentum 0.9) over two parameters p1 (5,) and
p2 (3, 2). At step t the loss is sum(p1 * g1[t]) + sum(p2 * g2[t]), so the unscaled gradients are
exactly g1[t], g2[t]; chosen steps have an inf or NaN written into one gradient (params.inject). Each
step does, as in PyTorch's AMP recipe:

    zero_grad(); scaler.scale(loss).backward(); scaler.step(opt); scaler.update()

GradScaler semantics being recorded (torch/amp/grad_scaler.py and _amp_update_scale_):
  * scale(loss) = loss * scale; backward then leaves grad = scale * g (exact: scale is a power of 2,
    unless scale * g overflows float32 to inf, which the "overflow" case provokes on purpose).
  * step(): unscale_ multiplies every grad by inv_scale = float32(1 / double(scale)) and sets found_inf
    if any grad element is inf or NaN; if found_inf, optimizer.step() is skipped (params and momentum
    buffers untouched).
  * update(): if found_inf: scale *= backoff_factor (0.5), growth_tracker = 0.
              else: growth_tracker += 1; if growth_tracker == growth_interval: growth_tracker = 0 and
                    scale *= growth_factor (2.0) unless that would overflow float32 to inf (then the
                    scale stays).
The script checks the torch results against this description (model_scaler below) before writing.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import enc, gen_for, randn, write_json  # noqa: E402  (shared JSON encoding)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATOR = "python3 tools/golden/make_grad_scaler_golden.py"

SHAPES = {"p1": (5,), "p2": (3, 2)}
LR, MOMENTUM = 0.1, 0.9

# Injected non-finite gradients for the 60-step cases: (step, param, flat index, value).
INJECT_60 = [(5, "p1", 2, "inf"), (6, "p2", 4, "nan"), (20, "p1", 0, "-inf"), (21, "p2", 0, "nan"),
             (22, "p1", 4, "nan"), (35, "p2", 5, "inf"), (36, "p1", 1, "inf"), (50, "p2", 3, "-inf")]

# name: (init_scale, growth_interval, steps, gradient magnitude, injections)
CASES = {
    "init65536_interval2000": (2.0 ** 16, 2000, 60, 1.0, INJECT_60),
    "init65536_interval3": (2.0 ** 16, 3, 60, 1.0, INJECT_60),
    "init8192_interval3": (8192.0, 3, 60, 1.0, INJECT_60),
    # No injections: with growth every step the scale climbs until scale * g overflows float32 by
    # itself (|g| ~ 1e4 overflows once scale reaches about 2^114), backs off, and climbs again.
    "overflow_init2p100_interval1": (2.0 ** 100, 1, 30, 1e4, []),
    # The scale would grow past float32's max (2^127 * 2 = inf): it must stay at 2^127.
    "growth_cap_init2p127_interval1": (2.0 ** 127, 1, 8, 1e-20, []),
}


def torch_version_at_least(major, minor):
    v = torch.__version__.split("+")[0].split(".")
    return (int(v[0]), int(v[1])) >= (major, minor)


def model_scaler(init_scale, growth_interval, finite_per_step):
    """The update rule written out: (scale_before, skipped, scale_after, tracker) per step."""
    f32 = lambda v: torch.tensor(v, dtype=torch.float32)
    scale, tracker, rows = f32(init_scale), 0, []
    for finite in finite_per_step:
        before = scale.item()
        if not finite:
            scale, tracker = scale * 0.5, 0
        else:
            tracker += 1
            if tracker == growth_interval:
                grown = scale * 2.0
                if torch.isfinite(grown):
                    scale = grown
                tracker = 0
        rows.append((before, not finite, scale.item(), tracker))
    return rows


class CountingSGD(torch.optim.SGD):
    """SGD that counts its steps, so a skipped step is seen even when an update would round away."""
    def step(self, closure=None):
        self.steps_taken = getattr(self, "steps_taken", 0) + 1
        return super().step(closure)


def run_case(name, init_scale, growth_interval, steps, gmag, inject, device):
    g = gen_for("grad_scaler/" + name)
    init = {k: randn(g, *s) for k, s in SHAPES.items()}
    grads = {k: randn(g, steps, *s, scale=gmag) for k, s in SHAPES.items()}
    poisoned = {k: v.clone() for k, v in grads.items()}
    for step, pname, index, value in inject:
        poisoned[pname][step].view(-1)[index] = float(value)

    params = {k: torch.nn.Parameter(v.clone().to(device)) for k, v in init.items()}
    opt = CountingSGD(list(params.values()), lr=LR, momentum=MOMENTUM)
    scaler = torch.amp.GradScaler(device, init_scale=init_scale, growth_factor=2.0, backoff_factor=0.5,
                                  growth_interval=growth_interval)
    rec = {"scale_before": [], "skipped": [], "scale_after": [], "growth_tracker": [],
           "p1_after": [], "p2_after": []}
    finite_per_step = []
    for t in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = sum((params[k] * poisoned[k][t].to(device)).sum() for k in SHAPES)
        scale_before = scaler.get_scale()
        scaler.scale(loss).backward()
        scaled_finite = all(torch.isfinite(params[k].grad).all().item() for k in SHAPES)
        before = {k: p.detach().clone() for k, p in params.items()}
        steps_before = getattr(opt, "steps_taken", 0)
        scaler.step(opt)
        scaler.update()
        skipped = getattr(opt, "steps_taken", 0) == steps_before
        if skipped:
            assert all(torch.equal(before[k], params[k].detach()) for k in SHAPES), "skipped step moved params"
        finite_per_step.append(scaled_finite)
        rec["scale_before"].append(scale_before)
        rec["skipped"].append(int(skipped))
        rec["scale_after"].append(scaler.get_scale())
        rec["growth_tracker"].append(int(scaler._get_growth_tracker()))
        for k in SHAPES:
            rec[k + "_after"].append(params[k].detach().cpu().clone())  # clone: on CPU .cpu() aliases

    model = model_scaler(init_scale, growth_interval, finite_per_step)
    for t, (sb, skipped, sa, tracker) in enumerate(model):
        got = (rec["scale_before"][t], bool(rec["skipped"][t]), rec["scale_after"][t], rec["growth_tracker"][t])
        assert got == (sb, skipped, sa, tracker), "%s step %d: torch %r, model %r" % (name, t, got, (sb, skipped, sa, tracker))

    # The params follow SGD with momentum over the steps that were not skipped (float64 replay).
    p64 = {k: v.double() for k, v in init.items()}
    buf = {k: None for k in SHAPES}
    for t in range(steps):
        if not rec["skipped"][t]:
            for k in SHAPES:
                g64 = poisoned[k][t].double()
                buf[k] = g64.clone() if buf[k] is None else MOMENTUM * buf[k] + g64
                p64[k] = p64[k] - LR * buf[k]
        for k in SHAPES:
            got = rec[k + "_after"][t].double()
            assert torch.allclose(got, p64[k], rtol=1e-4, atol=1e-4 * (1 + p64[k].abs().max().item())), \
                "%s step %d: %s differs from the SGD replay" % (name, t, k)

    f32 = lambda v: torch.tensor(v, dtype=torch.float32)
    i64 = lambda v: torch.tensor(v, dtype=torch.int64)
    return {
        "op": "grad_scaler",
        "params": {
            "device": device, "init_scale": init_scale, "growth_factor": 2.0, "backoff_factor": 0.5,
            "growth_interval": growth_interval, "steps": steps,
            "optimizer": {"type": "sgd", "lr": LR, "momentum": MOMENTUM, "dampening": 0.0, "weight_decay": 0.0,
                          "nesterov": False},
            "param_order": ["p1", "p2"],
            "loss": "step t: sum(p1 * G1[t]) + sum(p2 * G2[t]), G = g with params.inject applied",
            "inject": [{"step": s, "param": p, "index": i, "value": v} for s, p, i, v in inject],
            "loop": "zero_grad; scaler.scale(loss).backward(); scaler.step(opt); scaler.update()",
            "records": "per step t (0-based): scale_before = get_scale() before scale(); skipped = 1 if "
                       "optimizer.step() was not called (params and momentum untouched); scale_after = get_scale() after update(); growth_tracker "
                       "after update(); p1_after[t], p2_after[t] = params after the step",
        },
        "inputs": {"p1": enc(init["p1"]), "p2": enc(init["p2"]), "g1": enc(grads["p1"]), "g2": enc(grads["p2"])},
        "outputs": {
            "scale_before": enc(f32(rec["scale_before"])),
            "skipped": enc(i64(rec["skipped"])),
            "scale_after": enc(f32(rec["scale_after"])),
            "growth_tracker": enc(i64(rec["growth_tracker"])),
            "p1_after": enc(torch.stack(rec["p1_after"])),
            "p2_after": enc(torch.stack(rec["p2_after"])),
        },
        "grads": {},
    }


def main():
    if not torch_version_at_least(2, 3):
        sys.exit("make_grad_scaler_golden.py needs PyTorch >= 2.3 (torch.amp.GradScaler(device)); this is %s"
                 % torch.__version__)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "tests", "golden", "grad_scaler.json")
    cases = {name: run_case(name, *spec, device=device) for name, spec in CASES.items()}
    doc = {"generator": GENERATOR, "torch": torch.__version__, "device": device,
           "conventions": "outputs are per-step lists (first dim = step); grads are set by backward of "
                          "the scaled loss; see params.records and params.inject",
           "cases": cases}
    write_json(out, doc)
    for name, c in cases.items():
        sk = c["outputs"]["skipped"]["data"]
        print("%-32s steps %3d skipped %2d final scale %g" % (name, len(sk), sum(sk), c["outputs"]["scale_after"]["data"][-1]))
    print("wrote %s (device %s, torch %s)" % (out, device, torch.__version__))


if __name__ == "__main__":
    main()
