#!/usr/bin/env bash
# fuzz.sh - builds the libFuzzer harnesses of fuzz/ (clang, ASan + UBSan, CPU only, in a build
# folder of their own) and runs each for a bounded time on a working copy of its seed corpus
# (fuzz/corpus/<name>/). Exits non-zero when a harness finds a crash, a sanitizer report, a leak,
# an exception other than halfgrad::Error, a timeout or an out-of-memory input; the input is kept
# as <work>/<harness>/crash-* (or leak-*, timeout-*, oom-*) and its path printed. For each harness
# it prints the executions, coverage (cov: edges, ft: features) and corpus size of the run.
#
# Environment:
#   FUZZ_SECONDS   seconds per harness (default 60)
#   FUZZ_TARGETS   harnesses to run (default "nifti_fuzz msd_json_fuzz checkpoint_fuzz safetensors_fuzz")
#   FUZZ_BUILD     build folder (default build-fuzz)
#   FUZZ_WORK      growing corpora, logs and findings (default $FUZZ_BUILD/work)
#   FUZZ_JOBS      build parallelism (default 2)
#   FUZZ_NICE      nice level for the runs (default 0; 19 for long background runs)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"nifti_fuzz msd_json_fuzz checkpoint_fuzz safetensors_fuzz"}
build=${FUZZ_BUILD:-build-fuzz}
work=${FUZZ_WORK:-$build/work}
jobs=${FUZZ_JOBS:-2}
nice_level=${FUZZ_NICE:-0}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -DHALFGRAD_FUZZ=ON -DHALFGRAD_CUDA=OFF -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF "${launcher[@]}" >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" -j"$jobs" --target $targets

status=0
for t in $targets; do
  name=${t%_fuzz}
  dir="$work/$t"
  mkdir -p "$dir/corpus"
  log="$dir/run.log"
  echo "== $t: ${seconds} s on fuzz/corpus/$name (+ $dir/corpus)"
  rc=0
  # -rss_limit_mb: an input that makes the reader allocate more is a finding (the harnesses' own
  # limits keep a valid input far below it). -timeout: one input may take at most 30 s (generous:
  # CI shares its cores). -max_len: inputs up to 8 KiB (libFuzzer would stop at the largest seed).
  nice -n "$nice_level" "$build/$t" "$dir/corpus" "fuzz/corpus/$name" -max_total_time="$seconds" -max_len=8192 \
      -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 -artifact_prefix="$dir/" >"$log" 2>&1 || rc=$?
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(grep -E 'stat::number_of_executed_units' "$log" | awk '{print $2}' || true)
  echo "   last status: ${last:-none}"
  echo "   executions: ${execs:-?}; log: $log"
  if [ "$rc" -ne 0 ]; then
    status=1
    echo "   FAILED (exit $rc):"
    grep -E 'ERROR: |SUMMARY: |runtime error|Test unit written|terminate called|what\(\)' "$log" | head -20 | sed 's/^/   /' || true
  fi
done
exit $status
