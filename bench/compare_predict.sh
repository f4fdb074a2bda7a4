#!/bin/sh
# bench/compare_predict.sh: `baton predict` against PyTorch's model.eval() on the same weights and
# the same batches. Trains models/fashion-mlp.yaml for STEPS steps (a checkpoint in a temporary
# directory), then alternates ROUNDS times: baton predict over Fashion-MNIST's 10,000 test images
# in batches of 256, and PyTorch (torch.no_grad, model.eval()) over the same images, loaded from
# the same checkpoint, at 1 and 2 threads. Prints each round, the medians of samples/s and of the
# per-batch p50/p99 latency, the ratio against PyTorch's best setting, both accuracies (they must
# agree: same weights), and the machine's load.
# Usage: bench/compare_predict.sh BUILD_DIR [ROUNDS] [STEPS] [BATON_FLAGS...]
#   e.g. bench/compare_predict.sh build 5 30 --devices cpu:0 --stages 1 --microbatches 1
# Needs Debian's python3-torch (for /usr/bin/python3) and dataset-fashion-mnist.
set -eu
build=${1:?usage: compare_predict.sh BUILD_DIR [ROUNDS] [STEPS] [BATON_FLAGS...]}
rounds=${2:-5}; steps=${3:-30}
shift; if [ $# -gt 0 ]; then shift; fi; if [ $# -gt 0 ]; then shift; fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
python=/usr/bin/python3
$python -c 'import torch' 2>/dev/null || { echo "compare_predict: python3-torch is not installed"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
baton="$build/baton"
"$baton" run "$src/models/fashion-mlp.yaml" --steps "$steps" --checkpoint-dir "$tmp/ck" --log-format jsonl >"$tmp/train.jsonl"
ckpt="$tmp/ck/checkpoint.safetensors"
# the kernels baton picks for itself (docs/architecture.md, The CPU backend), given to PyTorch too
if grep -q avx512f /proc/cpuinfo; then core=SkylakeX; else core=Haswell; fi
OPENBLAS_CORETYPE=$core $python "$here/torch_predict.py" "$ckpt" "$tmp" 1 256 --write >/dev/null
field() { sed -E "s/.*\"$1\": ([^,}]*).*/\\1/"; }
b_sps=""; b_p50=""; b_p99=""; t1_sps=""; t1_p50=""; t1_p99=""; t2_sps=""; t2_p50=""; t2_p99=""
for r in $(seq "$rounds"); do
  line=$(env -u OPENBLAS_CORETYPE "$baton" predict "$src/models/fashion-mlp.yaml" --weights "$tmp/ck" \
    --input "$tmp/x.npy" --labels "$tmp/y.npy" --batch 256 --log-format jsonl "$@")
  bs=$(echo "$line" | field samples_per_s); b50=$(echo "$line" | field p50_ms); b99=$(echo "$line" | field p99_ms)
  bacc=$(echo "$line" | field accuracy)
  t1=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $python "$here/torch_predict.py" "$ckpt" "$tmp" 1 256)
  t2=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 $python "$here/torch_predict.py" "$ckpt" "$tmp" 2 256)
  echo "round $r: baton $bs samples/s p50 $b50 p99 $b99 | torch 1t: $t1 | torch 2t: $t2"
  b_sps="$b_sps $bs"; b_p50="$b_p50 $b50"; b_p99="$b_p99 $b99"
  t1_sps="$t1_sps $(echo "$t1" | awk '{print $2}')"; t1_p50="$t1_p50 $(echo "$t1" | awk '{print $3}')"
  t1_p99="$t1_p99 $(echo "$t1" | awk '{print $4}')"
  t2_sps="$t2_sps $(echo "$t2" | awk '{print $2}')"; t2_p50="$t2_p50 $(echo "$t2" | awk '{print $3}')"
  t2_p99="$t2_p99 $(echo "$t2" | awk '{print $4}')"
  tacc=$(echo "$t1" | awk '{print $5}')
done
median() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "fashion-mlp predict, 10000 test images, batch 256, weights after $steps training steps; medians of $rounds rounds"
echo "baton flags: ${*:-(the model's own: 2 stages, 8 micro-batches)}; OpenBLAS $core kernels"
printf "  baton        %9.0f samples/s  p50 %7.3f ms  p99 %7.3f ms  accuracy %s\n" "$(median $b_sps)" "$(median $b_p50)" "$(median $b_p99)" "$bacc"
printf "  torch 1 thr  %9.0f samples/s  p50 %7.3f ms  p99 %7.3f ms  accuracy %s\n" "$(median $t1_sps)" "$(median $t1_p50)" "$(median $t1_p99)" "$tacc"
printf "  torch 2 thr  %9.0f samples/s  p50 %7.3f ms  p99 %7.3f ms\n" "$(median $t2_sps)" "$(median $t2_p50)" "$(median $t2_p99)"
awk -v b="$(median $b_sps)" -v t1="$(median $t1_sps)" -v t2="$(median $t2_sps)" 'BEGIN {
  best = t2; which = "2 threads"; if (t1 > t2) { best = t1; which = "1 thread" }
  printf "  baton / pytorch at its best (%s): %.2fx samples/s\n", which, b / best }'
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
