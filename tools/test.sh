#!/usr/bin/env bash
# The test command: installs what it needs, builds, and runs the whole suite with CTest.
# CUDA tests (when built) report themselves as skipped, by name, on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --test-dir build --output-on-failure -V
