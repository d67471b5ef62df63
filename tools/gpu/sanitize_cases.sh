#!/usr/bin/env bash
# sanitize_cases.sh - compute-sanitizer over the CUDA test cases one case at a time, resumable across
# device calls. Under racecheck the whole CUDA suite runs far longer than one 10-minute call (on the
# H200, 2026-12-02: 33 of 147 cases in 440 s; one UNet3d determinism case alone took longer than the
# rest of that call), and doctest's --first did not select a range there, so this script selects each
# case by its exact name (-tc, with doctest's separators escaped) and stops before its time runs out,
# printing where the next call resumes.
#   bash tools/gpu/sanitize_cases.sh TOOL FIRST BUDGET_S [FILTER]
# TOOL: memcheck, racecheck, initcheck or synccheck. FIRST: the 0-based index of the first case (in
# doctest's listing of the FILTER'ed cases, file order). BUDGET_S: seconds this call may use; a case is
# started only while more than PER_CASE_S (default 60) of them are left, and each runs under
# `timeout` of what is left. FILTER: doctest -sf (default '*cuda*'). Logs go to $OUT/sanitize_TOOL/,
# one per case, and a summary line per case to $OUT/sanitize_TOOL.txt: index, rc, seconds, the
# sanitizer's summary, the name. rc 124 is a case the budget cut short (not a verdict).
# Runs from the repository root with the build of tools/gpu/device_build.sh (build-gpu/).
set -uo pipefail
cd "$(dirname "$0")/../.."
tool=${1:?tool}; first=${2:?first index}; budget=${3:?budget seconds}; filter=${4:-*cuda*}
per_case=${PER_CASE_S:-60}
T=${TESTS:-build-gpu/tests/halfgrad_tests}
[ -x "$T" ] || { echo "sanitize_cases.sh: $T is missing: run tools/gpu/device_build.sh first" >&2; exit 2; }
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT/sanitize_$tool"
export LD_LIBRARY_PATH=/tmp/halfgrad-nifti/lib:$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
export HIPPO=${HIPPO:-$PWD/.carry/data/hippocampus}

# doctest lists one case per line between its banner lines; without a GPU, CUDA_TEST_CASE also
# prints "skipped: <name>: ..." lines, which are not names.
mapfile -t names < <("$T" -sf="$filter" --list-test-cases --no-version=true 2>/dev/null |
  grep -v -E '^\[doctest\]|^=+$|^skipped: ' | sed '/^$/d')
total=${#names[@]}
echo "sanitize_cases.sh: $total cases under -sf='$filter'; $tool from $first, budget $budget s"
start=$SECONDS
i=$first
while [ "$i" -lt "$total" ]; do
  left=$((budget - (SECONDS - start)))
  [ "$left" -gt "$per_case" ] || break
  name=${names[$i]}
  # -tc takes a comma-separated list of wildcard patterns: a comma in the name is escaped.
  pattern=${name//,/\\,}
  s=$SECONDS
  timeout "$left" compute-sanitizer --tool "$tool" --error-exitcode 9 "$T" -tc="$pattern" > "$OUT/sanitize_$tool/case_$i.log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize_$tool/case_$i.log" | tail -1)
  ran=$(grep -E "^\[doctest\] test cases:" "$OUT/sanitize_$tool/case_$i.log" | tail -1)
  printf '%d\trc %d\t%d s\t%s\t%s\t%s\n' "$i" "$rc" $((SECONDS - s)) "$summary" "$ran" "$name" | tee -a "$OUT/sanitize_$tool.txt"
  [ "$rc" -eq 124 ] && break
  i=$((i + 1))
done
if [ "$i" -lt "$total" ]; then
  echo "sanitize_cases.sh: stopped at case $i of $total: resume with  bash tools/gpu/sanitize_cases.sh $tool $i BUDGET '$filter'"
else
  echo "sanitize_cases.sh: all $total cases done"
fi
