#!/usr/bin/env python3
"""Per-layer ratios of halfgrad's conv3d CUDA benchmark to cuDNN (through PyTorch).

Usage: python3 bench/conv3d_compare.py HALFGRAD.json TORCH.json [--torch-batch 4]

HALFGRAD.json from `conv3d_cuda_bench OUT.json [BATCH]`, TORCH.json from
/work/shared/reference/torch_conv3d.py (batch 4, not recorded in its JSON). Rows are matched on
(S, ci, co, dtype, cl). The TFLOP/s ratio is meaningful at any batch; the ms ratio only when both
ran the same batch (it is printed with a '*' otherwise). ratio > 1 means halfgrad is slower (ms) or
faster (TFLOP/s column reads halfgrad / torch).
"""
import json
import sys


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    torch_batch = 4
    if "--torch-batch" in argv:
        torch_batch = int(argv[argv.index("--torch-batch") + 1])
        args = [a for a in args if a != str(torch_batch)]
    if len(args) != 2:
        print(__doc__)
        return 2
    ours = json.load(open(args[0]))
    ref = {(r["S"], r["ci"], r["co"], r["dtype"], r["cl"]): r for r in json.load(open(args[1]))}
    print(f"{'S':>3} {'ci':>4} {'co':>4} {'dtype':>14} {'cl':>5} | {'halfgrad ms':>11} {'torch ms':>9} {'ms ratio':>9} | "
          f"{'hg TF/s':>8} {'torch TF/s':>10} {'TF/s hg/torch':>13}")
    for r in ours:
        key = (r["S"], r["ci"], r["co"], r["dtype"], r["cl"])
        t = ref.get(key)
        if t is None:
            print(f"{r['S']:>3} {r['ci']:>4} {r['co']:>4} {r['dtype']:>14} {str(r['cl']):>5} | {r['ms_fwd_bwd']:>11.3f}  (no torch row)")
            continue
        same_batch = r.get("B", torch_batch) == torch_batch
        mark = "" if same_batch else "*"
        print(f"{r['S']:>3} {r['ci']:>4} {r['co']:>4} {r['dtype']:>14} {str(r['cl']):>5} | {r['ms_fwd_bwd']:>11.3f} "
              f"{t['ms_fwd_bwd']:>9.3f} {r['ms_fwd_bwd'] / t['ms_fwd_bwd']:>8.2f}{mark:1} | {r['tflops']:>8.1f} "
              f"{t['tflops']:>10.1f} {r['tflops'] / max(t['tflops'], 1e-9):>13.2f}")
    if any(r.get("B", torch_batch) != torch_batch for r in ours):
        print(f"* halfgrad ran batch {ours[0].get('B')}, torch batch {torch_batch}: compare the TF/s columns")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
