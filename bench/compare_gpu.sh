#!/usr/bin/env bash
# bench/compare_gpu.sh: baton against PyTorch on one GPU, interleaved. For each model (mlp, cnn:
# models/fashion-*.yaml, their batch, AdamW, synthetic data, f32) it runs `bench_gpu step` and
# bench/torch_gpu.py (eager) alternately ROUNDS times and prints the median step time of each and
# `baton/pytorch = X.XX` (throughput ratio: PyTorch's median step time over baton's; above 1 means
# baton is faster).
# Usage: bench/compare_gpu.sh BUILD_DIR [ROUNDS] [STEPS] [MODELS]    (MODELS default "mlp cnn")
# PYTHON (default python3) must import torch with CUDA.
set -uo pipefail
build=${1:?usage: compare_gpu.sh BUILD_DIR [ROUNDS] [STEPS] [MODELS]}
rounds=${2:-5}; steps=${3:-30}; models=${4:-mlp cnn}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
bench="$build/bench/bench_gpu"
if [ ! -x "$bench" ]; then
  make -s -C "$build" bench/bench_gpu >/dev/null || { echo "compare_gpu: cannot build $bench"; exit 2; }
fi
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  { echo "compare_gpu: $python has no PyTorch with a CUDA GPU"; exit 2; }

median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print 0; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
field() { sed -n "s/^result .*$1=\([^ ]*\).*/\1/p" | tail -n1; }

status=0
for model in $models; do
  baton_ms=(); torch_ms=(); batch=""
  for r in $(seq "$rounds"); do
    out=$("$bench" step --model "$model" --steps "$steps" 2>&1) || { echo "$out"; status=1; continue; }
    [ "$r" = 1 ] && grep '^device:' <<<"$out"
    b=$(field median_ms <<<"$out"); batch=$(field batch <<<"$out")
    tout=$("$python" "$here/torch_gpu.py" --model "$model" --steps "$steps" --batch "$batch" 2>&1) ||
      { echo "$tout"; status=1; continue; }
    [ "$r" = 1 ] && grep '^device:' <<<"$tout"
    t=$(field median_ms <<<"$tout")
    echo "$model round $r: baton $b ms, pytorch $t ms"
    baton_ms+=("$b"); torch_ms+=("$t")
  done
  mb=$(median "${baton_ms[@]}"); mt=$(median "${torch_ms[@]}")
  echo "$model (models/fashion-$model.yaml), batch $batch, AdamW, f32, 1 GPU, medians of $rounds rounds x $steps steps"
  awk -v b="$mb" -v t="$mt" -v n="$batch" -v m="$model" 'BEGIN {
    if (b + 0 <= 0 || t + 0 <= 0) { printf "  %s: no result\n", m; exit }
    printf "  baton    %9.3f ms  %10.0f samples/s\n", b, n * 1000 / b;
    printf "  pytorch  %9.3f ms  %10.0f samples/s\n", t, n * 1000 / t;
    printf "%s baton/pytorch = %.2f\n", m, t / b }'
done
exit $status
