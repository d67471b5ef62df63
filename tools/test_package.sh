#!/usr/bin/env bash
# test_package.sh - the installable package, checked as an outside user would use it: installs
# ./build into build/package-test/prefix, builds examples/external/ against it with find_package
# (nothing of the source tree on its include path), and runs it (it trains an MLP and a small
# anisotropic 3-D network under FP16 and BF16 autocast; it fails when the MLP's held-out accuracy is
# below 0.95 or a 3-D run does not fit its batch). tools/test.sh runs it after the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
P=build/package-test
rm -rf $P
cmake --install build --prefix $P/prefix > $P.install.log 2>&1 || { cat $P.install.log; exit 1; }
cmake -S examples/external -B $P/external -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/$P/prefix" > /dev/null
cmake --build $P/external -j"$(nproc)"
$P/external/halfgrad_external
echo "package test: examples/external built against $P/prefix and trained"
