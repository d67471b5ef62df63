#!/usr/bin/env bash
# device_build.sh - builds halfgrad ON the GPU machine (16 cores: a full CUDA build in minutes) rather
# than carrying one made here (2 cores: half an hour when every file recompiles). The GPU machine's
# image has CMake, Ninja, nvcc, Eigen, doctest, nlohmann-json, CLI11, zlib and libpng, but not
# nifticlib: `tools/gpu/pack.sh --source` puts its headers and libraries in .carry/nifti/ beside the
# data and the reference scripts. Then, in one `device` call (carry [".carry"]):
#   bash tools/gpu/device_build.sh && export OUT && bash bench/run_gpu_bench.sh tests step ...
# It configures build-gpu/ (shared libraries, sm_90 machine code, as pack.sh's build-dev), builds every
# target and links .carry/build to it, where run_gpu_bench.sh looks. A second call on a warm machine
# rebuilds only what changed. TARGETS="halfgrad_tests ..." builds just those (a sanitizer call needs
# only the tests).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-gpu}
[ -f .carry/nifti/include/nifti1_io.h ] || { echo "device_build.sh: .carry/nifti is missing: run tools/gpu/pack.sh --source here first" >&2; exit 2; }
# Outside the source tree: the installable package's exported targets may not name paths inside it.
N=/tmp/halfgrad-nifti
rm -rf $N && cp -r .carry/nifti $N
s=$SECONDS
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALFGRAD_SHARED_LIBS=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DNIFTI_INCLUDE_DIR=$N/include -DXXHASH_INCLUDE_DIR=$N/include -DNIFTIIO_LIBRARY=$N/lib/libniftiio.so -DZNZ_LIBRARY=$N/lib/libznz.so > $B.configure.log 2>&1 \
  || { tail -40 $B.configure.log; exit 1; }
rm -rf .carry/build && ln -s ../$B .carry/build
mkdir -p .carry/lib && cp -L $N/lib/*.so.* .carry/lib/ 2>/dev/null || true
# Every target that can be built is (ninja -k 0); a failed file prints its errors and the status is 1,
# but the programs that did build are in place for the checks that follow.
rc=0
cmake --build $B -j "$(nproc)" ${TARGETS:+--target $TARGETS} -- -k 0 > $B.build.log 2>&1 || { rc=1; grep -E "error|FAILED" -A4 $B.build.log | head -60; }
echo "device_build.sh: built $B in $((SECONDS - s)) s (rc $rc)"
exit $rc
