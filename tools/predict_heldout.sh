#!/usr/bin/env bash
# Issue 9's held-out check: `halfgrad-unet3d predict` on the hippocampus validation images (every 5th
# pair sorted by name, index % 5 == 4: the pairs train never trains on, data.h), read from the
# original files (not padded), with Dice against labelsTr printed by --labels.
#   tools/predict_heldout.sh CHECKPOINT OUT_DIR [predict options, e.g. --device cuda --tta]
# Writes OUT_DIR/images/ (links to the 40 held-out images), OUT_DIR/labels/ (the label maps) and
# OUT_DIR/predict.log; the last line of the log is predict's JSON summary (mean_dice).
set -euo pipefail
ck=$1 out=$2
shift 2
bin=${HALFGRAD_UNET3D:-build/examples/halfgrad-unet3d}
data=${HIPPOCAMPUS:-../shared/data/hippocampus}
mkdir -p "$out/images"
# dataset.json's training pairs sorted by their image entry, as io::load_msd and split_every_fifth do.
mapfile -t images < <(python3 -c 'import json, os, sys
for e in sorted(json.load(open(sys.argv[1]))["training"], key=lambda e: e["image"]):
    print(os.path.basename(e["image"]))' "$data/dataset.json")
n=0
for i in "${!images[@]}"; do
  if (( i % 5 == 4 )); then
    ln -sf "$(realpath "$data/imagesTr/${images[$i]}")" "$out/images/${images[$i]}"
    n=$((n + 1))
  fi
done
echo "held-out: $n of ${#images[@]} images in $out/images"
"$bin" predict --checkpoint "$ck" --input "$out/images" --output "$out/labels" --labels "$data/labelsTr" \
  --overwrite --no-progress "$@" | tee "$out/predict.log"
