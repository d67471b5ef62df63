#!/usr/bin/env python3
"""Split an MSD folder into a cross-validation folder and a held-out test folder.

    tools/msd_holdout_split.py DATA OUT [--every 5] [--index 4]

Training pairs are sorted by image file name, as halfgrad-unet3d's loader sorts them (io/msd.h);
pair i goes to OUT/test when i % every == index, else to OUT/cv. Each is a complete MSD folder
(dataset.json with its "training" list and numTraining rewritten, imagesTr/, labelsTr/) holding
copies of the files, so `train --data OUT/cv --fold K` runs 5-fold cross-validation on the pairs
the ensemble is then scored on nowhere, and `predict --labels OUT/test/labelsTr` scores it on
OUT/test/imagesTr (issue 34's "held-out volumes kept outside the repository").

With the defaults the test pairs are the reference recipe's validation pairs (index % 5 == 4, the
40 of the 200 hippocampus pairs that tools/predict_heldout.sh scores), so the ensemble's score is
comparable with the single-run held-out figures in bench/NOTES.md.

Refuses (exit 2, nothing written) when OUT exists, when DATA has no dataset.json, or when a listed
file is missing.
"""
import argparse
import json
import os
import shutil
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--index", type=int, default=4)
    a = ap.parse_args()
    if a.every < 2 or not 0 <= a.index < a.every:
        sys.exit(f"msd_holdout_split: --every {a.every} --index {a.index}: expected every >= 2 and 0 <= index < every")
    if os.path.exists(a.out):
        print(f"msd_holdout_split: {a.out} exists; remove it or pick another folder", file=sys.stderr)
        sys.exit(2)
    meta_path = os.path.join(a.data, "dataset.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        pairs = sorted(meta["training"], key=lambda e: e["image"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"msd_holdout_split: {meta_path}: {e}", file=sys.stderr)
        sys.exit(2)
    for e in pairs:
        for k in ("image", "label"):
            if not os.path.isfile(os.path.join(a.data, e[k])):
                print(f"msd_holdout_split: {meta_path} lists {e[k]}, which is not a file", file=sys.stderr)
                sys.exit(2)
    split = {"cv": [], "test": []}
    for i, e in enumerate(pairs):
        split["test" if i % a.every == a.index else "cv"].append(e)
    for name, entries in split.items():
        root = os.path.join(a.out, name)
        for sub in ("imagesTr", "labelsTr"):
            os.makedirs(os.path.join(root, sub))
        for e in entries:
            for k in ("image", "label"):
                shutil.copyfile(os.path.join(a.data, e[k]), os.path.join(root, e[k]))
        m = dict(meta, training=entries, numTraining=len(entries), test=[], numTest=0)
        m["description"] = f"{meta.get('description', '')} ({name}: pairs i % {a.every} "
        m["description"] += f"{'==' if name == 'test' else '!='} {a.index} of {len(pairs)}, tools/msd_holdout_split.py)"
        with open(os.path.join(root, "dataset.json"), "w") as f:
            json.dump(m, f, indent=1)
        print(f"{root}: {len(entries)} pairs")


if __name__ == "__main__":
    main()
