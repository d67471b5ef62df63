#!/usr/bin/env bash
# sanitize_cases.sh - compute-sanitizer over the CUDA test cases one case at a time, JOBS cases at once,
# resumable across device calls. Under racecheck the whole CUDA suite runs far longer than one 10-minute
# call (on the H200, 2026-12-02, serially: 33 of 147 cases in 440 s; one UNet3d determinism case alone
# took longer than the rest of that call), and doctest's --first did not select a range there, so this
# script selects each case by its exact name (-tc, with doctest's separators escaped), runs JOBS
# sanitizer processes side by side (each its own CUDA context on the one GPU: 10 at once took the 147
# cases of the *cuda* files through 144 in 390 s), and stops starting cases before its time runs out,
# printing which cases the next call should run.
#   bash tools/gpu/sanitize_cases.sh TOOL FIRST BUDGET_S [FILTER]
# TOOL: memcheck, racecheck, initcheck or synccheck. FIRST: the 0-based index of the first case (in
# doctest's listing of the FILTER'ed cases, file order). BUDGET_S: seconds this call may use; a case is
# started only while more than PER_CASE_S (default 60) of them are left, and each runs under `timeout`
# of what is left. FILTER: doctest -sf; without it, the CUDA cases: every case of a file matching
# *cuda* and, after them, every other case with "cuda" in its name (doctest matches case-blind: the
# DDP, loader and graph-step cases of tests/dist and tests/examples). MATCH='regex' keeps the listed
# names grep -E matches. ONLY="3 17 40" runs just those indices (the resume line printed at the end
# names them). JOBS (default 6) cases run at once.
# A summary line per case, in index order, goes to $OUT/sanitize_TOOL.txt: index, rc, seconds, the
# sanitizer's summary, doctest's count, the name; the per-case logs to $OUT/sanitize_TOOL_logs.tgz.
# rc 124 is a case the budget cut short (not a verdict); rc 3 a name that selected no case (doctest
# passes an empty selection). Exits 1 when any finished case failed.
# Runs from the repository root with the build of tools/gpu/device_build.sh (build-gpu/).
set -uo pipefail
cd "$(dirname "$0")/../.."
tool=${1:?tool}; first=${2:?first index}; budget=${3:?budget seconds}; filter=${4:-}
per_case=${PER_CASE_S:-60}
jobs=${JOBS:-6}
T=${TESTS:-build-gpu/tests/halfgrad_tests}
[ -x "$T" ] || { echo "sanitize_cases.sh: $T is missing: run tools/gpu/device_build.sh first" >&2; exit 2; }
OUT=${OUT:-$PWD/gpu-results}
logs=$OUT/sanitize_$tool
mkdir -p "$logs"
export LD_LIBRARY_PATH=/tmp/halfgrad-nifti/lib:$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
export HIPPO=${HIPPO:-$PWD/.carry/data/hippocampus}

# doctest lists one case per line between its banner lines; without a GPU, CUDA_TEST_CASE also
# prints "skipped: <name>: ..." lines, which are not names.
list() {
  "$T" "$@" --list-test-cases --no-version=true 2>/dev/null | grep -v -E '^\[doctest\]|^=+$|^skipped: ' | sed '/^$/d'
}
if [ -n "$filter" ]; then
  mapfile -t names < <(list -sf="$filter" | grep -E "${MATCH:-.}")
else
  mapfile -t names < <({ list -sf='*cuda*'; list -tc='*cuda*'; } | awk '!seen[$0]++' | grep -E "${MATCH:-.}")
  filter='*cuda* files, and cuda in the name'
fi
total=${#names[@]}
[ "$total" -gt 0 ] || { echo "sanitize_cases.sh: no case listed (filter '$filter', MATCH '${MATCH:-}')" >&2; exit 2; }
if [ -n "${ONLY:-}" ]; then
  read -r -a todo <<< "$ONLY"
else
  todo=()
  for ((i = first; i < total; i++)); do todo+=("$i"); done
fi
echo "sanitize_cases.sh: $total cases ($filter${MATCH:+, MATCH '$MATCH'}); $tool over ${#todo[@]} of them, $jobs at a time, budget $budget s"
deadline=$((SECONDS + budget))

# One case: its log, and its summary line in its own file (the jobs finish in any order).
run_case() {
  local i=$1 left=$2 name=${names[$1]} s=$SECONDS rc
  # -tc takes a comma-separated list of wildcard patterns: a comma in the name is escaped.
  local pattern=${name//,/\\,}
  # memcheck also reports failed CUDA API calls, and the allocator tests' out-of-memory cudaMalloc and
  # NCCL's cudaFuncGetAttributes probe fail on purpose: as run_gpu_bench.sh, only access errors count.
  local extra=()
  [ "$tool" = memcheck ] && extra=(--report-api-errors no)
  timeout "$left" compute-sanitizer --tool "$tool" ${extra[@]+"${extra[@]}"} --error-exitcode 9 "$T" -tc="$pattern" > "$logs/case_$i.log" 2>&1
  rc=$?
  local summary ran
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logs/case_$i.log" | tail -1)
  ran=$(grep -E "^\[doctest\] test cases:" "$logs/case_$i.log" | tail -1)
  # A pattern that selected no case passes in doctest: rc 3 says the name did not select itself.
  if [ "$rc" -eq 0 ] && ! grep -qE 'test cases: +[1-9]' <<< "$ran"; then rc=3; fi
  printf '%d\trc %d\t%d s\t%s\t%s\t%s\n' "$i" "$rc" $((SECONDS - s)) "$summary" "$ran" "$name" > "$logs/case_$i.line"
  cat "$logs/case_$i.line"
}

started=()
for i in "${todo[@]}"; do
  [ "$i" -lt "$total" ] || continue
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  left=$((deadline - SECONDS))
  [ "$left" -gt "$per_case" ] || break
  rm -f "$logs/case_$i.line"
  run_case "$i" "$left" &
  started+=("$i")
done
wait

# The summary in index order; what is left (cut short, or never started) is the next call's ONLY.
: > "$OUT/sanitize_$tool.txt"
rest=() failed=0
for i in "${todo[@]}"; do
  [ "$i" -lt "$total" ] || continue
  if [ -f "$logs/case_$i.line" ]; then
    cat "$logs/case_$i.line" >> "$OUT/sanitize_$tool.txt"
    rc=$(cut -f2 "$logs/case_$i.line")
    case $rc in
      "rc 0") ;;
      "rc 124") rest+=("$i") ;;
      *) failed=1 ;;
    esac
  else
    rest+=("$i")
  fi
done
tar czf "$OUT/sanitize_${tool}_logs.tgz" -C "$OUT" "sanitize_$tool" && rm -rf "$logs"
echo "sanitize_cases.sh: ${#started[@]} cases started; $(grep -c $'\trc 0\t' "$OUT/sanitize_$tool.txt") passed; ${#rest[@]} left"
if [ "$failed" -ne 0 ]; then
  echo "sanitize_cases.sh: FAILED cases:"
  grep -v -E $'\trc (0|124)\t' "$OUT/sanitize_$tool.txt"
fi
if [ "${#rest[@]}" -gt 0 ]; then
  echo "sanitize_cases.sh: resume with  ONLY=\"${rest[*]}\" ${MATCH:+MATCH='$MATCH' }bash tools/gpu/sanitize_cases.sh $tool 0 BUDGET${4:+ '$4'}"
else
  echo "sanitize_cases.sh: all ${#todo[@]} cases done"
fi
exit "$failed"
