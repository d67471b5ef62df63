#!/usr/bin/env bash
# CPU benchmark: one U-Net training step, halfgrad against PyTorch CPU (Debian's python3-torch) in
# the same run, same width, batch, volume and thread count. Prints both JSON lines and the ratio.
#   bench/run_cpu_bench.sh [--width 8 --batch 4 --shape 32 48 32 --threads 2]
set -euo pipefail
cd "$(dirname "$0")/.."
width=8; batch=4; shape="32 48 32"; threads=2; steps=5
while [ $# -gt 0 ]; do case "$1" in
  --width) width=$2; shift 2;; --batch) batch=$2; shift 2;; --threads) threads=$2; shift 2;;
  --steps) steps=$2; shift 2;; --shape) shape="$2 $3 $4"; shift 4;; *) echo "unknown $1"; exit 2;; esac; done
[ -x build/bench/unet_step_cpu ] || bash tools/build.sh
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "PyTorch reference needs Debian's python3-torch: apt-get install python3-torch"; exit 1; fi
export OMP_NUM_THREADS=$threads
hg=$(build/bench/unet_step_cpu --width $width --batch $batch --shape $shape --steps $steps)
hga=$(build/bench/unet_step_cpu --width $width --batch $batch --shape $shape --steps $steps --amp)
pt=$(/usr/bin/python3 bench/torch_unet_step_cpu.py --width $width --batch $batch --shape $shape --steps $steps --threads $threads)
echo "$hg"; echo "$hga"; echo "$pt"
/usr/bin/python3 - "$hg" "$hga" "$pt" <<'PY'
import json, sys
hg, hga, pt = (json.loads(a) for a in sys.argv[1:])
print(f"step time: halfgrad FP32 {hg['median_s']:.3f} s, halfgrad AMP (emulated FP16) {hga['median_s']:.3f} s, "
      f"PyTorch {pt['version']} FP32 {pt['median_s']:.3f} s")
print(f"ratio halfgrad FP32 / PyTorch FP32 = {hg['median_s'] / pt['median_s']:.2f} (below 1: halfgrad faster)")
PY
