#!/usr/bin/env bash
# pack.sh - gathers what a run on the GPU machine needs into .carry/ (git-ignored; the `device` tool's
# `carry`): the shared-library build (cmake -DHALFGRAD_SHARED_LIBS=ON -DCMAKE_CUDA_ARCHITECTURES=90-real,
# so all programs share one copy of the kernels), the system libraries the GPU machine lacks
# (nifticlib, zlib's companions, OpenMP), the hippocampus data and the PyTorch reference scripts.
#   tools/gpu/pack.sh BUILD_DIR      (default build-dev)
#   tools/gpu/pack.sh --source       no build: nifticlib's headers and libraries in .carry/nifti/ instead,
#                                    for tools/gpu/device_build.sh, which builds on the GPU machine
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-dev}
C=.carry
rm -rf $C/build $C/lib $C/reference $C/nifti
mkdir -p $C/lib $C/reference
if [ "$B" = --source ]; then
  mkdir -p $C/nifti/include $C/nifti/lib
  cp /usr/include/nifti/*.h $C/nifti/include/
  cp /usr/include/xxhash.h $C/nifti/include/  # header-only (core/checksum.cpp); the GPU image lacks it
  for l in libniftiio.so libniftiio.so.2 libznz.so libznz.so.3; do cp -L /usr/lib/x86_64-linux-gnu/$l $C/nifti/lib/; done
else
mkdir -p $C/build/tests $C/build/examples $C/build/bench/gemm
cp -a $B/lib*.so $C/build/
cp $B/tests/halfgrad_tests $C/build/tests/
cp $B/examples/halfgrad-unet3d $C/build/examples/
for e in 12_lobe_classifier 13_bf16 14_equal_memory; do [ -f $B/examples/$e ] && cp $B/examples/$e $C/build/examples/; done
for f in unet_step_cuda conv3d_cuda_bench norm_cuda_bench pool_cuda_bench checkpoint_write_bench; do [ -f $B/bench/$f ] && cp $B/bench/$f $C/build/bench/; done
[ -f $B/bench/gemm/gemm_bench ] && cp $B/bench/gemm/gemm_bench $C/build/bench/gemm/
strip --strip-unneeded $C/build/*.so $C/build/tests/* $C/build/examples/* $C/build/bench/* $C/build/bench/gemm/* 2>/dev/null || true
fi
# (a build from here also needs these on the GPU machine; one built there has its own)
[ "$B" = --source ] || for l in libniftiio.so.2 libznz.so.3 libgomp.so.1 libpng16.so.16; do cp -L /usr/lib/x86_64-linux-gnu/$l $C/lib/; done
[ -d $C/data/hippocampus ] || { mkdir -p $C/data && cp -r ../shared/data/hippocampus $C/data/; }
cp ../shared/reference/*.py $C/reference/
# The embedded default data (examples/12_lobe_classifier --templates .carry/mricron): ch2 + AAL.
mkdir -p $C/mricron && cp /usr/share/mricron/templates/{ch2.nii.gz,aal.nii.gz,aal.nii.txt} $C/mricron/
cp bench/compare_gpu.py bench/torch_hippo_amp.py $C/reference/ 2>/dev/null || true
du -sh $C; du -sh $C/* 
