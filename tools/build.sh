#!/usr/bin/env bash
# Installs the dependencies (Debian packages) and builds halfgrad in ./build (Release).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
# Everything, whatever tools/train_default.sh left in the cache: the CUDA backend wherever CMake finds
# nvcc, for its default architectures (sm_80 and sm_90: CI must catch a CUDA compile error), the tests
# and the benchmarks.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -UHALFGRAD_CUDA -UCMAKE_CUDA_ARCHITECTURES -DBUILD_TESTING=ON \
      -DHALFGRAD_BENCH=ON | grep -E "halfgrad|Error|error" || true
cmake --build build -j"$(nproc)"
