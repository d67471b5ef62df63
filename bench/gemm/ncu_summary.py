#!/usr/bin/env python3
"""ncu_summary.py - one line per kernel of an `ncu --csv --page raw --print-units base` report of
`gemm_bench --profile M N K`: the kernel (name cut at 70 characters, template arguments kept, since
they tell the tile width, split and pairing apart), its duration in ns and its L2 traffic in bytes.

    ncu --clock-control none --metrics gpu__time_duration.sum,lts__t_bytes.sum --csv --page raw \
        --print-units base build/bench/gemm/gemm_bench --profile 1000 1000 1000 > ncu.csv
    python3 bench/gemm/ncu_summary.py ncu.csv
"""
import csv
import sys


def main(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own log lines are not CSV
    rows = list(csv.DictReader(lines))
    for row in rows:
        name = row.get("Kernel Name", "")
        time_ns = row.get("gpu__time_duration.sum", "")
        l2 = row.get("lts__t_bytes.sum", "")
        if not time_ns or not time_ns.replace(",", "").replace(".", "").isdigit():
            continue  # the units row
        short = name.replace("halfgrad::cuda::", "").replace("(anonymous namespace)::", "")
        print(f"{short[:70]:70s} time_ns={time_ns:>8s} l2_bytes={l2:>12s}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_summary.py REPORT.csv")
    main(sys.argv[1])
