#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (GCC), in ./build-asan.
#
# Builds CPU-only (-DHALFGRAD_CUDA=OFF -DHALFGRAD_ASAN_UBSAN=ON, see CMakeLists.txt) at -O1 -g with
# assertions on (no NDEBUG: Eigen's index checks run too), only the targets the run needs, then runs
# the whole doctest suite (about 30 s). With SANITIZE_SMOKE=1 it also builds halfgrad-unet3d and
# trains one epoch on the default data, then evaluates it (about 6.5 minutes: the conv loops run
# ~40x slower under ASan at -O1), so CI leaves it out.
# Any finding stops the run with a stack trace and a non-zero exit:
#   ASan: out-of-bounds, use-after-free (the CPU allocator poisons the blocks it caches, so a read of a
#         freed tensor is reported even when its block is cached), double free, leaks (LeakSanitizer);
#   UBSan: signed overflow, invalid shifts, misaligned or null loads, out-of-range float -> int casts.
# Leak suppressions, each with its reason: tools/lsan.supp (none are needed today: the allocator's
# never-destroyed cache is reachable from a static pointer, which LeakSanitizer does not report).
# Usage: [SANITIZE_SMOKE=1] tools/sanitize.sh [doctest arguments, e.g. -tc="conv3d*"]
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
start=$(date +%s)
mkdir -p build-asan
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DHALFGRAD_CUDA=OFF -DHALFGRAD_ASAN_UBSAN=ON "${launcher[@]}" > build-asan/configure.log 2>&1 ||
  { cat build-asan/configure.log; echo "sanitize.sh: configuring build-asan failed"; exit 1; }
grep -E "halfgrad|Error|error" build-asan/configure.log || true
targets=(halfgrad_tests)
[ "${SANITIZE_SMOKE:-0}" = 1 ] && targets+=(halfgrad-unet3d)
cmake --build build-asan -j"$(nproc)" --target "${targets[@]}"
built=$(date +%s)
echo "sanitize.sh: build took $((built - start)) s"

# OpenMP: two threads exercise the parallel loops (libgomp's own thread pool is not leak-reported:
# it is reachable). detect_stack_use_after_return is off: it roughly doubles the run time.
export OMP_NUM_THREADS=2
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
(cd build-asan/tests && ./halfgrad_tests "$@")
tested=$(date +%s)
echo "sanitize.sh: test suite took $((tested - built)) s"

if [ "${SANITIZE_SMOKE:-0}" = 1 ]; then
  run_dir=$(mktemp -d)
  trap 'rm -rf "$run_dir"' EXIT
  build-asan/examples/halfgrad-unet3d train --out "$run_dir" --epochs 1 --no-progress
  build-asan/examples/halfgrad-unet3d eval --checkpoint "$run_dir/model.safetensors"
  echo "sanitize.sh: halfgrad-unet3d smoke run took $(($(date +%s) - tested)) s"
fi
echo "sanitize.sh: no sanitizer findings"
