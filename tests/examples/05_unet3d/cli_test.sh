#!/usr/bin/env bash
# CTest halfgrad_unet3d_cli: the built halfgrad-unet3d run with bad arguments; each case checks the
# exit status (2 for a bad command line, 1 for a refused run) and that stderr says what is wrong.
#   cli_test.sh BINARY SOURCE_DIR SHARED_DIR
set -uo pipefail
bin=$1 src=$2 shared=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect STATUS TEXT... -- ARGS...: runs the program, checks its status and that its output holds
# every TEXT.
expect() {
  local want=$1 texts=() t
  shift
  while [[ $1 != -- ]]; do texts+=("$1"); shift; done
  shift
  local out status ok=1
  out=$("$bin" "$@" 2>&1)
  status=$?
  [[ $status == "$want" ]] || ok=0
  for t in "${texts[@]}"; do [[ $out == *"$t"* ]] || ok=0; done
  if [[ $ok == 0 ]]; then
    echo "FAIL: halfgrad-unet3d $* -> status $status (expected $want), output:"
    echo "$out" | head -20
    printf '  expected it to contain: %s\n' "${texts[@]}"
    failures=$((failures + 1))
  else
    echo "ok: halfgrad-unet3d $* -> $status"
  fi
}

expect 2 "--epochs: '0x10' is not a decimal integer" -- train --out "$tmp/a" --epochs 0x10
expect 2 "--epochs: '99999999999999999999' is out of range; expected a decimal integer in [1, 1000000]" \
  -- train --out "$tmp/a" --epochs 99999999999999999999
expect 2 "--seed" -- train --out "$tmp/a" --seed -1
expect 2 "--lr: 'nan' is not finite; expected a finite number > 0" -- train --out "$tmp/a" --lr nan
# plan (plan.h): its required options and bounds; train --plan needs --data.
expect 2 "--data is required" -- plan --output "$tmp/p.json"
expect 2 "--memory-gib: '0' is out of range" -- plan --data "$tmp" --output "$tmp/p.json" --memory-gib 0
expect 2 "--plan needs --data" -- train --out "$tmp/a" --plan auto
expect 1 "plan /nonexistent.json: cannot open" -- train --out "$tmp/a" --data /nonexistent --plan /nonexistent.json
mkdir -p "$tmp/plandir" && mkfifo "$tmp/plan.fifo"
expect 1 "plan $tmp/plandir: is a directory, not a regular file" -- train --out "$tmp/a" --data "$tmp" --plan "$tmp/plandir"
expect 1 "plan $tmp/plan.fifo: is a FIFO, not a regular file" -- train --out "$tmp/a" --data "$tmp" --plan "$tmp/plan.fifo"
expect 1 "--output $tmp/plandir is a directory" -- plan --data "$tmp" --output "$tmp/plandir" --overwrite
expect 1 "--output $tmp/nofolder/p.json: its folder $tmp/nofolder does not exist" \
  -- plan --data "$tmp" --output "$tmp/nofolder/p.json"
expect 2 "--nsd-tolerance: '-1' is out of range; expected a finite number in [0, 1000]" -- eval --checkpoint "$tmp/a" --nsd-tolerance -1
expect 0 "--nsd-tolerance" "normalised surface Dice" -- eval --help
expect 2 "--memory-format ndhwc asks for channels-last activations, but with --device cpu" \
  -- train --out "$tmp/a" --memory-format ndhwc
expect 0 "--overwrite" "--no-memory-check" "INT:decimal in [1, 1000000]" -- train --help
expect 2 "--augment-device cuda needs --device cuda" -- train --out "$tmp/a" --augment nnunet --augment-device cuda
expect 0 "--augment-device" "CUDA kernels" -- train --help

# --resume takes the run's own options: others are refused by name; --out with it is an error.
expect 2 "--lr, --seed cannot be given with --resume" -- train --resume "$tmp/a" --lr 0.1 --seed 3
expect 2 "--resume RUN_DIR continues the run in RUN_DIR; drop --out" -- train --resume "$tmp/a" --out "$tmp/b"
expect 2 "--out RUN_DIR is required (or --resume RUN_DIR)" -- train --epochs 2
expect 1 "training_state.safetensors: cannot open" -- train --resume "$tmp/nothing_here"

# A folder holding a run is refused before any data is loaded, and left as it was.
mkdir -p "$tmp/run"
echo "an earlier checkpoint" > "$tmp/run/model.safetensors"
printf 'epoch,train_loss\n1,0.5\n' > "$tmp/run/metrics.csv"
expect 1 "already holds a run: model.safetensors (unreadable, 22 B), metrics.csv (1 epoch rows); refusing to overwrite it. Pass --overwrite" \
  -- train --out "$tmp/run" --data /nonexistent
if [[ $(cat "$tmp/run/model.safetensors") != "an earlier checkpoint" ]]; then
  echo "FAIL: the refused run folder was changed"; failures=$((failures + 1))
fi

# The memory check: --batch 100000 is refused from the shapes, before the run folder is made.
if [[ -f $shared/data/hippocampus/dataset.json ]]; then
  expect 1 "error: halfgrad-unet3d train: this run needs about" "training step of batch 100000 at 32x48x32" \
    "but the CPU has" "lower --batch (now 100000), or pass --no-memory-check" \
    -- train --data "$shared/data/hippocampus" --out "$tmp/big" --batch 100000 --no-progress
  if [[ -e $tmp/big ]]; then echo "FAIL: a refused run created its folder"; failures=$((failures + 1)); fi
else
  echo "skipped: the --batch 100000 memory check (no $shared/data/hippocampus)"
fi

# Issue 30, row 11: the precision words are a bad command line (exit 2), as bad numbers are.
expect 2 "--opt-level: unknown opt level 'O9'" -- train --out "$tmp/p" --opt-level O9
expect 2 "--amp means --opt-level O1, but --opt-level O2 was given too" -- train --out "$tmp/p" --amp --opt-level O2
expect 2 "--amp-dtype bf16 chooses autocast's lower dtype, so it needs --amp" -- train --out "$tmp/p" --amp-dtype bf16
expect 2 "--fp32-op bogus" -- train --out "$tmp/p" --amp --fp32-op bogus
expect 2 "--overlap: '1' is out of range; expected a finite number in [0, 0.9]" \
  -- predict --checkpoint c --input i --output o --overlap 1
expect 2 "--allow-data-change is for --resume" -- train --out "$tmp/p" --allow-data-change
if [[ -e $tmp/p ]]; then echo "FAIL: a refused command line created its folder"; failures=$((failures + 1)); fi

# Row 9: a FIFO where a checkpoint, a training state or a volume should be is refused at once,
# never waited on (each command runs under a 20 s timeout: a hang fails the case with status 124).
expect_soon() { timeout 20 "$bin" "$@"; }
mkfifo "$tmp/fifo.safetensors" "$tmp/x.nii.gz"
mkdir -p "$tmp/fiforun" && mkfifo "$tmp/fiforun/training_state.safetensors"
fifo_case() {  # fifo_case TEXT -- ARGS...
  local text=$1 out status
  shift 2
  out=$(timeout 20 "$bin" "$@" 2>&1)
  status=$?
  if [[ $status == 1 && $out == *"$text"* ]]; then echo "ok: halfgrad-unet3d $* -> 1 (no hang)"
  else echo "FAIL: halfgrad-unet3d $* -> status $status (124: it hung), output: $out"; failures=$((failures + 1)); fi
}
fifo_case "fifo.safetensors: is a FIFO, not a regular file" -- eval --checkpoint "$tmp/fifo.safetensors"
fifo_case "training_state.safetensors: is a FIFO, not a regular file" -- train --resume "$tmp/fiforun"

# Row 5: two processes training into one folder: the second is refused at start, naming the first.
if [[ -f /usr/share/mricron/templates/ch2.nii.gz ]]; then
  "$bin" train --config tiny --epochs 1000 --out "$tmp/busy" --no-progress > "$tmp/busy.log" 2>&1 &
  first=$!
  for _ in $(seq 1 200); do [[ $(cat "$tmp/busy/.halfgrad.lock" 2>/dev/null) == "$first" ]] && break; sleep 0.1; done
  expect 1 "$tmp/busy is in use by process $first" -- train --config tiny --out "$tmp/busy" --overwrite --no-progress
  kill "$first" 2>/dev/null; wait "$first" 2>/dev/null
  # A FIFO named like a volume, given to predict with a real checkpoint.
  "$bin" train --config tiny --epochs 1 --out "$tmp/tiny" --no-progress > "$tmp/tiny.log" 2>&1 || cat "$tmp/tiny.log"
  fifo_case "x.nii.gz: is a FIFO, not a regular file" -- predict --checkpoint "$tmp/tiny" --input "$tmp/x.nii.gz" --output "$tmp/o.nii.gz"
else
  echo "skipped: two trains into one run folder, a FIFO volume given to predict (mricron-data not installed)"
fi

# Row 11: a run folder that cannot be written is found at start, not at the first checkpoint.
if [[ $(id -u) != 0 ]]; then
  mkdir -p "$tmp/ro" && chmod 555 "$tmp/ro"
  expect 1 "cannot write into the run folder $tmp/ro" -- train --config tiny --out "$tmp/ro" --data /nonexistent
  expect 1 "cannot create the run folder in $tmp/ro" -- train --config tiny --out "$tmp/ro/run" --data /nonexistent
  chmod 755 "$tmp/ro"
else
  echo "skipped: a read-only --out (root writes anywhere)"
fi

# tools/train_default.sh: the user's --out / --config win; its own folder gets --overwrite.
check_default() {
  local want=$1
  shift
  local got
  got=$(TRAIN_DEFAULT_PRINT=1 bash "$src/tools/train_default.sh" "$@")
  if [[ $got != "$want" ]]; then
    echo "FAIL: train_default.sh $* -> '$got', expected '$want'"; failures=$((failures + 1))
  else
    echo "ok: train_default.sh $* -> $got"
  fi
}
check_default "build/examples/halfgrad-unet3d train --config cpu --out runs/default --overwrite --amp" --amp
check_default "build/examples/halfgrad-unet3d train --config cpu --out mine" --out mine
check_default "build/examples/halfgrad-unet3d train --out runs/default --overwrite --config=reference" --config=reference

if [[ $failures != 0 ]]; then
  echo "$failures case(s) failed"
  exit 1
fi
echo "all cases passed"
