#!/bin/sh
# bench/compare_torch.sh: baton against PyTorch on the same machine, same threads, interleaved.
# Trains the MLP 784-1024-1024-10 (batch 256, AdamW, synthetic data) ROUNDS times with each, one
# after the other, and prints the median step time and samples/s of each and the ratio.
# Usage: bench/compare_torch.sh BUILD_DIR [ROUNDS] [STEPS] [THREADS]
# Needs Debian's python3-torch (for /usr/bin/python3). PyTorch is given the same OpenBLAS
# kernels baton chooses (OPENBLAS_CORETYPE) so the peer is measured at its best.
set -eu
build=${1:?usage: compare_torch.sh BUILD_DIR [ROUNDS] [STEPS] [THREADS]}
rounds=${2:-5}; steps=${3:-20}; threads=${4:-1}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
$python -c 'import torch' 2>/dev/null || { echo "compare_torch: python3-torch is not installed"; exit 2; }
make -s -C "$build" bench >/dev/null
core=$(env -u OPENBLAS_CORETYPE "$build/bench/bench_cpu" mlp --steps 1 --threads 1 | sed -n 's/^blas: OpenBLAS (\([A-Za-z0-9]*\) kernels.*/\1/p')
baton_ms=""; torch_ms=""
for r in $(seq "$rounds"); do
  b=$(env -u OPENBLAS_CORETYPE "$build/bench/bench_cpu" mlp --steps "$steps" --threads "$threads" | awk '/baton training step/ {print $4}')
  t=$(OPENBLAS_CORETYPE=${core:-SkylakeX} OMP_NUM_THREADS=$threads $python "$here/torch_mlp.py" "$steps" "$threads" | awk '{print $2}')
  echo "round $r: baton $b ms, torch $t ms"
  baton_ms="$baton_ms $b"; torch_ms="$torch_ms $t"
done
median() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mb=$(median $baton_ms); mt=$(median $torch_ms)
echo "mlp 784-1024-1024-10, batch 256, AdamW, $threads thread(s), OpenBLAS ${core:-?} kernels, medians of $rounds rounds x $steps steps"
awk -v b="$mb" -v t="$mt" 'BEGIN {
  printf "  baton    %8.2f ms  %8.0f samples/s\n", b, 256000 / b;
  printf "  pytorch  %8.2f ms  %8.0f samples/s\n", t, 256000 / t;
  printf "  baton / pytorch throughput: %.2fx\n", t / b }'
