#!/usr/bin/env bash
# The test command: installs what it needs, builds, and runs the whole suite with CTest.
# Tests whose data is absent (../shared/data/hippocampus, mricron-data) are reported as skipped, by name.
# Then the installed package is tested from outside the tree (tools/test_package.sh).
# In CI (CI=true), or with HALFGRAD_SANITIZE=1, two more stages follow:
#   - the CPU suite again under ASan + UBSan (tools/sanitize.sh, a CPU-only build in ./build-asan);
#   - each libFuzzer harness for FUZZ_SECONDS (default 60) on its seed corpus (tools/fuzz.sh, a
#     clang build in ./build-fuzz); a crash, sanitizer report, leak, timeout or OOM fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --test-dir build --output-on-failure -V
bash tools/test_package.sh  # cmake --install, then examples/external built against the package
if [ "${CI:-}" = true ] || [ "${HALFGRAD_SANITIZE:-0}" = 1 ]; then
  bash tools/sanitize.sh
  bash tools/fuzz.sh
fi
