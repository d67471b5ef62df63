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
# It builds only what it runs: the halfgrad-unet3d program, for the CPU where no GPU answers
# nvidia-smi, else with the CUDA backend for the present GPU's architecture alone (no tests, no
# benchmarks, no GEMM ladder: tools/test.sh builds those).
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
bash tools/install_deps.sh
# The present GPU's compute capability ("9.0" -> 90), or nothing when there is none.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ' || true)
if [[ $arch =~ ^[0-9]+$ ]]; then
  backend=(-DHALFGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${arch}-real")
  echo "train_default.sh: building halfgrad-unet3d with the CUDA backend for sm_${arch}"
else
  backend=(-DHALFGRAD_CUDA=OFF)
  echo "train_default.sh: no GPU answers nvidia-smi: building halfgrad-unet3d for the CPU"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${backend[@]}" -DBUILD_TESTING=OFF -DHALFGRAD_BENCH=OFF \
    | grep -E "halfgrad|Error|error" || true
cmake --build build -j"$(nproc)" --target halfgrad-unet3d
exec "${cmd[@]}"
