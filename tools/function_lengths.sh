#!/usr/bin/env bash
# Lists the functions of the given C++ files longer than MAX lines (first argument), longest first, and
# fails when there is one. Lengths are universal-ctags' (first line of the definition to its closing
# brace, comments inside included); a lambda counts toward the function that holds it.
#   tools/function_lengths.sh 120 examples/05_unet3d/*.cpp unet3d/*.cpp
# CTest halfgrad_unet3d_function_length runs it on the U-Net program (issue 31: at most 120 lines).
set -euo pipefail
max=$1; shift
# Without Universal Ctags (tools/install_deps.sh installs it) the check is skipped, saying so: exit 77,
# CTest's SKIP_RETURN_CODE for this test.
if ! command -v ctags >/dev/null || ! ctags --version | grep -q "Universal Ctags"; then
  echo "skipped: function_lengths.sh needs Universal Ctags and its end: field (apt install universal-ctags)"
  exit 77
fi
lengths=$(ctags --languages=C++ --language-force=C++ --c++-kinds=f --fields=+ne -o - "$@" |
  awk -F'\t' '{ ln = ""; en = "";
                for (i = 4; i <= NF; i++) { if ($i ~ /^line:/) ln = substr($i, 6); if ($i ~ /^end:/) en = substr($i, 5) }
                if (ln != "" && en != "" && $1 !~ /^__anon/) print en - ln + 1, $2 ":" ln, $1 }' | sort -rn)
echo "longest functions (lines, file:line, name):"
echo "$lengths" | head -5
over=$(echo "$lengths" | awk -v m="$max" '$1 > m')
if [ -n "$over" ]; then
  echo "function_lengths.sh: longer than $max lines:" >&2
  echo "$over" >&2
  exit 1
fi
echo "none longer than $max lines ($(echo "$lengths" | grep -c .) functions)"
