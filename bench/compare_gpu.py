#!/usr/bin/env python3
"""Prints halfgrad / PyTorch ratios from the JSON files that bench/run_gpu_bench.sh writes in one run.

    python3 bench/compare_gpu.py DIR      (DIR holds torch_unet_step.json, unet_step_cuda.json,
                                           torch_conv3d.json, conv3d_cuda.json when present)
A ratio below 1 means halfgrad is faster (time) or smaller (memory). Plain python3, json only.
"""
import json, os, sys

d = sys.argv[1] if len(sys.argv) > 1 else '.'
def load(name):
    p = os.path.join(d, name)
    return json.load(open(p)) if os.path.exists(p) else None

tu, hu = load('torch_unet_step.json'), load('unet_step_cuda.json')
if tu and hu:
    print('U-Net training step (median ms, peak MiB); ratio = halfgrad / PyTorch')
    key = lambda r: (r['mode'], r['B'], r['S'], r['channels_last'])
    tmap = {key(r): r for r in tu}
    def torch_ref(r):
        # halfgrad's FP32 is compared with PyTorch FP32 (NCDHW, no TF32), AMP with AMP in the same layout.
        # (PyTorch's script has no channels-last run at batch 1: that one is compared with its NCDHW AMP.)
        k = key(r)
        if r['mode'] == 'fp32': k = ('fp32', r['B'], r['S'], False)
        return tmap.get(k) or tmap.get((k[0], k[1], k[2], False))
    own = {key(r): r for r in hu}
    for r in hu:
        t = torch_ref(r)
        line = f"  {r['mode']:4} B={r['B']:2} S={r['S']} {'NDHWC' if r['channels_last'] else 'NCDHW'}: " \
               f"halfgrad {r['median_ms']:8.2f} ms {r['peak_mem_MiB']:7.0f} MiB"
        if t:
            line += f" | PyTorch {t['median_ms']:8.2f} ms {t['peak_mem_MiB']:7.0f} MiB | time x{r['median_ms']/t['median_ms']:.2f}" \
                    f" mem x{r['peak_mem_MiB']/t['peak_mem_MiB']:.2f}"
        print(line)
    for B, S in ((16, 64), (4, 64), (1, 32)):
        a, f = own.get(('amp', B, S, True)), own.get(('fp32', B, S, True))
        if a and f:
            print(f"  B={B} S={S}: halfgrad AMP speed-up over own FP32 x{f['median_ms']/a['median_ms']:.2f}, "
                  f"AMP peak memory / own FP32 {a['peak_mem_MiB']/f['peak_mem_MiB']:.2f}")
    t = tmap.get(('amp', 16, 64, True)); a = own.get(('amp', 16, 64, True))
    if t and a:
        print(f"  done-bar: AMP B=16 64^3 NDHWC halfgrad / PyTorch AMP channels-last = {a['median_ms']/t['median_ms']:.2f} (<= 2.0)")

tc, hc = load('torch_conv3d.json'), load('conv3d_cuda.json')
if tc and hc:
    print('conv3d forward+backward per layer shape (ms); ratio = halfgrad / cuDNN')
    tmap = {(r['S'], r['ci'], r['co'], r['dtype'], r['cl']): r for r in tc}
    for r in hc:
        t = tmap.get((r['S'], r['ci'], r['co'], r['dtype'], r['cl']))
        line = f"  S={r['S']:2} {r['ci']:3}->{r['co']:3} {r['dtype']:13} {'NDHWC' if r['cl'] else 'NCDHW'}: halfgrad {r['ms_fwd_bwd']:8.3f} ms {r['tflops']:6.1f} TFLOP/s"
        if t:
            line += f" | cuDNN {t['ms_fwd_bwd']:8.3f} ms {t['tflops']:6.1f} TFLOP/s | x{r['ms_fwd_bwd']/t['ms_fwd_bwd']:.2f}"
        print(line)
