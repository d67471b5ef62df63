#!/usr/bin/env bash
# CTest halfgrad_unet3d_kill9: issue 9's crash safety. A `--save-every 1` run of the tiny recipe on
# the embedded default data is killed with kill -9 twenty times at pseudo-random moments (RANDOM
# seeded: the same moments each run, up to the machine's speed), each time restarted with
# `train --resume` (or afresh while no checkpoint exists, or after a run finished before its kill:
# on a fast machine that happens, and a finished run cannot be resumed). After every kill:
#   - model.safetensors, if present, must load and evaluate (halfgrad-unet3d eval);
#   - the next --resume must load training_state.safetensors (its log holds no error).
# Finally the run is resumed to its end, and its model.safetensors must be byte-identical to that of
# a run that was never killed: the kills cost time, never a bit.
#   kill9_test.sh BINARY
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(train --config tiny --epochs 40 --save-every 1 --seed 11 --no-progress)
run=$tmp/run
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
RANDOM=9  # fixed kill moments
finished=0
for i in $(seq 1 20); do
  if (( finished )); then rm -rf "$run"; finished=0; fi  # the kill came too late: start a new run
  if [[ -f $run/training_state.safetensors ]]; then cmd=(train --resume "$run" --no-progress)
  else cmd=("${args[@]}" --out "$run" --overwrite); fi
  "$bin" "${cmd[@]}" > "$tmp/log$i" 2>&1 &
  pid=$!
  # 0 to 4 s: during the start, the data load, a training step, validation or a checkpoint write.
  sleep "$((RANDOM % 4)).$((RANDOM % 10))"
  kill -9 "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  grep -q "^done in" "$tmp/log$i" && finished=1
  # Killed after the last epoch's checkpoint but before "done in": the resume finds the run finished.
  if grep -q "is finished; pass --epochs" "$tmp/log$i"; then finished=1
  elif grep -q "error:" "$tmp/log$i"; then fail "kill $i: the run before the kill failed: $(grep error: "$tmp/log$i")"; fi
  epoch=$(grep -oE "^epoch [0-9]+" "$tmp/log$i" | tail -1)
  if [[ -f $run/model.safetensors ]]; then
    if "$bin" eval --checkpoint "$run/model.safetensors" > "$tmp/eval$i" 2>&1; then
      echo "kill $i: ${epoch:-no epoch finished}; model.safetensors evaluates: $(tail -1 "$tmp/eval$i" | cut -c1-60)"
    else fail "kill $i: model.safetensors does not load: $(tail -3 "$tmp/eval$i")"; fi
  else
    echo "kill $i: ${epoch:-no epoch finished}; no checkpoint yet"
  fi
done
ls "$run"
# To the end, then against a run that never stopped.
if [[ -f $run/training_state.safetensors ]]; then "$bin" train --resume "$run" --no-progress > "$tmp/last" 2>&1
else "$bin" "${args[@]}" --out "$run" --overwrite > "$tmp/last" 2>&1; fi
if [[ $? != 0 ]] && ! grep -q "is finished" "$tmp/last"; then fail "the final resume failed: $(tail -3 "$tmp/last")"; fi
"$bin" "${args[@]}" --out "$tmp/straight" > "$tmp/straight.log" 2>&1 || fail "the straight run failed"
if cmp -s "$run/model.safetensors" "$tmp/straight/model.safetensors"; then echo "ok: after 20 kills, model.safetensors = the never-killed run's"
else fail "after 20 kills model.safetensors differs from the never-killed run's"; fi
echo "kill9_test: $failures failure(s)"
[[ $failures == 0 ]]
