#!/usr/bin/env bash
# The test command: installs what it needs, builds, and runs the whole suite with CTest.
# Tests whose data is absent (../shared/data/hippocampus, mricron-data) are reported as skipped, by name.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --test-dir build --output-on-failure -V
