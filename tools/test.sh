#!/usr/bin/env bash
# The test command: installs what it needs, builds, and runs the whole suite with CTest.
# Tests whose data is absent (../shared/data/hippocampus, mricron-data) are reported as skipped, by name.
# In CI (CI=true), or with HALFGRAD_SANITIZE=1, the CPU suite then runs again under ASan + UBSan
# (tools/sanitize.sh, its own CPU-only build in ./build-asan; an estimated 10-15 more minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --test-dir build --output-on-failure -V
if [ "${CI:-}" = true ] || [ "${HALFGRAD_SANITIZE:-0}" = 1 ]; then
  bash tools/sanitize.sh
fi
