#!/usr/bin/env bash
# cv5_planned.sh - issue 34's done-when run in one `device` call (carry [".carry"], after tools/gpu/pack.sh --source):
# builds halfgrad-unet3d, splits the hippocampus (tools/msd_holdout_split.py), trains the 5 folds at once
# with --plan auto --augment nnunet --deep-supervision (nnU-Net's SGD + poly), builds and runs the tests
# beside them (the CUDA augmentation cases, memcheck, same bits of --augment-device cuda), then cv and
# the 5-fold ensemble on the 40 held-out pairs. EP (epochs, 250 steps each) and TB (seconds for the
# whole call) size it; --max-minutes keeps the folds inside TB. Results: $OUT/log.txt and $OUT/r.tgz.
# Written 2026-12-06; not yet run (no GPU was lent after it was written).

set -uo pipefail
S0=$SECONDS
R=$OUT/r; mkdir -p $R
L=$OUT/log.txt
say() { echo "$*" | tee -a $L; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a $L
TARGETS="halfgrad-unet3d" bash tools/gpu/device_build.sh 2>&1 | tail -3 | tee -a $L
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
mkdir -p /usr/share/mricron/templates && cp .carry/mricron/* /usr/share/mricron/templates/
mkdir -p ../shared/data && ln -sfn $PWD/.carry/data/hippocampus ../shared/data/hippocampus
B=$PWD/build-gpu/examples/halfgrad-unet3d T=$PWD/build-gpu/tests/halfgrad_tests D=$PWD/.carry/data/hippocampus
python3 tools/msd_holdout_split.py $D /tmp/split | tee -a $L
EP=${EP:-30}
TB=${TB:-540}  # seconds this call may take in all
MAXMIN=$(python3 -c "print(round(($TB - 200) / 60, 2))"); MAXMIN2=$(python3 -c "print(round(($TB - 290) / 60, 2))")
fold() {  # k: the planned nnU-Net run of fold k; falls back to the CPU augmentation if the GPU's fails at once
  local k=$1 s=$SECONDS
  OMP_NUM_THREADS=2 $B train --device cuda --amp --config reference --data /tmp/split/cv --fold $k --plan auto \
    --augment nnunet --augment-device cuda --deep-supervision --epochs $EP --max-minutes $MAXMIN --save-every 1000 --no-progress \
    --out /tmp/final/f$k > $R/fold$k.log 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && [ $((SECONDS - s)) -lt 90 ]; then
    echo "fold $k rc=$rc at $((SECONDS - s)) s; again with --augment-device cpu" >> $R/fold$k.log
    rm -rf /tmp/final/f$k
    OMP_NUM_THREADS=2 $B train --device cuda --amp --config reference --data /tmp/split/cv --fold $k --plan auto \
      --augment nnunet --augment-device cpu --deep-supervision --epochs $EP --max-minutes $MAXMIN2 --save-every 1000 \
      --no-progress --out /tmp/final/f$k >> $R/fold$k.log 2>&1; rc=$?
  fi
  echo "fold $k rc=$rc $((SECONDS - s)) s" >> $R/fold$k.log
}
FS=$SECONDS
for k in 0 1 2 3 4; do fold $k & done
say "folds started at $((SECONDS - S0)) s"
s=$SECONDS; (cd build-gpu && ninja -j10 halfgrad_tests > ../build-gpu.tests.log 2>&1); say "tests built rc=$? $((SECONDS - s)) s"
s=$SECONDS; $T -tc="augment cuda*,philox*,io augment plan*,unet3d gpu batch*,unet3d --optimizer*,unet3d lr_at*,unet3d plan*" > $R/new_tests.log 2>&1
say "new tests rc=$? $((SECONDS - s)) s"; grep -E "ERROR|FAILED|test cases|assertions|Status" $R/new_tests.log | head -20 | tee -a $L
s=$SECONDS; timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $T -tc="augment cuda*" > $R/san_memcheck.log 2>&1
say "memcheck rc=$? $((SECONDS - s)) s"; grep -E "ERROR SUMMARY|test cases" $R/san_memcheck.log | head -3 | tee -a $L
s=$SECONDS; $T > $R/tests.log 2>&1; say "whole suite rc=$? $((SECONDS - s)) s"; grep -E "ERROR|FAILED|test cases|assertions|Status" $R/tests.log | head -20 | tee -a $L
c="--device cuda --amp --config reference --data $D --augment nnunet --augment-device cuda --epochs 4 --no-progress --seed 5 --save-every 1000"
OMP_NUM_THREADS=2 $B train $c --out /tmp/sb1 > $R/sb1.log 2>&1; OMP_NUM_THREADS=2 $B train $c --out /tmp/sb2 > $R/sb2.log 2>&1
OMP_NUM_THREADS=2 $B train $c --out /tmp/sb3 --stop-after-epoch 2 > $R/sb3.log 2>&1; OMP_NUM_THREADS=2 $B train --resume /tmp/sb3 --no-progress > $R/sb3r.log 2>&1
for f in model.safetensors training_state.safetensors; do cmp /tmp/sb1/$f /tmp/sb2/$f && cmp /tmp/sb1/$f /tmp/sb3/$f && say "same bytes gpu-aug graph (twice, resumed): $f"; done
grep -E "^augment|^cuda graph|^done" $R/sb1.log | tee -a $L
wait
say "folds took $((SECONDS - FS)) s"
for k in 0 1 2 3 4; do grep -E "^plan|^done|^fold|^stopping|^cuda graph" $R/fold$k.log | tail -4 | tee -a $L; done
grep -E "^plan|^model|^augment|^memory|^loader|^gpu|^epoch" $R/fold0.log | head -14 | tee -a $L
$B cv /tmp/final/f* > $R/cv.json 2>&1; cat $R/cv.json | tee -a $L
ck=(); for k in 0 1 2 3 4; do ck+=(--checkpoint /tmp/final/f$k); done
s=$SECONDS; OMP_NUM_THREADS=8 $B predict "${ck[@]}" --input /tmp/split/test/imagesTr --output /tmp/pred_ens --labels /tmp/split/test/labelsTr \
  --device cuda --no-progress > $R/ensemble.log 2>&1; say "ensemble rc=$? $((SECONDS - s)) s: $(tail -1 $R/ensemble.log)"
for k in 0 1 2 3 4; do OMP_NUM_THREADS=8 $B predict --checkpoint /tmp/final/f$k --input /tmp/split/test/imagesTr --output /tmp/pred_f$k \
  --labels /tmp/split/test/labelsTr --device cuda --no-progress > $R/single_f$k.log 2>&1; say "single f$k: $(tail -1 $R/single_f$k.log)"; done
cp /tmp/final/f0/plan.json $R/plan_f0.json 2>/dev/null; for k in 0 1 2 3 4; do cp /tmp/final/f$k/metrics.csv $R/metrics_f$k.csv 2>/dev/null; done
say "call took $((SECONDS - S0)) s"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $R
