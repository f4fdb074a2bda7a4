#!/bin/sh
# bench/compare_gpt.sh: the language-model benchmarks, baton against PyTorch in the same run,
# alternating, medians of ROUNDS rounds.
#   1. training tokens/s of models/gpt-shakespeare.yaml (2 stages, `baton run`) against
#      bench/torch_gpt.py (the same model) at 1 and 2 threads (OPENBLAS_NUM_THREADS set to match,
#      since torch.set_num_threads does not limit Debian's OpenBLAS); the ratio uses PyTorch's
#      better setting;
#   2. the fused attention's forward + backward (bench_gpt attention) against the same causal
#      attention written in PyTorch;
#   3. `baton generate` tokens/s (bench/compare_generate.sh: the KV cache through 1 and 2 stages
#      with 1 and 4 prompts in flight, without the cache, PyTorch with a KV cache; CKPT: a
#      checkpoint directory of gpt-shakespeare, e.g. from `baton run ... --checkpoint-dir`);
#   4. GPT-2 small (models/gpt2-small.yaml, 4 stages, batch 4 x 1024 tokens, synthetic tokens):
#      the median step of 3 training steps (no peer: PyTorch's run of it does not fit the time).
# Usage: bench/compare_gpt.sh BUILD_DIR [ROUNDS] [STEPS] [CKPT]
# Needs data/shakespeare.txt (scripts/fetch-shakespeare.sh) and Debian's python3-torch.
set -eu
build=${1:?usage: compare_gpt.sh BUILD_DIR [ROUNDS] [STEPS] [CKPT]}
rounds=${2:-3}; steps=${3:-30}; ckpt=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
python=/usr/bin/python3
$python -c 'import torch' 2>/dev/null || { echo "compare_gpt: python3-torch is not installed"; exit 2; }
[ -f "$root/data/shakespeare.txt" ] || { echo "compare_gpt: run scripts/fetch-shakespeare.sh first"; exit 2; }
make -s -C "$build" baton bench >/dev/null
core=SkylakeX
grep -q avx512f /proc/cpuinfo || core=Haswell
median() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

cd "$root"
b_ms=""; t1_ms=""; t2_ms=""
for r in $(seq "$rounds"); do
  b=$("$build/baton" run models/gpt-shakespeare.yaml --steps "$steps" data.train.val_fraction=0.002 | awk '/^median step/ {print $3}')
  t1=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=1 $python "$here/torch_gpt.py" --steps "$steps" --threads 1 --time-only | awk '/^torch_gpt/ {print $5}')
  t2=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=2 $python "$here/torch_gpt.py" --steps "$steps" --threads 2 --time-only | awk '/^torch_gpt/ {print $5}')
  echo "round $r: baton $b ms, torch 1 thread $t1 ms, torch 2 threads $t2 ms (per step of 12 x 64 tokens)"
  b_ms="$b_ms $b"; t1_ms="$t1_ms $t1"; t2_ms="$t2_ms $t2"
done
mb=$(median $b_ms); m1=$(median $t1_ms); m2=$(median $t2_ms)
awk -v b="$mb" -v t1="$m1" -v t2="$m2" 'BEGIN {
  best = t1 < t2 ? t1 : t2;
  printf "training gpt-shakespeare, medians of rounds:\n";
  printf "  baton (2 stages, 1 BLAS thread each)  %8.2f ms  %8.0f tokens/s\n", b, 768000 / b;
  printf "  pytorch 1 thread                      %8.2f ms  %8.0f tokens/s\n", t1, 768000 / t1;
  printf "  pytorch 2 threads                     %8.2f ms  %8.0f tokens/s\n", t2, 768000 / t2;
  printf "  baton / best pytorch tokens/s: %.2fx\n", best / b }'

a_b=""; a_t=""
for r in $(seq "$rounds"); do
  ab=$("$build/bench/bench_gpt" attention --t 256 --c 256 --heads 4 --batch 8 --steps 10 | awk '/^baton_attention_ms/ {print $2}')
  at=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=1 $python "$here/torch_gpt.py" --attention 256,256,4,8 --steps 10 --threads 1 | awk '/^torch_attention_ms/ {print $2}')
  echo "round $r: attention fwd+bwd baton $ab ms, torch $at ms"
  a_b="$a_b $ab"; a_t="$a_t $at"
done
awk -v b="$(median $a_b)" -v t="$(median $a_t)" 'BEGIN {
  printf "causal attention T=256 C=256 4 heads batch 8, forward+backward, 1 thread: baton %.2f ms, pytorch %.2f ms, baton / pytorch speed %.2fx\n", b, t, t / b }'

if [ -n "$ckpt" ]; then
  "$here/compare_generate.sh" "$build" "$ckpt" "$rounds"
fi

g2=$("$build/baton" run models/gpt2-small.yaml --synthetic --steps 3 | awk '/^median step/ {print $3}')
echo "gpt2-small (124M, 4 stages, 4 micro-batches, batch 4 x 1024 tokens): median step $g2 ms, $(awk -v m="$g2" 'BEGIN {printf "%.0f", 4096000 / m}') tokens/s"
