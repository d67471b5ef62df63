#!/usr/bin/env bash
# same_bytes.sh - does a refactor leave training's bytes as they were? Trains the same runs with two
# builds of halfgrad-unet3d (before and after) and compares the checkpoints byte for byte: the CPU
# (tiny recipe, eager), and on a GPU the reference recipe with AMP through the CUDA graph, eagerly
# (--no-cuda-graph), with BF16, and at O2. Prints one line per run and exits 1 if any differs.
#   tools/gpu/same_bytes.sh OLD_BINARY NEW_BINARY HIPPOCAMPUS_DIR WORK_DIR
set -uo pipefail
old=$1 new=$2 data=$3 work=$4
mkdir -p "$work"
runs=("cpu|--device cpu --config tiny --epochs 2")
if nvidia-smi -L > /dev/null 2>&1; then
  runs+=("cuda_graph_amp|--device cuda --amp --config reference --epochs 2"
         "cuda_eager_amp|--device cuda --amp --config reference --epochs 2 --no-cuda-graph"
         "cuda_graph_bf16|--device cuda --amp --amp-dtype bf16 --config reference --epochs 1"
         "cuda_eager_o2|--device cuda --opt-level O2 --config reference --epochs 1 --no-cuda-graph")
fi
rc=0
for r in "${runs[@]}"; do
  name=${r%%|*} args=${r#*|}
  for which in old new; do
    bin=$old; [ $which = new ] && bin=$new
    # shellcheck disable=SC2086
    "$bin" train $args --data "$data" --seed 5 --no-progress --out "$work/$name.$which" --overwrite \
      > "$work/$name.$which.log" 2>&1 || { echo "$name: the $which binary failed:"; tail -5 "$work/$name.$which.log"; rc=1; continue 2; }
  done
  same=yes
  for f in model.safetensors training_state.safetensors; do
    cmp -s "$work/$name.old/$f" "$work/$name.new/$f" || same=no
  done
  if [ $same = yes ]; then
    echo "$name: same bytes (model.safetensors, training_state.safetensors; $(grep -c '^epoch' "$work/$name.new.log") epochs)"
  else
    echo "$name: DIFFERENT bytes"; grep "^epoch" "$work/$name.old.log" "$work/$name.new.log" | tail -4; rc=1
  fi
done
exit $rc
