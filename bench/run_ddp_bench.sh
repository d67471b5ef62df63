#!/usr/bin/env bash
# run_ddp_bench.sh N - data-parallel scaling of halfgrad-unet3d train --gpus N beside PyTorch DDP
# (bench/torch_ddp_step.py under torchrun), in one call on a machine with N GPUs (issue 13).
#
# For each per-GPU batch B in $BATCHES (default "8 16") and each world size in {1, N}:
#   halfgrad  halfgrad-unet3d train --config reference --amp --device cuda --gpus W --batch B*W on the
#             hippocampus data ($HIPPO, default ../shared/data/hippocampus): $EPOCHS epochs (default 8),
#             validation and checkpoints only after the last. images/s per GPU = steps per epoch * B /
#             the median epoch time of epochs 2..EPOCHS-1 (the first warms up, the last validates).
#             This is the whole training loop: loader, step, the gradient all-reduce, the agreement.
#   pytorch   torchrun --nproc_per_node W bench/torch_ddp_step.py --batches B: the same U-Net, loss,
#             optimizer and AMP on random 48x64x48 volumes already on the GPU; images/s per GPU = B /
#             the median step. The step and its all-reduce only: no loader.
# Scaling efficiency = images/s per GPU at N / the same at 1, per framework (so the two loops'
# different scopes cancel out of the ratio, not out of the absolute figures).
#
#   bash bench/run_ddp_bench.sh N        (from the repository root; BUILD=build, OUT=ddp-results,
#                                         PYTHON=python3 with torch and torchrun, HALFGRAD_REFERENCE=
#                                         the folder of torch_unet_step.py)
# Note: the hippocampus training set is 160 volumes, so at N = 8 and B = 16 an epoch is one step;
# raise nothing here, read the PyTorch figure for the step itself.
set -uo pipefail
N=${1:?usage: run_ddp_bench.sh N (GPUs)}
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-$PWD/ddp-results}
HIPPO=${HIPPO:-$PWD/../shared/data/hippocampus}
PYTHON=${PYTHON:-python3}
EPOCHS=${EPOCHS:-8}
BATCHES=${BATCHES:-"8 16"}
export HALFGRAD_REFERENCE=${HALFGRAD_REFERENCE:-$PWD/../shared/reference}
mkdir -p "$OUT"
# halfgrad loads libnccl.so.2 at run time: LD_LIBRARY_PATH first, then PyTorch's wheel's copy.
nccl_dir=$($PYTHON -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nccl_dir
(( EPOCHS >= 3 )) || { echo "EPOCHS must be >= 3 (epochs 2..EPOCHS-1 are timed)"; exit 2; }
[ -f "$HIPPO/dataset.json" ] || { echo "no hippocampus data at $HIPPO (set HIPPO)"; exit 2; }

worlds=(1)
(( N > 1 )) && worlds+=("$N")
for B in $BATCHES; do
  for W in "${worlds[@]}"; do
    echo "== halfgrad --gpus $W, batch $B per GPU"
    "$BUILD/examples/halfgrad-unet3d" train --data "$HIPPO" --config reference --amp --device cuda --gpus "$W" \
      --batch $((B * W)) --epochs "$EPOCHS" --val-every 1000000 --save-every 1000000 --no-progress \
      --out "$OUT/halfgrad_w${W}_b${B}" --overwrite > "$OUT/halfgrad_w${W}_b${B}.log" 2>&1
    echo "rc $?; $(grep -c '^epoch ' "$OUT/halfgrad_w${W}_b${B}.log") epoch lines"
    echo "== pytorch torchrun --nproc_per_node $W, batch $B per GPU"
    $PYTHON -m torch.distributed.run --standalone --nproc_per_node "$W" bench/torch_ddp_step.py --batches "$B" \
      --out "$OUT/pytorch_w${W}_b${B}.json" > "$OUT/pytorch_w${W}_b${B}.log" 2>&1
    echo "rc $?"
  done
done

$PYTHON - "$OUT" "$N" "$BATCHES" <<'EOF'
import json, os, re, sys
out, n, batches = sys.argv[1], int(sys.argv[2]), [int(b) for b in sys.argv[3].split()]
worlds = [1] + ([n] if n > 1 else [])

def halfgrad(w, b):
    log = open(os.path.join(out, f'halfgrad_w{w}_b{b}.log')).read()
    # "model: ... batch 64 (8 on each of 8 GPUs ...)" and "epoch 3/8  loss ... 4.2 s"
    epochs = [(int(m.group(1)), int(m.group(2)), float(m.group(3)))
              for m in re.finditer(r'^epoch (\d+)/(\d+)\s.*\s([0-9.]+) s$', log, re.M)]
    m = re.search(r'^data: .*: (\d+) training', log, re.M)
    if not epochs or not m:
        return None
    steps = max(1, int(m.group(1)) // (b * w))
    timed = sorted(t for e, total, t in epochs if 1 < e < total)
    if not timed:
        return None
    return steps * b / timed[len(timed) // 2]

def pytorch(w, b):
    try:
        return json.load(open(os.path.join(out, f'pytorch_w{w}_b{b}.json')))[0]['images_per_s_per_gpu']
    except (OSError, ValueError, KeyError, IndexError):
        return None

rows = []
print(f"{'framework':10} {'GPUs':>4} {'batch/GPU':>9} {'images/s/GPU':>13} {'efficiency':>10}")
for fw, f in (('halfgrad', halfgrad), ('pytorch', pytorch)):
    for b in batches:
        base = f(1, b)
        for w in worlds:
            v = f(w, b)
            eff = v / base if v and base else None
            rows.append(dict(framework=fw, gpus=w, batch_per_gpu=b, images_per_s_per_gpu=v, efficiency=eff))
            print(f"{fw:10} {w:>4} {b:>9} {('%.1f' % v) if v else 'failed':>13} {('%.3f' % eff) if eff else '-':>10}")
json.dump(rows, open(os.path.join(out, 'ddp_scaling.json'), 'w'), indent=1)
EOF
