#!/usr/bin/env bash
# The main job on a fresh machine: installs what it needs, builds, and trains the CPU-sized U-Net on
# the embedded default data (Debian's mricron-data: ch2 T1 brain with AAL regions grouped into lobes).
# Extra arguments go to `halfgrad-unet3d train` (e.g. --amp, --epochs 30, --data ../shared/data/hippocampus)
# and win over this script's defaults:
#   --config cpu       unless the arguments give --config
#   --out runs/default unless they give --out. runs/default is this script's scratch folder: a second
#                      run replaces the first (--overwrite is passed for it, and the program prints
#                      what it removed). A folder given with --out is protected as always: it is
#                      refused if it holds a run, unless --overwrite is given too.
# TRAIN_DEFAULT_PRINT=1 prints the command instead of building and running it.
set -euo pipefail
cd "$(dirname "$0")/.."
has_option() {  # has_option NAME ARGS...: ARGS contain "NAME" or "NAME=..."
  local name=$1 a
  shift
  for a in "$@"; do
    [[ $a == "$name" || $a == "$name="* ]] && return 0
  done
  return 1
}
defaults=()
has_option --config "$@" || defaults+=(--config cpu)
if ! has_option --out "$@"; then
  defaults+=(--out runs/default)
  has_option --overwrite "$@" || defaults+=(--overwrite)
fi
cmd=(build/examples/halfgrad-unet3d train "${defaults[@]}" "$@")
if [[ ${TRAIN_DEFAULT_PRINT:-} == 1 ]]; then
  echo "${cmd[*]}"
  exit 0
fi
bash tools/build.sh
exec "${cmd[@]}"
