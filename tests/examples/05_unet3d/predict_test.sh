#!/usr/bin/env bash
# CTest halfgrad_unet3d_predict: `halfgrad-unet3d predict` end to end with a checkpoint trained here
# (1 epoch of the CPU recipe on the hippocampus data: the weights need not be good, the files must).
#   - a folder with 3 good volumes, a truncated .nii.gz, a text file named .nii and a 4-D file of
#     2 volumes: the good ones are written (same names), each bad one is an error naming its file
#     ("2 channel(s), the model expects 1" for the 4-D one), exit status 1, no temp file left;
#   - --labels prints a Dice line per volume and one JSON line;
#   - existing outputs are refused without --overwrite and replaced with it;
#   - one file in: --output a file path or an existing folder; --probabilities; --tta.
# Skipped, by name, where ../shared/data/hippocampus is absent.
#   predict_test.sh BINARY SHARED_DIR
set -uo pipefail
bin=$1 data=$2/data/hippocampus
if [[ ! -f $data/dataset.json ]]; then
  echo "skipped: halfgrad_unet3d_predict: $data not found"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if ! "$bin" train --data "$data" --config cpu --amp --epochs 1 --seed 3 --no-progress --out "$tmp/run" > "$tmp/train.log" 2>&1; then
  echo "FAIL: training the test checkpoint:"; tail -20 "$tmp/train.log"; exit 1
fi
ck=$tmp/run/model.safetensors

mkdir -p "$tmp/in"
good=(hippocampus_001.nii.gz hippocampus_003.nii.gz hippocampus_006.nii.gz)
for n in "${good[@]}"; do cp "$data/imagesTr/$n" "$tmp/in/"; done
head -c 3000 "$data/imagesTr/hippocampus_001.nii.gz" > "$tmp/in/cut.nii.gz"
echo "not an image" > "$tmp/in/text.nii"
# A 4-D file of 2 volumes (dim[0] = 4, dim[4] = 2, the voxels twice), with python's stdlib.
python3 - "$data/imagesTr/hippocampus_003.nii.gz" "$tmp/in/two.nii.gz" <<'EOF'
import gzip, struct, sys
b = bytearray(gzip.open(sys.argv[1]).read())
off = int(struct.unpack_from("<f", b, 108)[0])
struct.pack_into("<h", b, 40, 4)
struct.pack_into("<h", b, 48, 2)
gzip.open(sys.argv[2], "wb").write(bytes(b) + bytes(b[off:]))
EOF

out=$("$bin" predict --checkpoint "$ck" --input "$tmp/in" --output "$tmp/out" --labels "$data/labelsTr" --no-progress 2>&1)
status=$?
echo "$out" | sed 's/^/  | /'
[[ $status == 1 ]] || fail "a folder with bad files: status $status, expected 1"
for n in "${good[@]}"; do
  [[ -s $tmp/out/$n ]] || fail "$n was not written"
  [[ $out == *"$n: "*"Dice"* ]] || fail "no Dice line for $n"
done
for n in cut.nii.gz text.nii two.nii.gz; do
  [[ -e $tmp/out/$n ]] && fail "a file was written for the bad input $n"
  [[ $out == *"error: $n: "*"$tmp/in/$n"* ]] || fail "no error naming $tmp/in/$n"
done
[[ $out == *"2 channel(s), the model expects 1"* ]] || fail "the 4-D file's error does not give the channel counts"
[[ $out == *'{"dice":['*'"volumes":3'* ]] || fail "no JSON summary over the 3 good volumes"
[[ $out == *"3 of 6 volume(s) failed"* ]] || fail "no list of the failures"
[[ $(ls -A "$tmp/out") == *tmp* ]] && fail "a temp file was left in the output folder: $(ls -A "$tmp/out")"

# Existing outputs: refused at once (nothing changes), replaced with --overwrite.
rm "$tmp/in/cut.nii.gz" "$tmp/in/text.nii" "$tmp/in/two.nii.gz"
before=$(md5sum "$tmp/out/${good[0]}")
out=$("$bin" predict --checkpoint "$ck" --input "$tmp/in" --output "$tmp/out" --no-progress 2>&1)
status=$?
[[ $status == 1 && $out == *"exist already"*"--overwrite"* ]] || fail "existing outputs were not refused: $status $out"
out=$("$bin" predict --checkpoint "$ck" --input "$tmp/in" --output "$tmp/out" --overwrite --no-progress 2>&1)
status=$?
[[ $status == 0 ]] || fail "--overwrite: status $status: $out"
[[ $(md5sum "$tmp/out/${good[0]}") == "$before" ]] || fail "the same run gave a different label map"

# An output that would replace the reference labels or the label maps is refused before any work.
out=$("$bin" predict --checkpoint "$ck" --input "$tmp/in" --output "$tmp/out" --labels "$tmp/out" --overwrite --no-progress 2>&1)
status=$?
[[ $status == 1 && $out == *"--output and --labels both name"* ]] || fail "--output = --labels was not refused: $status $out"
out=$("$bin" predict --checkpoint "$ck" --input "$tmp/in" --output "$tmp/out" --probabilities "$tmp/out" --overwrite --no-progress 2>&1)
status=$?
[[ $status == 1 && $out == *"--output and --probabilities both name"* ]] || fail "--output = --probabilities was not refused: $status $out"
[[ $(md5sum "$tmp/out/${good[0]}") == "$before" ]] || fail "a refused run changed a label map"

# One file in: to a file path, to an existing folder; --probabilities and --tta.
one=$tmp/in/${good[1]}
out=$("$bin" predict --checkpoint "$ck" --input "$one" --output "$tmp/one.nii" --probabilities "$tmp/p.nii.gz" --tta \
  --no-progress 2>&1)
status=$?
[[ $status == 0 && -s $tmp/one.nii && -s $tmp/p.nii.gz ]] || fail "one file to a file path: $status $out"
mkdir "$tmp/folder"
"$bin" predict --checkpoint "$ck" --input "$one" --output "$tmp/folder" --no-progress > /dev/null 2>&1 ||
  fail "one file to a folder"
[[ -s $tmp/folder/${good[1]} ]] || fail "one file to a folder: $tmp/folder/${good[1]} missing"
out=$("$bin" predict --checkpoint "$ck" --input "$one" --output "$tmp/x.txt" 2>&1)
[[ $? == 1 && $out == *"neither an existing folder nor a .nii/.nii.gz file name"* ]] || fail "--output x.txt: $out"
out=$("$bin" predict --checkpoint "$ck" --input "$tmp/in" --output "$tmp/in" --overwrite 2>&1)
[[ $? == 1 && $out == *"is the --input folder"* ]] || fail "--output = --input folder: $out"
out=$("$bin" predict --checkpoint "$ck" --input "$tmp/nothing" --output "$tmp/o2" 2>&1)
[[ $? == 1 && $out == *"$tmp/nothing does not exist"* ]] || fail "missing --input: $out"

if [[ $failures != 0 ]]; then echo "$failures failure(s)"; exit 1; fi
echo "predict_test: all passed"
