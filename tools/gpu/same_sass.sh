#!/usr/bin/env bash
# same_sass.sh - does a refactor of device code leave the machine code as it was? Disassembles the
# same object files of two builds (before and after) with cuobjdump and compares them kernel by kernel,
# after removing what moves without meaning anything: instruction addresses and encodings, and the
# hash of each file's anonymous namespace in the kernel names. Needs the CUDA toolkit's cuobjdump (the
# GPU machine has it; this project's CPU machine does not).
#   tools/gpu/same_sass.sh OLD_BUILD_DIR NEW_BUILD_DIR OBJECT...
# OBJECT: a path inside both build folders, e.g. CMakeFiles/halfgrad_ops.dir/ops/conv/conv3d_fprop_cuda.cu.o.
# Prints per object: kernels, SASS instructions old / new, and "same SASS" or the kernels that differ
# with their instruction counts; exits 1 if any object differs.
set -uo pipefail
old=$1 new=$2
shift 2
command -v cuobjdump > /dev/null || { echo "same_sass.sh: cuobjdump is not on PATH" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One line per instruction, "kernel<TAB>instruction", addresses, encodings and namespace hashes removed.
sass() {
  cuobjdump -sass "$1" | sed -E 's/_GLOBAL__N__[0-9a-f]+_/_GLOBAL__N__/g' | awk '
    /Function : / { fn = $3; next }
    /^[[:space:]]+\/\*[0-9a-f]{4,}\*\// {
      line = $0
      sub(/^[[:space:]]+\/\*[0-9a-f]+\*\/[[:space:]]*/, "", line)
      sub(/[[:space:]]*\/\* 0x[0-9a-f]+ \*\/[[:space:]]*$/, "", line)
      if (line != "") print fn "\t" line
    }'
}
rc=0
for o in "$@"; do
  [ -f "$old/$o" ] && [ -f "$new/$o" ] || { echo "$o: missing in one build"; rc=1; continue; }
  sass "$old/$o" > "$work/old"
  sass "$new/$o" > "$work/new"
  kernels=$(cut -f1 "$work/new" | sort -u | wc -l)
  if cmp -s "$work/old" "$work/new"; then
    echo "$o: same SASS ($kernels kernels, $(wc -l < "$work/new") instructions)"
  else
    rc=1
    echo "$o: DIFFERENT SASS ($kernels kernels, $(wc -l < "$work/old") -> $(wc -l < "$work/new") instructions); kernels that differ (old -> new instructions):"
    cut -f1 "$work/old" | sort | uniq -c > "$work/old.n"
    cut -f1 "$work/new" | sort | uniq -c > "$work/new.n"
    for k in $(cut -f1 "$work/new" | sort -u); do
      if ! cmp -s <(grep -F "$k	" "$work/old") <(grep -F "$k	" "$work/new"); then
        a=$(awk -v k="$k" '$2 == k { print $1 }' "$work/old.n"); b=$(awk -v k="$k" '$2 == k { print $1 }' "$work/new.n")
        echo "  ${a:-0} -> ${b:-0}  $(echo "$k" | { c++filt 2>/dev/null || cat; } | cut -c1-160)"
      fi
    done
  fi
done
exit $rc
