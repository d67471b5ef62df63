#!/usr/bin/env bash
# CTest halfgrad_unet3d_resume: issue 9's `train --resume`. On the tiny recipe with AMP (O1: the
# GradScaler's state is part of what resumes) on the embedded default data:
#   straight  train --epochs 2
#   split     train --epochs 2 --stop-after-epoch 1, then train --resume (continues to epoch 2)
# must give the same model.safetensors and training_state.safetensors bytes (no times in either) and
# the same metrics.csv less its two time columns;
# then --resume of the finished run is refused, and --resume --epochs 3 trains one more epoch; and
# the same split with --augment nnunet, which --resume restores.
#   resume_test.sh BINARY
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(train --config tiny --amp --epochs 2 --seed 7 --no-progress)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() {  # run LOG ARGS...
  local log=$1
  shift
  if ! "$bin" "$@" > "$log" 2>&1; then echo "FAIL: halfgrad-unet3d $* exited non-zero:"; tail -20 "$log"; exit 1; fi
}
run "$tmp/straight.log" "${args[@]}" --out "$tmp/straight"
run "$tmp/split1.log" "${args[@]}" --out "$tmp/split" --stop-after-epoch 1
grep -q "stopping: --stop-after-epoch 1; continue with: halfgrad-unet3d train --resume" "$tmp/split1.log" ||
  fail "the stopped run did not say how to continue"
run "$tmp/split2.log" train --resume "$tmp/split" --no-progress
grep -E "^(resume|epoch|checkpoint)" "$tmp/split2.log"
no_times() { rev "$1" | cut -d, -f3- | rev; }
if cmp -s "$tmp/straight/model.safetensors" "$tmp/split/model.safetensors"; then echo "ok: model.safetensors of 1 + resume = 2 straight"
else fail "model.safetensors differs: $(cmp "$tmp/straight/model.safetensors" "$tmp/split/model.safetensors")"; fi
if cmp -s "$tmp/straight/training_state.safetensors" "$tmp/split/training_state.safetensors"; then echo "ok: training_state.safetensors of 1 + resume = 2 straight"
else fail "training_state.safetensors differs: $(cmp "$tmp/straight/training_state.safetensors" "$tmp/split/training_state.safetensors")"; fi
if [[ $(sed -n 2p "$tmp/split/metrics.csv" | rev | cut -d, -f1) == "" ]]; then fail "the resumed metrics.csv lost epoch 1's time"; fi
if [[ "$(no_times "$tmp/straight/metrics.csv")" == "$(no_times "$tmp/split/metrics.csv")" ]]; then echo "ok: metrics.csv rows equal (less times)"
else fail "metrics.csv differs:"; diff "$tmp/straight/metrics.csv" "$tmp/split/metrics.csv"; fi
[[ $(wc -l < "$tmp/split/metrics.csv") == 3 ]] || fail "metrics.csv of the resumed run does not hold a header and 2 rows"

out=$("$bin" train --resume "$tmp/split" --no-progress 2>&1)
[[ $? == 1 && $out == *"has trained 2 of 2 epochs and is finished; pass --epochs N with N > 2"* ]] ||
  fail "resuming a finished run was not refused: $out"
run "$tmp/split3.log" train --resume "$tmp/split" --epochs 3 --no-progress
grep -q "^epoch 3/3" "$tmp/split3.log" || fail "--resume --epochs 3 did not train epoch 3"
[[ $(wc -l < "$tmp/split/metrics.csv") == 4 ]] || fail "metrics.csv after --epochs 3 does not hold 3 rows"
"$bin" eval --checkpoint "$tmp/split" > "$tmp/eval.log" 2>&1 || fail "eval of the resumed run failed: $(cat "$tmp/eval.log")"

# --augment nnunet is one of the run's options: --resume restores it (the resumed run says so and ends
# with the straight run's bytes), and it changes the batches (the model differs from the plain run's).
run "$tmp/aug_straight.log" "${args[@]}" --augment nnunet --out "$tmp/aug_straight"
run "$tmp/aug_split1.log" "${args[@]}" --augment nnunet --out "$tmp/aug_split" --stop-after-epoch 1
run "$tmp/aug_split2.log" train --resume "$tmp/aug_split" --no-progress
grep -q "^augment: nnunet" "$tmp/aug_split2.log" || fail "the resumed run lost --augment nnunet"
if cmp -s "$tmp/aug_straight/model.safetensors" "$tmp/aug_split/model.safetensors"; then echo "ok: --augment nnunet, model.safetensors of 1 + resume = 2 straight"
else fail "--augment nnunet: model.safetensors differs after --resume"; fi
cmp -s "$tmp/aug_straight/model.safetensors" "$tmp/straight/model.safetensors" && fail "--augment nnunet trained the same bits as without"
out=$("$bin" train --resume "$tmp/aug_split" --augment none --no-progress 2>&1)
[[ $? != 0 && $out == *"--augment cannot be given with --resume"* ]] || fail "--augment with --resume was not refused: $out"
echo "resume_test: $failures failure(s)"
[[ $failures == 0 ]]
