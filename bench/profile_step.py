#!/usr/bin/env python3
"""profile_step.py - where the U-Net AMP training step's GPU time goes, kernel by kernel, in halfgrad
and in PyTorch eager, side by side (issue 11, item 1). Run by bench/profile_step.sh on the GPU machine.

  profile_step.py torch OUT.json REFERENCE_DIR [B S]   torch.profiler over one step of the reference
                                                       U-Net (REFERENCE_DIR/torch_unet_step.py), AMP,
                                                       channels-last, after 5 warm-up steps
  profile_step.py ncu NCU.csv OUT.json                 halfgrad's kernels of one step, from
                                                       `ncu --csv --page raw --metrics gpu__time_duration.sum`
  profile_step.py report HALFGRAD.json TORCH.json      the table: per category, GPU ms and kernel
                                                       count of each, and the ratio

Each kernel's time is its duration on the GPU: ncu serialises and times each kernel alone (with the
clocks left alone, --clock-control none); torch.profiler reads CUPTI's activity records of a normal
run. The sums therefore leave out launch gaps and overlap; the step's wall time is printed beside them,
and the difference is the host's share (launch overhead, synchronisation).

Categories are read from kernel names. halfgrad's conv fprop and dgrad run the same kernel
(tc_igemm_kernel), so they share a category on both sides; wgrad is its own.
"""
import csv
import json
import re
import sys

# (category, regex over the kernel name, lower case). First match wins; the order matters.
CATEGORIES = [
    ("conv wgrad", r"wgrad"),
    # before conv: cuDNN's BatchNorm kernels are named cudnn::bn_...
    ("norm", r"batch_norm|norm|bn_|welford|apply_ncdhw|apply_ndhwc|finalize_(forward|backward)|partials"),
    # halfgrad's fprop and dgrad are one kernel (tc_igemm_kernel), so the two are one category on both sides.
    ("conv fprop + dgrad", r"fprop|dgrad|igemm|implicit_gemm|conv|xmma|cudnn|sm90_|sm80_"),
    ("gemm (other)", r"gemm|wmma"),
    ("pool", r"pool|max_pool"),
    ("softmax / loss", r"softmax|loss|cross_entropy|nll|one_hot|dice"),
    ("optimizer / scaler", r"adam|sgd|multi_tensor|unscale|nonfinite|amp_|scale_kernel|clip"),
    ("reduce", r"reduce|sum_splits|lane_sums|channel_total"),
    ("cast / copy / layout", r"convert|f16_to_f32|f32_to_f16|copy|transpose|cat_kernel|cat|pack_weights|permute|contiguous|fill"),
    ("elementwise", r"elementwise|binary|unary|relu|threshold|add|mul|broadcast|strided"),
]


def category(name):
    n = name.lower()
    for cat, rx in CATEGORIES:
        if re.search(rx, n):
            return cat
    return "other"


def summarise(kernels):
    """kernels: list of (name, microseconds). -> {category: [ms, count]}"""
    out = {}
    for name, us in kernels:
        c = category(name)
        ms, n = out.get(c, [0.0, 0])
        out[c] = [ms + us / 1000.0, n + 1]
    return out


def cmd_torch(out_path, ref_dir, B=16, S=64):
    sys.path.insert(0, ref_dir)
    import torch
    from torch.profiler import profile, ProfilerActivity
    import torch_unet_step as ref

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    m = ref.UNet3D().cuda().to(memory_format=torch.channels_last_3d)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(B, 1, S, S, S, device="cuda").to(memory_format=torch.channels_last_3d)
    y = torch.randint(0, 3, (B, S, S, S), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = ref.loss_fn(m(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = [(e.name, e.time_range.elapsed_us()) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("Memcpy")
               and not e.name.startswith("Memset")]
    ts = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); step(); b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    json.dump({"impl": "pytorch " + torch.__version__, "B": B, "S": S, "step_ms": ts[len(ts) // 2],
               "kernels": kernels}, open(out_path, "w"), indent=0)
    print(f"torch: {len(kernels)} kernels, {sum(k[1] for k in kernels) / 1000:.2f} ms of kernel time, "
          f"step {ts[len(ts) // 2]:.2f} ms")


def cmd_ncu(csv_path, out_path, step_json=None):
    rows = list(csv.reader(open(csv_path, newline="")))
    # ncu prints "==PROF==" lines before the CSV; the header is the first row with "Kernel Name".
    start = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    header = rows[start]
    name_i, time_i = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    units = rows[start + 1][time_i] if len(rows) > start + 1 else ""
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(units, None)
    body = rows[start + (2 if scale is not None else 1):]
    if scale is None:
        scale = 1e-3  # --print-units base: nanoseconds
    kernels = []
    for r in body:
        if len(r) <= max(name_i, time_i) or not r[time_i]:
            continue
        kernels.append((r[name_i], float(r[time_i].replace(",", "")) * scale))
    res = {"impl": "halfgrad", "kernels": kernels}
    if step_json:
        res.update(json.load(open(step_json)))
    json.dump(res, open(out_path, "w"), indent=0)
    print(f"halfgrad: {len(kernels)} kernels, {sum(k[1] for k in kernels) / 1000:.2f} ms of kernel time")


def cmd_report(hg_path, torch_path):
    hg, th = json.load(open(hg_path)), json.load(open(torch_path))
    a, b = summarise(hg["kernels"]), summarise(th["kernels"])
    cats = sorted(set(a) | set(b), key=lambda c: -(a.get(c, [0])[0] + b.get(c, [0])[0]))
    print(f"U-Net AMP step, channels-last, batch {th['B']} at {th['S']}^3: GPU time per kernel category")
    print(f"{'category':24s} {'halfgrad ms':>12s} {'kernels':>8s} {'PyTorch ms':>11s} {'kernels':>8s} {'ratio':>7s}")
    ta = tb = 0.0
    for c in cats:
        (ma, na), (mb, nb) = a.get(c, [0.0, 0]), b.get(c, [0.0, 0])
        ta += ma
        tb += mb
        ratio = f"{ma / mb:7.2f}" if mb > 0 else "      -"
        print(f"{c:24s} {ma:12.2f} {na:8d} {mb:11.2f} {nb:8d} {ratio}")
    print(f"{'sum of kernel times':24s} {ta:12.2f} {len(hg['kernels']):8d} {tb:11.2f} {len(th['kernels']):8d} {ta / tb:7.2f}")
    if "median_ms" in hg:
        print(f"{'step wall time':24s} {hg['median_ms']:12.2f} {'':8s} {th['step_ms']:11.2f} {'':8s} {hg['median_ms'] / th['step_ms']:7.2f}")
    for who, res in (("halfgrad", hg), ("PyTorch", th)):
        agg = {}
        for n, us in res["kernels"]:
            short = re.sub(r"\(.*", "", n)[:90]
            agg.setdefault(short, [0.0, 0])
            agg[short][0] += us / 1000
            agg[short][1] += 1
        print(f"\n{who}'s 12 largest kernels (summed by name):")
        for n, (ms, k) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:12]:
            print(f"  {ms:8.2f} ms  {k:4d}x  {n}")

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "torch":
        cmd_torch(sys.argv[2], sys.argv[3], *(int(v) for v in sys.argv[4:6]))
    elif sys.argv[1] == "ncu":
        cmd_ncu(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    elif sys.argv[1] == "report":
        cmd_report(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
