#!/bin/sh
# bench/compare_conv.sh: the CNN (models/fashion-cnn.yaml, batch 128, AdamW, synthetic data, one
# stage, one micro-batch) with conv2d on each CPU path, against PyTorch in the same run, f32 and
# bf16, runs alternating, ROUNDS times; prints every run, then medians and ratios.
# Usage: bench/compare_conv.sh BUILD_DIR [ROUNDS] [STEPS] [THREADS]
#   baton: BATON_CPU_CONV=im2col, =onednn and =auto (each layer timed at its first call), at
#          --threads THREADS; the auto run's choices are printed.
#   torch: bench/torch_train.py cnn (PyTorch 1.13's mkldnn convolutions), f32 and
#          torch.autocast("cpu", dtype=torch.bfloat16), torch threads THREADS with
#          OPENBLAS_NUM_THREADS=1, and torch threads 1 with OpenBLAS free to use THREADS: the
#          better of the two kept per precision (bench/compare_bf16.sh's two settings).
# Needs Debian's python3-torch (for /usr/bin/python3).
set -eu
build=${1:?usage: compare_conv.sh BUILD_DIR [ROUNDS] [STEPS] [THREADS]}
rounds=${2:-3}; steps=${3:-20}; threads=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
$python -c 'import torch' 2>/dev/null || { echo "compare_conv: python3-torch is not installed"; exit 2; }
out=$(mktemp); trap 'rm -f "$out"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores," \
  "flags: $(grep -m1 -o 'amx_bf16' /proc/cpuinfo || echo no-amx) $(grep -m1 -o 'avx512_bf16' /proc/cpuinfo || echo no-avx512_bf16)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
baton() { # path precision -> median step ms
  BATON_CPU_CONV=$1 "$build/baton" run "$here/../models/fashion-cnn.yaml" --synthetic --stages 1 \
    --partition params --microbatches 1 --threads "$threads" --steps "$steps" train.precision="$2" 2>&1 |
    tee "$out.last" | awk '/^median step/ {print $3}'
}
torch() { # precision torch_threads openblas_threads -> median step ms
  OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=$3 OMP_NUM_THREADS=$2 \
    $python "$here/torch_train.py" cnn "$1" "$2" "$steps" | awk '{print $2}'
}
for r in $(seq "$rounds"); do
  for prec in f32 bf16; do
    line="round $r $prec:"
    for path in im2col onednn auto; do
      ms=$(baton $path $prec); echo "$path $prec $ms" >>"$out"; line="$line $path $ms ms,"
      if [ $path = auto ] && [ "$r" = 1 ]; then sed -n '/^conv2d on cpu/,$p' "$out.last"; fi
    done
    t1=$(torch $prec 1 "$threads"); tn=$(torch $prec "$threads" 1)
    echo "torch1 $prec $t1" >>"$out"; echo "torchN $prec $tn" >>"$out"
    echo "$line torch (1 thread, OpenBLAS $threads) $t1 ms, torch ($threads threads) $tn ms"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$out.last"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
pick() { awk -v w="$1" -v p="$2" '$1 == w && $2 == p {print $3}' "$out" | median; }
echo "medians of $rounds rounds x $steps steps (baton at --threads $threads):"
for prec in f32 bf16; do
  t1=$(pick torch1 $prec); tn=$(pick torchN $prec)
  for path in im2col onednn auto; do
    b=$(pick $path $prec)
    awk -v p=$prec -v path=$path -v b="$b" -v t1="$t1" -v tn="$tn" 'BEGIN {
      t = t1 < tn ? t1 : tn
      printf "  cnn %-4s conv %-6s baton %7.2f ms (%5.0f samples/s)  torch best %7.2f ms (%5.0f samples/s)  baton/torch %.2fx\n",
        p, path, b, 128e3 / b, t, 128e3 / t, t / b }'
  done
done
