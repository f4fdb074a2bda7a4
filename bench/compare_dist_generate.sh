#!/bin/sh
# bench/compare_dist_generate.sh: `baton generate` on models/gpt-shakespeare.yaml (2 stages) as two
# ranks (mpirun -np 2, the rows between stages as MPI messages: exec/decode_dist.c) against the
# same 2 stages as two threads of one process (cpu:0, cpu:1), with 1 and 4 prompts in flight,
# measured in the same run, alternating, medians of ROUNDS rounds of TOKENS tokens after "ROMEO:"
# (seed = the round); and the peer, bench/torch_gpt.py --generate (the same model in PyTorch with a
# KV cache, the prompts as one batch) at 1 and 2 threads, its better one.
# Usage: bench/compare_dist_generate.sh BUILD_DIR CKPT [ROUNDS] [TOKENS]
# CKPT: a checkpoint directory of gpt-shakespeare (the weights do not change the speed). Needs
# Debian's python3-torch and Open MPI.
set -eu
build=${1:?usage: compare_dist_generate.sh BUILD_DIR CKPT [ROUNDS] [TOKENS]}
ckpt=${2:?usage: compare_dist_generate.sh BUILD_DIR CKPT [ROUNDS] [TOKENS]}
rounds=${3:-3}; tokens=${4:-200}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
python=/usr/bin/python3
$python -c 'import torch' 2>/dev/null || { echo "compare_dist_generate: python3-torch is not installed"; exit 2; }
command -v mpirun >/dev/null || { echo "compare_dist_generate: mpirun is not installed"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
make -s -C "$build" baton >/dev/null
core=SkylakeX
grep -q avx512f /proc/cpuinfo || core=Haswell
median() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
cd "$root"
# gen WHERE PROMPTS: tokens/s overall (WHERE: threads or ranks)
gen() {
  where=$1 k=$2
  set -- --stages 2 --tokens "$tokens" --seed "$r"
  i=0; while [ $i -lt "$k" ]; do set -- "$@" --prompt "ROMEO:"; i=$((i + 1)); done
  if [ "$where" = threads ]; then
    OPENBLAS_CORETYPE=$core "$build/baton" generate models/gpt-shakespeare.yaml --weights "$ckpt" --devices cpu:0,cpu:1 "$@"
  else
    mpirun --oversubscribe -x OPENBLAS_CORETYPE=$core -np 2 "$build/baton" generate models/gpt-shakespeare.yaml \
      --weights "$ckpt" "$@"
  fi | awk '/^[0-9]+ tokens in .* tokens\/s/ {print $6; exit}'
}
t1=""; m1=""; t4=""; m4=""; p1=""; p4=""
for r in $(seq "$rounds"); do
  a=$(gen threads 1); b=$(gen ranks 1); c=$(gen threads 4); d=$(gen ranks 4)
  q1=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=1 $python "$here/torch_gpt.py" --generate "$tokens" --prompts 4 --threads 1 | awk '/^torch_generate/ {print $3}')
  q2=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=2 $python "$here/torch_gpt.py" --generate "$tokens" --prompts 4 --threads 2 | awk '/^torch_generate/ {print $3}')
  echo "round $r (load $(cut -d' ' -f1 /proc/loadavg)): tokens/s: 1 prompt: threads $a, ranks $b; 4 prompts: threads $c, ranks $d; pytorch 4 prompts $q1 (1 thread) $q2 (2)"
  t1="$t1 $a"; m1="$m1 $b"; t4="$t4 $c"; m4="$m4 $d"; p1="$p1 $q1"; p4="$p4 $q2"
done
awk -v a="$(median $t1)" -v b="$(median $m1)" -v c="$(median $t4)" -v d="$(median $m4)" -v p1="$(median $p1)" \
    -v p2="$(median $p4)" -v tok="$tokens" 'BEGIN {
  best = p1 > p2 ? p1 : p2;
  printf "generate %d tokens after \"ROMEO:\", gpt-shakespeare in 2 stages, medians of rounds (tokens/s):\n", tok;
  printf "  1 prompt,  2 threads of one process %9.1f\n", a;
  printf "  1 prompt,  2 ranks (mpi)            %9.1f   %.2fx of the threads\n", b, b / a;
  printf "  4 prompts, 2 threads of one process %9.1f\n", c;
  printf "  4 prompts, 2 ranks (mpi)            %9.1f   %.2fx of the threads\n", d, d / c;
  printf "  pytorch KV cache, 4 prompts         %9.1f   (1 thread %.1f, 2 threads %.1f; one batch of 4)\n", best, p1, p2;
  printf "  baton 2 ranks / best pytorch, 4 prompts: %.2fx\n", d / best }'
