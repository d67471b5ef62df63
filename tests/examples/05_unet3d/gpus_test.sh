#!/usr/bin/env bash
# CTest halfgrad_unet3d_gpus (CPU; issue 13): halfgrad-unet3d train --gpus N and the distributed
# environment, without needing a GPU.
#   - --gpus is refused with --device cpu (status 2, saying why), and out of range;
#   - --gpus under a launcher that set WORLD_SIZE, a rank with --device cpu, and half a torchrun
#     environment are refused (status 1) naming the variable;
#   - --gpus 2 --device cuda where the ranks cannot run (no GPU, or no second GPU, or no NCCL): the
#     launcher starts two ranks, each error is prefixed "[rank R]", the launcher exits 1 naming the
#     rank that failed, ends the others after its grace period, and leaves no rendezvous file.
# The sampler's split (N = 1 is the single-process batch) is tests/examples/05_unet3d/distributed_test.cpp.
#   gpus_test.sh BINARY
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect STATUS TEXT... -- ARGS...: as cli_test.sh (ENV=... may precede ARGS through `env`).
expect() {
  local want=$1 texts=() t
  shift
  while [[ $1 != -- ]]; do texts+=("$1"); shift; done
  shift
  local out status ok=1
  out=$("$@" 2>&1)
  status=$?
  [[ $status == "$want" ]] || ok=0
  for t in "${texts[@]}"; do [[ $out == *"$t"* ]] || ok=0; done
  if [[ $ok == 0 ]]; then
    echo "FAIL: $* -> status $status (expected $want), output:"
    echo "$out" | head -30
    printf '  expected it to contain: %s\n' "${texts[@]}"
    failures=$((failures + 1))
  else
    echo "ok: $* -> $status"
  fi
}

clean_env=(env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT -u HALFGRAD_RENDEZVOUS_FILE)

expect 2 "--gpus 2 runs one process per GPU (NCCL), but the device is --device cpu" "add --device cuda" \
  -- "${clean_env[@]}" "$bin" train --out "$tmp/a" --gpus 2
expect 2 "--gpus 2 runs one process per GPU" -- "${clean_env[@]}" "$bin" train --out "$tmp/a" --gpus 2 --device cpu
expect 2 "--gpus: '0' is out of range" -- "${clean_env[@]}" "$bin" train --out "$tmp/a" --gpus 0 --device cuda
expect 1 "--gpus 2: WORLD_SIZE=2 is set" "drop --gpus" \
  -- "${clean_env[@]}" WORLD_SIZE=2 RANK=0 "$bin" train --out "$tmp/a" --gpus 2 --device cuda
expect 1 "[rank 1] error:" "WORLD_SIZE=2 (a distributed launch) needs --device cuda" \
  -- "${clean_env[@]}" WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=localhost MASTER_PORT=29511 \
     "$bin" train --out "$tmp/a" --config tiny
expect 1 "WORLD_SIZE is set but RANK is not" -- "${clean_env[@]}" WORLD_SIZE=2 "$bin" train --out "$tmp/a" --device cuda
expect 1 "RANK='5'" "[0, 1]" \
  -- "${clean_env[@]}" WORLD_SIZE=2 RANK=5 LOCAL_RANK=0 "$bin" train --out "$tmp/a" --device cuda
if [[ -e $tmp/a ]]; then echo "FAIL: a refused run created its folder"; failures=$((failures + 1)); fi

# Two ranks that cannot train here: both start, both say who they are, the launcher names one.
start=$(date +%s)
expect 1 "[rank " "error: halfgrad-unet3d train --gpus 2: rank " \
  -- "${clean_env[@]}" HALFGRAD_LAUNCH_GRACE_SECONDS=3 HALFGRAD_RENDEZVOUS_TIMEOUT=20 CUDA_VISIBLE_DEVICES=0,99 \
     "$bin" train --out "$tmp/run" --gpus 2 --device cuda --config tiny --no-progress
elapsed=$(( $(date +%s) - start ))
if (( elapsed > 60 )); then echo "FAIL: the failed launch took ${elapsed} s"; failures=$((failures + 1)); fi
left=$(find "$tmp/run" -name '.rendezvous.*' 2>/dev/null | wc -l)
if [[ $left != 0 ]]; then echo "FAIL: the launcher left $left rendezvous file(s)"; failures=$((failures + 1)); fi
if [[ -e $tmp/run/model.safetensors ]]; then echo "FAIL: a failed launch wrote a checkpoint"; failures=$((failures + 1)); fi

if [[ $failures != 0 ]]; then
  echo "$failures case(s) failed"
  exit 1
fi
echo "all cases passed"
