#!/usr/bin/env python3
"""Voxel agreement of two folders of uint8 NIfTI label maps with the same file names (issue 9:
`predict --device cuda` against `--device cpu`, which must agree on at least 99.9% of voxels).
Python's standard library only (gzip, struct): the maps are those io::write_label_nifti writes
(NIfTI-1, datatype uint8, vox_offset 352), and their geometry fields must be identical too.

    python3 tools/compare_label_maps.py DIR_A DIR_B [--min-agreement 0.999] [--images DIR]
prints one line per file and a total; exit status 1 when the total agreement is below the minimum
or a file or a header differs. --images DIR also checks that every map's geometry fields equal those
of the input image of the same name in DIR (the scans predict read); DIR_B may then be DIR_A.
"""
import argparse
import gzip
import os
import struct
import sys

GEOMETRY = [("dim", 40, 56), ("pixdim", 76, 108), ("xyzt_units", 123, 124), ("qform..srow", 252, 328)]


def read(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    hdr = raw[:348]
    (datatype,) = struct.unpack_from("<h", hdr, 70)
    (offset,) = struct.unpack_from("<f", hdr, 108)
    if datatype != 2:
        sys.exit(f"{path}: datatype {datatype}; expected 2 (uint8) as predict writes")
    return hdr, raw[int(offset):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--min-agreement", type=float, default=0.999)
    ap.add_argument("--images", help="folder of the input images: their geometry must be the maps'")
    args = ap.parse_args()
    names = sorted(n for n in os.listdir(args.a) if n.endswith((".nii", ".nii.gz")))
    same = total = 0
    bad = False
    for n in names:
        ha, va = read(os.path.join(args.a, n))
        hb, vb = read(os.path.join(args.b, n))
        refs = [(hb, args.b)]
        if args.images:
            raw = open(os.path.join(args.images, n), "rb").read()
            refs.append(((gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)[:348], args.images))
        for ref, where in refs:
            for field, lo, hi in GEOMETRY:
                if ha[lo:hi] != ref[lo:hi]:
                    print(f"{n}: header field {field} differs from {where}")
                    bad = True
        if len(va) != len(vb):
            print(f"{n}: {len(va)} vs {len(vb)} voxels")
            bad = True
            continue
        s = sum(x == y for x, y in zip(va, vb))
        same += s
        total += len(va)
        print(f"{n}: {s}/{len(va)} voxels agree ({s / len(va):.6f})")
    agreement = same / max(total, 1)
    print(f"total: {same}/{total} voxels agree ({agreement:.6f}) over {len(names)} files")
    sys.exit(1 if bad or agreement < args.min_agreement or not names else 0)


main()
