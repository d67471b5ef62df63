#!/usr/bin/env bash
# CTest halfgrad_unet3d_bf16: `train --amp --amp-dtype bf16` on the tiny recipe (CPU, embedded default
# data). The run must train (finite losses, weights that move, no skipped step), say in its log that
# the GradScaler is off, record bf16 in model.safetensors' metadata and in the training state, so
# that --resume continues it bit for bit (1 + resume = 2 straight) and eval reads it; --amp-dtype bf16
# without autocast (O0, O2) is refused.
#   bf16_test.sh BINARY
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(train --config tiny --amp --amp-dtype bf16 --epochs 2 --seed 5 --no-progress)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() {  # run LOG ARGS...
  local log=$1
  shift
  if ! "$bin" "$@" > "$log" 2>&1; then echo "FAIL: halfgrad-unet3d $* exited non-zero:"; tail -20 "$log"; exit 1; fi
}
run "$tmp/straight.log" "${args[@]}" --out "$tmp/straight"
grep -E "^(amp|epoch)" "$tmp/straight.log"
grep -q "^amp: autocast lowers to bfloat16; GradScaler disabled" "$tmp/straight.log" ||
  fail "the log does not say that bf16 disables the GradScaler"
# metrics.csv: epoch,train_loss,skipped_steps,nonfinite_steps,loss_scale,...: finite losses, nothing
# skipped, loss scale 1 (the disabled scaler's).
awk -F, 'NR > 1 { if ($2 != $2 + 0 || $2 == "nan" || $2 == "inf" || $3 != 0 || $4 != 0 || $5 != 1) bad = 1 }
         END { exit bad }' "$tmp/straight/metrics.csv" || fail "metrics.csv has a non-finite loss, a skipped step or a scale: $(cat "$tmp/straight/metrics.csv")"
[[ $(wc -l < "$tmp/straight/metrics.csv") == 3 ]] || fail "metrics.csv does not hold a header and 2 rows"
# The header is read into a file first: `head | grep -q` fails under pipefail whenever grep exits
# on its match before head has written all it read (head dies of SIGPIPE, 141).
head -c 65536 "$tmp/straight/model.safetensors" > "$tmp/header"
grep -aq '\\"amp_dtype\\":\\"bf16\\"' "$tmp/header" ||
  fail "model.safetensors' metadata does not record amp_dtype bf16"

# The weights moved: a second run with 1 epoch gives different bytes than 2 epochs.
run "$tmp/split1.log" "${args[@]}" --out "$tmp/split" --stop-after-epoch 1
if cmp -s "$tmp/straight/model.safetensors" "$tmp/split/model.safetensors"; then fail "epoch 2 changed no weight"; fi
run "$tmp/split2.log" train --resume "$tmp/split" --no-progress
grep -q "^amp: autocast lowers to bfloat16" "$tmp/split2.log" || fail "--resume did not keep --amp-dtype bf16"
if cmp -s "$tmp/straight/model.safetensors" "$tmp/split/model.safetensors"; then echo "ok: bf16 run, 1 + resume = 2 straight"
else fail "model.safetensors differs after resume: $(cmp "$tmp/straight/model.safetensors" "$tmp/split/model.safetensors")"; fi
"$bin" eval --checkpoint "$tmp/straight" > "$tmp/eval.log" 2>&1 || fail "eval of the bf16 run failed: $(cat "$tmp/eval.log")"
grep -q '"mean_dice"' "$tmp/eval.log" || fail "eval printed no Dice: $(cat "$tmp/eval.log")"

for level in "" "--opt-level O2"; do
  # shellcheck disable=SC2086
  out=$("$bin" train --config tiny --amp-dtype bf16 $level --epochs 1 --out "$tmp/refused" --no-progress 2>&1)
  [[ $? != 0 && $out == *"--amp-dtype bf16 chooses autocast's lower dtype, so it needs --amp"* ]] ||
    fail "--amp-dtype bf16 ${level:-without --amp} was not refused: $out"
done
out=$("$bin" train --config tiny --amp --amp-dtype bf17 --out "$tmp/refused" 2>&1)
[[ $? != 0 && $out == *"--amp-dtype"* ]] || fail "--amp-dtype bf17 was not refused: $out"
echo "bf16_test: $failures failure(s)"
[[ $failures == 0 ]]
