#!/usr/bin/env bash
# run_gpu_bench.sh - everything halfgrad measures on the GPU machine, beside the PyTorch references,
# in one call: CUDA tests (plain, under compute-sanitizer memcheck, racecheck and initcheck, and with the allocator poisoned), the GEMM
# ladder against cuBLAS, conv3d per layer against cuDNN, the U-Net step against PyTorch eager, and
# the hippocampus AMP training of both. Results (JSON, logs) go to $OUT (default ./gpu-results);
# bench/compare_gpu.py prints the ratios at the end.
#
# Runs from the folder tools/gpu/pack.sh fills (.carry/): build/ (shared-library build), lib/,
# data/hippocampus, reference/ (../shared/reference scripts + compare_gpu.py + torch_hippo_amp.py).
#   bash bench/run_gpu_bench.sh [tests] [sanitize] [gemm] [conv] [step] [step-quick] [profile] [models] [equal] [hippo] [serve] [all]
# SEEDS="0 1" runs the hippocampus training (both frameworks) once per seed.
set -uo pipefail
cd "$(dirname "$0")/../.carry"
OUT=${OUT:-$PWD/../gpu-results}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}
export HIPPO=$PWD/data/hippocampus PYTHONUNBUFFERED=1
want() { for a in "${PHASES[@]}"; do [[ $a == "$1" || $a == all ]] && return 0; done; return 1; }
PHASES=("$@")
[ ${#PHASES[@]} -eq 0 ] && PHASES=(all)
t() { local s=$SECONDS; "$@"; local rc=$?; echo "[phase took $((SECONDS - s)) s, rc $rc]"; return $rc; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader
if want tests; then
  # The whole suite: the CUDA cases (tests/cuda/ and the "... cuda" cases beside the CPU ones), and the
  # CPU cases again on this machine's cores.
  echo "== tests (CPU and CUDA)"
  t build/tests/halfgrad_tests 2>&1 | tee "$OUT/tests.log" | grep -E "ERROR|FAILED|test cases|assertions|Status" | head -60
fi
if want sanitize; then
  echo "== compute-sanitizer memcheck / racecheck / initcheck on the CUDA tests"
  # initcheck: a kernel that reads device memory nothing wrote (the CUDA twin of the CPU poison check).
  # One process over the suite, cut at SANITIZE_TIMEOUT: a smoke check. Under racecheck the whole CUDA
  # suite outlasts a device call; tools/gpu/sanitize_cases.sh runs it case by case, in parallel, resumable.
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck}; do extra=""; [ $tool = memcheck ] && extra="--report-api-errors no";
    t timeout ${SANITIZE_TIMEOUT:-150} compute-sanitizer --tool $tool $extra --error-exitcode 9 build/tests/halfgrad_tests -sf='*cuda*' > "$OUT/sanitizer_$tool.log" 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid|Uninitialized" "$OUT/sanitizer_$tool.log" | sort | uniq -c | head -8
  done
  # initcheck does not see what TMA stores write (bench/gemm/initcheck_tma_probe.cu): on sm_90 it reports
  # the GEMM's TMA-epilogue outputs in memory nothing else had initialised. The poison runs check
  # instead that every element is written: one left unwritten reads as 0 or as FP16 NaN and fails the
  # comparison with the CPU.
  for p in 0 255; do
    t env HALFGRAD_CUDA_POISON=$p timeout ${SANITIZE_TIMEOUT:-150} build/tests/halfgrad_tests -sf='*cuda*' > "$OUT/poison_$p.log" 2>&1
    echo "HALFGRAD_CUDA_POISON=$p rc=$?"; grep -E "test cases|assertions" "$OUT/poison_$p.log"
  done
fi
if want gemm; then
  echo "== GEMM ladder vs cuBLAS"
  t build/bench/gemm/gemm_bench ${GEMM_ARGS:-} 2>&1 | tee "$OUT/gemm.log" | tail -45
fi
if want conv; then
  echo "== conv3d per layer vs cuDNN"
  t python3 reference/torch_conv3d.py "$OUT/torch_conv3d.json" > "$OUT/torch_conv3d.log" 2>&1
  t build/bench/conv3d_cuda_bench "$OUT/conv3d_cuda.json" 4 2>&1 | tail -30
fi
if want step || want step-quick; then
  echo "== U-Net step vs PyTorch eager"
  t python3 reference/torch_unet_step.py "$OUT/torch_unet_step.json" > "$OUT/torch_unet_step.log" 2>&1
  q=""; want step-quick && ! want step && q=--quick
  t build/bench/unet_step_cuda "$OUT/unet_step_cuda.json" $q 2>&1 | tail -12
fi
if want profile; then
  # Issue 11, item 1: one U-Net AMP step (channels-last, batch PROFILE_B at PROFILE_S^3) kernel by
  # kernel, halfgrad under ncu (only the kernels inside the NVTX range "profiled_step"), PyTorch under
  # torch.profiler; bench/profile_step.py prints the categories side by side.
  echo "== profile: one U-Net AMP step, kernel by kernel"
  pb=${PROFILE_B:-16}; ps=${PROFILE_S:-64}
  t python3 ../bench/profile_step.py torch "$OUT/profile_torch.json" reference $pb $ps 2>&1 | tail -3
  build/bench/unet_step_cuda --profile $pb $ps > "$OUT/profile_step.json"
  t ncu --clock-control none --nvtx --nvtx-include "profiled_step/" --metrics gpu__time_duration.sum --csv --page raw \
      --print-units base build/bench/unet_step_cuda --profile $pb $ps > "$OUT/profile_ncu.csv" 2> "$OUT/profile_ncu.err"
  tail -3 "$OUT/profile_ncu.err"
  python3 ../bench/profile_step.py ncu "$OUT/profile_ncu.csv" "$OUT/profile_halfgrad.json" "$OUT/profile_step.json"
  python3 ../bench/profile_step.py report "$OUT/profile_halfgrad.json" "$OUT/profile_torch.json" | tee "$OUT/profile_report.txt"
fi
if want models; then
  # Issue 10 on the GPU: the model that is not the U-Net (FP32, FP16 + GradScaler, BF16) and the BF16
  # example, on CUDA; the same two on the GPU machine's CPU for the CPU figures.
  echo "== examples 12 and 13"
  for amp in none fp16 bf16; do
    t build/examples/12_lobe_classifier --device cuda --amp $amp --templates mricron 2>&1 | tee "$OUT/lobe_cuda_$amp.log" | tail -10
  done
  t build/examples/13_bf16 --device cuda 2>&1 | tee "$OUT/bf16_cuda.log"
  t build/examples/13_bf16 --device cpu 2>&1 | tee "$OUT/bf16_cpu.log" | tail -9
fi
if want equal; then
  # Issue 11, item 6 / issue 30: FP32, FP16 and BF16 AMP under one GPU memory budget (the allocator's
  # limit over the eager cache, the graph pool and the loader's buffers), each at the largest batch the
  # trainer runs at: images/s, epoch time and Dice side by side (examples/14_equal_memory.cpp). The run
  # folders stay on the machine (/tmp); the log comes back.
  echo "== equal memory budget: FP32 vs AMP (FP16, BF16)"
  t build/examples/14_equal_memory --data "$HIPPO" --budget-mib ${EQUAL_MIB:-2048} --epochs ${EQUAL_EPOCHS:-20} \
      --out /tmp/equal_memory_runs --overwrite 2>&1 | tee "$OUT/equal_memory.log" | grep -v "^epoch" | tail -40
fi
if want hippo; then
  echo "== hippocampus, AMP, reference recipe: PyTorch then halfgrad"
  t python3 reference/torch_hippo_amp.py "$OUT/torch_hippo_amp.json" 2>&1 | tee "$OUT/torch_hippo.log" | tail -3
  for seed in ${SEEDS:-0}; do
    t build/examples/halfgrad-unet3d train --device cuda --amp --config reference --data "$HIPPO" --out "$OUT/hippo_amp_s$seed" \
        --seed $seed --no-progress --save-every 10 ${HIPPO_ARGS:-} 2>&1 | tee "$OUT/hippo_amp_s$seed.log" | grep -E "epoch (50|100)/|done|error"
  done
fi
if want serve; then
  # Issue 9 on the GPU: the prefetching loader off and on (wall time, the training thread's wait, the
  # GPU's idle time between steps, checkpoint write time; the same bits either way), predict on CUDA
  # against the CPU's labels of the same checkpoint (serve/ from the dev machine: cpu_run/ and
  # cpu_labels/, made by tools/predict_heldout.sh), and PyTorch 2.11 + safetensors loading halfgrad's
  # model.safetensors and the other way round (tools/interop/torch_safetensors.py).
  echo "== issue 9: loader, checkpoints, predict on CUDA, PyTorch interop"
  for w in 0 default; do
    extra=""; [ $w = 0 ] && extra="--workers 0"
    t build/examples/halfgrad-unet3d train --device cuda --amp --config reference --data "$HIPPO" --out "$OUT/serve_w$w" \
        --seed 0 --no-progress --save-every 10 $extra 2>&1 | tee "$OUT/serve_w$w.log" | grep -E "epoch 100/|checkpoint:|loader|gpu|done|error" | tail -9
  done
  cmp "$OUT/serve_w0/model.safetensors" "$OUT/serve_wdefault/model.safetensors" && echo "loader: model.safetensors identical with --workers 0 and the default"
  t build/bench/checkpoint_write_bench --config reference --opt-level O1 --device cuda --dir "$OUT/ckbench" 2>&1 | tail -6
  # --resume on CUDA: 1 epoch + resume to 2 against 2 straight (the CPU test does the same in CI).
  B=build/examples/halfgrad-unet3d
  $B train --device cuda --amp --config reference --data "$HIPPO" --epochs 2 --seed 3 --no-progress --out "$OUT/res_s" > "$OUT/res_s.log" 2>&1
  $B train --device cuda --amp --config reference --data "$HIPPO" --epochs 2 --seed 3 --no-progress --stop-after-epoch 1 --out "$OUT/res_r" > "$OUT/res_r.log" 2>&1
  $B train --resume "$OUT/res_r" --no-progress >> "$OUT/res_r.log" 2>&1
  cmp "$OUT/res_s/model.safetensors" "$OUT/res_r/model.safetensors" && echo "resume on cuda: model.safetensors identical to the straight run" || tail -3 "$OUT/res_r.log"
  if [ -d serve/cpu_run ]; then
    HALFGRAD_UNET3D=build/examples/halfgrad-unet3d HIPPOCAMPUS="$HIPPO" t bash ../tools/predict_heldout.sh serve/cpu_run "$OUT/pred_cuda" --device cuda 2>&1 | tail -2
    t python3 ../tools/compare_label_maps.py serve/cpu_labels "$OUT/pred_cuda/labels" --images "$OUT/pred_cuda/images" 2>&1 | tail -3
  fi
  HALFGRAD_REFERENCE=$PWD/reference t python3 ../tools/interop/torch_safetensors.py --bin build/examples/halfgrad-unet3d \
      --data "$HIPPO" --work "$OUT/interop" --device cuda --halfgrad-run "$OUT/serve_wdefault" \
      --torch-channels 16,32,64,128,256 --torch-steps ${TORCH_STEPS:-600} 2>&1 | tail -3
fi
python3 reference/compare_gpu.py "$OUT"
