#!/usr/bin/env bash
# Installs the dependencies (Debian packages) and builds halfgrad in ./build (Release).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release | grep -E "halfgrad|Error|error" || true
cmake --build build -j"$(nproc)"
