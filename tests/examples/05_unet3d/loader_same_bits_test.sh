#!/usr/bin/env bash
# CTest halfgrad_unet3d_loader_same_bits: the prefetching loader (loader.h) must not change a bit.
# One epoch of the CPU recipe with AMP on the hippocampus data with --workers 0, 1 and 3 (prefetch 2,
# 2, 4): model.safetensors must be byte-identical and metrics.csv identical less its two time columns.
# Also checks that each run printed its loader summary and wrote curves.gp.
# Skipped, by name, where ../shared/data/hippocampus is absent.
#   loader_same_bits_test.sh BINARY SHARED_DIR
set -uo pipefail
bin=$1 data=$2/data/hippocampus
if [[ ! -f $data/dataset.json ]]; then
  echo "skipped: halfgrad_unet3d_loader_same_bits: $data not found"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(train --data "$data" --config cpu --amp --epochs 1 --seed 9 --no-progress)
run() {  # run NAME EXTRA_ARGS...
  local name=$1
  shift
  if ! OMP_NUM_THREADS=2 "$bin" "${args[@]}" --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1; then
    echo "FAIL: run $name exited non-zero:"; tail -20 "$tmp/$name.log"; exit 1
  fi
  grep -E "^(epoch 1/|loader:)" "$tmp/$name.log" | sed "s/^/$name: /"
}
run w0 --workers 0
run w1 --workers 1
run w3 --workers 3 --prefetch 4
failures=0
no_times() { rev "$1" | cut -d, -f3- | rev; }
for r in w0 w1 w3; do
  for f in model.safetensors metrics.csv curves.gp; do
    [[ -s $tmp/$r/$f ]] || { echo "FAIL: run $r wrote no $f"; exit 1; }
  done
  grep -q "^loader: 40 batches" "$tmp/$r.log" || { echo "FAIL: run $r printed no 'loader: 40 batches' line"; failures=$((failures + 1)); }
done
for r in w1 w3; do
  if cmp -s "$tmp/w0/model.safetensors" "$tmp/$r/model.safetensors"; then echo "ok: model.safetensors of $r = w0"
  else echo "FAIL: model.safetensors of $r differs from w0: $(cmp "$tmp/w0/model.safetensors" "$tmp/$r/model.safetensors")"; failures=$((failures + 1)); fi
  if [[ "$(no_times "$tmp/w0/metrics.csv")" == "$(no_times "$tmp/$r/metrics.csv")" ]]; then echo "ok: metrics.csv of $r = w0 (less times)"
  else echo "FAIL: metrics.csv of $r differs from w0:"; diff "$tmp/w0/metrics.csv" "$tmp/$r/metrics.csv"; failures=$((failures + 1)); fi
done
echo "loader_same_bits_test: $failures failure(s)"
[[ $failures == 0 ]]
