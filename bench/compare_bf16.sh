#!/bin/sh
# bench/compare_bf16.sh: baton against PyTorch on this CPU, f32 and bf16, MLP and CNN, runs
# alternating between the two, ROUNDS times; prints every run, then medians and ratios.
# Usage: bench/compare_bf16.sh BUILD_DIR [ROUNDS] [STEPS] [THREADS]
#   baton: `baton run` one stage, one micro-batch, synthetic data, median step, at --threads 1 and
#          THREADS, the better kept (oneDNN's OpenMP teams suffer on a loaded machine);
#          models/fashion-mlp.yaml (batch 256) and models/fashion-cnn.yaml (batch 128), AdamW.
#   torch: bench/torch_train.py (the same networks, batches and optimizer), f32 and
#          torch.autocast("cpu", dtype=torch.bfloat16), each at two settings, and the best kept:
#          torch threads 1 with OpenBLAS free to use THREADS (its f32 GEMMs), and torch threads
#          THREADS with OPENBLAS_NUM_THREADS=1 (no oversubscription); OPENBLAS_CORETYPE is the one
#          baton picks, so both use the same OpenBLAS kernels.
#   the machine's GEMM rates (bench_cpu gemm, THREADS) are measured in the same run, once per round:
#          f32 on oneDNN (baton's default f32 path, cpu/gemm_f32.c), f32 on OpenBLAS
#          (BATON_CPU_F32=openblas) and bf16; baton f32 is also run on the OpenBLAS path (batonO).
#   bf16 storage of activations (exec/bf16_store.c): the bf16 MLP as 2 stages x 1 thread, GPipe, 8
#          micro-batches, with BATON_BF16_STASH=0 (f32 slots) and =1 (bf16 slots, converted after
#          each forward op and before each backward read), and as 1 stage, 1 micro-batch with
#          =0 and =1 (where bf16 slots save nothing: the conversions alone); alternating, same
#          rounds. A 5th argument `store` runs only these (no PyTorch needed).
# Needs Debian's python3-torch (for /usr/bin/python3).
set -eu
build=${1:?usage: compare_bf16.sh BUILD_DIR [ROUNDS] [STEPS] [THREADS] [store]}
rounds=${2:-3}; steps=${3:-20}; threads=${4:-2}; only=${5:-all}
here=$(cd "$(dirname "$0")" && pwd)
if [ "$only" = store ]; then
  store() { # stash stages microbatches schedule -> "median_ms activation_peak activation_peak_f32" of stage 0
    BATON_BF16_STASH=$1 "$build/baton" run "$here/../models/fashion-mlp.yaml" --synthetic --stages "$2" \
      --partition params --microbatches "$3" --schedule "$4" --threads 1 --steps "$steps" --log-format jsonl \
      train.precision=bf16 2>&1 | awk '/"summary"/ {
        match($0, /"median_step_ms": *[0-9.e+-]+/); ms = substr($0, RSTART, RLENGTH); sub(/.*: */, "", ms)
        match($0, /"activation_peak_bytes": *[0-9]+/); a = substr($0, RSTART, RLENGTH); sub(/.*: */, "", a)
        match($0, /"activation_peak_f32_bytes": *[0-9]+/); f = substr($0, RSTART, RLENGTH); sub(/.*: */, "", f)
        print ms, a, f }'
  }
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  out=$(mktemp); trap 'rm -f "$out"' EXIT
  for r in $(seq "$rounds"); do
    for stash in 0 1; do
      echo "pipe $stash $(store $stash 2 8 gpipe)" >>"$out"
      echo "one $stash $(store $stash 1 1 1f1b)" >>"$out"
    done
  done
  cat "$out"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  med() { awk -v c="$1" -v s="$2" '$1 == c && $2 == s {print $3}' "$out" | sort -g |
    awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
  for c in pipe one; do
    f=$(med $c 0); b=$(med $c 1)
    act=$(awk -v c=$c '$1 == c && $2 == 1 {print $4, $5; exit}' "$out")
    echo "$c: median step f32 slots $f ms, bf16 slots $b ms, bf16/f32 time $(awk -v f="$f" -v b="$b" 'BEGIN {printf "%.3f", b / f}');" \
      "stage 0 activation peak bf16 / f32 bytes: $act"
  done
  exit 0
fi
models="$here/../models"
python=/usr/bin/python3
$python -c 'import torch' 2>/dev/null || { echo "compare_bf16: python3-torch is not installed"; exit 2; }
make -s -C "$build" bench >/dev/null
core=$(env -u OPENBLAS_CORETYPE "$build/bench/bench_cpu" gemm --steps 1 --threads 1 | sed -n 's/^blas: OpenBLAS (\([A-Za-z0-9]*\) kernels.*/\1/p')
core=${core:-SkylakeX}
out=$(mktemp); trap 'rm -f "$out"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores," \
  "flags: $(grep -m1 -o 'amx_bf16' /proc/cpuinfo || echo no-amx) $(grep -m1 -o 'avx512_bf16' /proc/cpuinfo || echo no-avx512_bf16)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
baton() { # model precision threads [f32 library] -> median step ms
  env -u OPENBLAS_CORETYPE BATON_CPU_F32="${4:-auto}" "$build/baton" run "$models/fashion-$1.yaml" --synthetic --stages 1 \
    --partition params --microbatches 1 --threads "$3" --steps "$steps" train.precision="$2" 2>&1 |
    awk '/^median step/ {print $3}'
}
torch() { # model precision torch_threads openblas_threads -> median step ms
  OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=$4 OMP_NUM_THREADS=$3 \
    $python "$here/torch_train.py" "$1" "$2" "$3" "$steps" | awk '{print $2}'
}
for r in $(seq "$rounds"); do
  "$build/bench/bench_cpu" gemm --steps 5 --threads "$threads" | awk -v r="$r" '/gemm/ {print "gemm", r, $2, $3, $8}' >>"$out"
  BATON_CPU_F32=openblas "$build/bench/bench_cpu" gemm --steps 5 --threads "$threads" |
    awk -v r="$r" '/gemm f32/ {print "gemm", r, "openblas", $3, $8}' >>"$out"
  for model in mlp cnn; do
    for prec in f32 bf16; do
      b1=$(baton $model $prec 1); echo "baton1 $r $model $prec $b1" >>"$out"
      t1=$(torch $model $prec 1 "$threads"); echo "torch1 $r $model $prec $t1" >>"$out"
      b=$(baton $model $prec "$threads"); echo "batonN $r $model $prec $b" >>"$out"
      t2=$(torch $model $prec "$threads" 1); echo "torchN $r $model $prec $t2" >>"$out"
      echo "round $r $model $prec: baton (1 thread) $b1 ms, torch (1 thread, OpenBLAS $threads) $t1 ms," \
        "baton ($threads threads) $b ms, torch ($threads threads, OpenBLAS 1) $t2 ms"
      if [ $prec = f32 ]; then
        o1=$(baton $model f32 1 openblas); echo "batonO1 $r $model f32 $o1" >>"$out"
        oN=$(baton $model f32 "$threads" openblas); echo "batonON $r $model f32 $oN" >>"$out"
        echo "round $r $model f32 on OpenBLAS: baton (1 thread) $o1 ms, ($threads threads) $oN ms"
      fi
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
pick() { awk -v w="$1" -v m="$2" -v p="$3" '$1 == w && $3 == m && $4 == p {print $5}' "$out" | median; }
echo "medians of $rounds rounds x $steps steps, OpenBLAS $core kernels, each at its better thread setting:"
for shape in 1024x1024x1024 256x1024x1024; do
  for prec in f32 openblas bf16; do
    g=$(awk -v s="$shape" -v p="$prec" '$1 == "gemm" && $3 == p && $4 == s {print $5}' "$out" | median)
    echo "  gemm $prec $shape: $g GFLOP/s"
  done
done
for model in mlp cnn; do
  batch=256; [ $model = cnn ] && batch=128
  for prec in f32 bf16; do
    b1=$(pick baton1 $model $prec); bn=$(pick batonN $model $prec)
    t1=$(pick torch1 $model $prec); tn=$(pick torchN $model $prec)
    awk -v m=$model -v p=$prec -v b1="$b1" -v bn="$bn" -v t1="$t1" -v tn="$tn" -v n=$batch 'BEGIN {
      b = b1 < bn ? b1 : bn; bs = b1 < bn ? "1 thread" : "N threads";
      t = t1 < tn ? t1 : tn; s = t1 < tn ? "1 thread" : "N threads";
      printf "  %s %-4s baton %7.2f ms (%6.0f samples/s, %s)  torch best %7.2f ms (%6.0f samples/s, %s)  baton/torch %.2fx\n",
        m, p, b, n * 1e3 / b, bs, t, n * 1e3 / t, s, t / b }'
  done
  bo=$(for w in batonO1 batonON; do pick $w $model f32; done | sort -g | head -1)
  echo "  $model f32 baton on OpenBLAS (BATON_CPU_F32=openblas), better thread setting: $bo ms"
  bf=$(for w in baton1 batonN; do pick $w $model f32; done | sort -g | head -1)
  bb=$(for w in baton1 batonN; do pick $w $model bf16; done | sort -g | head -1)
  awk -v m=$model -v f="$bf" -v b="$bb" 'BEGIN { printf "  %s baton bf16 / baton f32 throughput: %.2fx\n", m, f / b }'
done
