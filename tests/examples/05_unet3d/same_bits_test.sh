#!/usr/bin/env bash
# CTest halfgrad_unet3d_same_bits: issue 8's "same seed, same bits" at the level of the program. One
# epoch of the CPU recipe with AMP on the hippocampus data, run four ways that must not change a bit:
#   a  plain, 2 threads          b  CPU cache off (HALFGRAD_CPU_CACHE_MB=0) + --precision-report
#   c  1 thread                  d  poison 0xFF (HALFGRAD_CPU_POISON) + --detect-anomaly + --grad-stats
# model.safetensors must be byte-identical and metrics.csv identical less its two time columns;
# training_state.safetensors too between a and c (b and d store their instruments' options in it).
# Skipped, by name, where ../shared/data/hippocampus is absent.
#   same_bits_test.sh BINARY SHARED_DIR
set -uo pipefail
bin=$1 data=$2/data/hippocampus
if [[ ! -f $data/dataset.json ]]; then
  echo "skipped: halfgrad_unet3d_same_bits: $data not found"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(train --data "$data" --config cpu --amp --epochs 1 --seed 5 --no-progress)
run() {  # run NAME ENV... -- EXTRA_ARGS...
  local name=$1 envs=()
  shift
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  if ! env "${envs[@]}" "$bin" "${args[@]}" --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1; then
    echo "FAIL: run $name exited non-zero:"; tail -20 "$tmp/$name.log"; exit 1
  fi
  grep -E "^epoch 1/" "$tmp/$name.log" | sed "s/^/$name: /"
}
run a OMP_NUM_THREADS=2 --
run b OMP_NUM_THREADS=2 HALFGRAD_CPU_CACHE_MB=0 -- --precision-report
run c OMP_NUM_THREADS=1 --
run d OMP_NUM_THREADS=2 HALFGRAD_CPU_POISON=255 -- --detect-anomaly --grad-stats "$tmp/grad_stats.csv"
failures=0
no_times() { rev "$1" | cut -d, -f3- | rev; }
for r in a b c d; do
  for f in model.safetensors metrics.csv; do
    [[ -s $tmp/$r/$f ]] || { echo "FAIL: run $r wrote no $f"; exit 1; }
  done
done
for r in b c d; do
  if cmp -s "$tmp/a/model.safetensors" "$tmp/$r/model.safetensors"; then echo "ok: model.safetensors of $r = a"
  else echo "FAIL: model.safetensors of $r differs from a: $(cmp "$tmp/a/model.safetensors" "$tmp/$r/model.safetensors")"; failures=$((failures + 1)); fi
  if [[ "$(no_times "$tmp/a/metrics.csv")" == "$(no_times "$tmp/$r/metrics.csv")" ]]; then echo "ok: metrics.csv of $r = a (less times)"
  else echo "FAIL: metrics.csv of $r differs from a:"; diff "$tmp/a/metrics.csv" "$tmp/$r/metrics.csv"; failures=$((failures + 1)); fi
done
if cmp -s "$tmp/a/training_state.safetensors" "$tmp/c/training_state.safetensors"; then echo "ok: training_state.safetensors of c = a"
else echo "FAIL: training_state.safetensors of c differs from a: $(cmp "$tmp/a/training_state.safetensors" "$tmp/c/training_state.safetensors")"; failures=$((failures + 1)); fi
echo "same_bits_test: $failures failure(s)"
[[ $failures == 0 ]]
