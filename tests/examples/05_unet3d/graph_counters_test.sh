#!/usr/bin/env bash
# CTest halfgrad_unet3d_graph_counters: a --cuda-graph run's checkpoint counts what a --no-cuda-graph
# run's counts. BatchNorm's num_batches_tracked is a host Int64 advanced in forward; replays run no
# host code and the capture runs it once, so train corrects the counters at each epoch's end (trainer.cpp, finish_graph_epoch).
# Two epochs of the reference recipe on the hippocampus data, AMP, both ways:
#   - the graph run must have captured and replayed (else the check would be empty);
#   - every num_batches_tracked must be equal in the two checkpoints (the eager run's counts the kept
#     steps: a skipped step's restore rolls its count back); they are read at the offsets the
#     safetensors header gives, with Python's standard library;
#   - the rest of the file is compared and reported, not required: --cuda-graph's AdamW computes its
#     step scalars on the device (README, "--cuda-graph").
# Skipped, by name, without a GPU (nvidia-smi) or without ../shared/data/hippocampus.
#   graph_counters_test.sh BINARY SHARED_DIR
set -uo pipefail
bin=$1 data=$2/data/hippocampus
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "skipped: halfgrad_unet3d_graph_counters: no GPU (nvidia-smi -L failed)"
  exit 77
fi
if [[ ! -f $data/dataset.json ]]; then
  echo "skipped: halfgrad_unet3d_graph_counters: $data not found"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for g in cuda-graph no-cuda-graph; do
  if ! "$bin" train --device cuda --amp --config reference --data "$data" --epochs 2 --seed 0 --no-progress \
      --"$g" --out "$tmp/$g" > "$tmp/$g.log" 2>&1; then
    echo "FAIL: the --$g run exited non-zero:"; tail -20 "$tmp/$g.log"; exit 1
  fi
done
if ! grep -E "^cuda graph: [1-9][0-9]* capture\(s\), [1-9][0-9]* replays" "$tmp/cuda-graph.log"; then
  echo "FAIL: the --cuda-graph run did not capture and replay:"; grep "cuda graph" "$tmp/cuda-graph.log"; exit 1
fi
cmp -s "$tmp/cuda-graph/model.safetensors" "$tmp/no-cuda-graph/model.safetensors" \
  && echo "ok: the two checkpoints are byte-identical" \
  || echo "note: the two checkpoints differ in bytes (allowed; the counters are checked below)"
python3 - "$tmp/cuda-graph/model.safetensors" "$tmp/no-cuda-graph/model.safetensors" <<'PY'
import json, struct, sys
def counters(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, t in header.items():
            if name.endswith(".num_batches_tracked"):
                assert t["dtype"] == "I64", (path, name, t["dtype"])
                f.seek(base + t["data_offsets"][0])
                out[name] = struct.unpack("<q", f.read(8))[0]
        return out
g, e = counters(sys.argv[1]), counters(sys.argv[2])
assert g, "no num_batches_tracked in " + sys.argv[1]
assert sorted(g) == sorted(e), "the two checkpoints name different counters"
bad = [(k, g[k], e[k]) for k in sorted(g) if g[k] != e[k]]
if bad:
    for k, a, b in bad[:8]: print(f"FAIL: {k}: --cuda-graph {a}, --no-cuda-graph {b}")
    sys.exit(1)
print(f"ok: {len(g)} num_batches_tracked equal in both runs ({sorted(set(g.values()))})")
PY
