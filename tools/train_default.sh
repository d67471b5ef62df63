#!/usr/bin/env bash
# The main job on a fresh machine: installs what it needs, builds, and trains the CPU-sized U-Net on
# the embedded default data (Debian's mricron-data: ch2 T1 brain with AAL regions grouped into lobes).
# Extra arguments go to `halfgrad-unet3d train` (e.g. --amp, --epochs 30, --data ../shared/data/hippocampus).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
exec build/examples/halfgrad-unet3d train --config cpu --out runs/default "$@"
