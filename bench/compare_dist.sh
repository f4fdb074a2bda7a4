#!/bin/sh
# bench/compare_dist.sh: baton across processes (mpirun) against its one-process runs and against
# PyTorch DDP, on the same machine, interleaved round by round. The MLP 784-1024-1024-10 (batch 256,
# AdamW, synthetic data: bench/dist-mlp.yaml), one BLAS thread per process or stage:
#   dp1      one process, one stage, one thread, the batch as one micro-batch
#   dp2      mpirun -np 2 --dp 2: two replicas, each one thread, 128 samples each (one micro-batch),
#            the default reduction (shm on one machine: exec/dist_shm.c)
#   dp2m     the same with BATON_DP_REDUCE=mpi (MPI's all-reduce of the gradients: the path before shm)
#   dp2z     the same with parallel.zero=1 (each replica updates half of the weights)
#   ddp2     PyTorch DistributedDataParallel, gloo, 2 processes of one thread (bench/torch_ddp.py)
#   pp1      one process, 2 stages as 2 threads (8 micro-batches, 1F1B)
#   pp2      mpirun -np 2: the same 2 stages as 2 ranks (the mpi path)
#   half1    one process, batch 128 (one replica's share), alone: the GEMMs at 128 rows
#   ind2     two independent processes of batch 128 at once (no MPI, no all-reduce), the slower
#            one's median: the compute-only scaling of this machine, so dp1 / ind2 bounds dp2 / dp1
# Prints per round and then the medians and the ratios dp2/dp1, dp2m/dp1, dp2/dp2m, dp2/ddp2, pp2/pp1
# (throughput).
# The data-parallel runs use one micro-batch (with one stage there is no pipeline to fill; eight
# micro-batches of 16 rows would make every GEMM re-read its weights for a sixth of the work), and
# mpirun --bind-to none, as PyTorch's processes are not pinned either.
# Usage: bench/compare_dist.sh BUILD_DIR [ROUNDS] [STEPS]
set -eu
build=${1:?usage: compare_dist.sh BUILD_DIR [ROUNDS] [STEPS]}
rounds=${2:-5}; steps=${3:-30}
here=$(cd "$(dirname "$0")" && pwd)
b=$build/baton
model=$here/dist-mlp.yaml
python=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
core=$(grep -q avx512f /proc/cpuinfo && echo SkylakeX || echo Haswell)
med_of() { sed -n 's/.*"summary": true, "median_step_ms": \([0-9.]*\).*/\1/p'; }
run1() { env -u OPENBLAS_CORETYPE "$b" run "$model" --steps "$steps" --threads 1 --log-format jsonl "$@" | med_of; }
runN() { env -u OPENBLAS_CORETYPE -u BATON_DP_REDUCE mpirun --bind-to none -np 2 "$b" run "$model" --steps "$steps" --threads 1 --log-format jsonl "$@" | med_of; }
runM() { env -u OPENBLAS_CORETYPE BATON_DP_REDUCE=mpi mpirun --bind-to none -np 2 "$b" run "$model" --steps "$steps" --threads 1 --log-format jsonl "$@" | med_of; }
dp1=""; dp2=""; dp2m=""; dp2z=""; ddp2=""; pp1=""; pp2=""; half1=""; ind2=""
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
  a=$(run1 --stages 1 --microbatches 1); c=$(runN --stages 1 --microbatches 1 --dp 2)
  cm=$(runM --stages 1 --microbatches 1 --dp 2)
  z=$(runN --stages 1 --microbatches 1 --dp 2 parallel.zero=1)
  d=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $python "$here/torch_ddp.py" "$steps" 2 | awk '{print $2}')
  e=$(run1 --stages 2); f=$(runN --stages 2)
  h=$(run1 --stages 1 --microbatches 1 --batch 128)
  run1 --stages 1 --microbatches 1 --batch 128 >"$tmp/i1" & run1 --stages 1 --microbatches 1 --batch 128 >"$tmp/i2"; wait
  i=$(sort -g "$tmp/i1" "$tmp/i2" | tail -1)
  echo "round $r: dp1 $a ms, dp2 $c ms, dp2m $cm ms, dp2z $z ms, ddp2 $d ms, pp1 $e ms, pp2 $f ms, half1 $h ms, ind2 $i ms (load $(cut -d' ' -f1 /proc/loadavg))"
  dp1="$dp1 $a"; dp2="$dp2 $c"; dp2m="$dp2m $cm"; dp2z="$dp2z $z"; ddp2="$ddp2 $d"; pp1="$pp1 $e"; pp2="$pp2 $f"; half1="$half1 $h"; ind2="$ind2 $i"
done
median() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m1=$(median $dp1); m2=$(median $dp2); m3=$(median $ddp2); m4=$(median $pp1); m5=$(median $pp2); m6=$(median $dp2z)
m7=$(median $half1); m8=$(median $ind2); m9=$(median $dp2m)
echo "mlp 784-1024-1024-10, batch 256, AdamW, 1 thread per process/stage, medians of $rounds rounds x $steps steps"
echo "cpu: $(sed -n 's/^model name\t: //p' /proc/cpuinfo | head -1), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v a="$m1" -v c="$m2" -v d="$m3" -v e="$m4" -v f="$m5" -v z="$m6" -v h="$m7" -v i="$m8" -v cm="$m9" 'BEGIN {
  printf "  dp1  baton, 1 process          %8.2f ms  %8.0f samples/s\n", a, 256000 / a;
  printf "  dp2  baton, mpirun --dp 2      %8.2f ms  %8.0f samples/s\n", c, 256000 / c;
  printf "  dp2m the same, BATON_DP_REDUCE=mpi %6.2f ms  %8.0f samples/s\n", cm, 256000 / cm;
  printf "  dp2z baton, --dp 2, zero: 1    %8.2f ms  %8.0f samples/s\n", z, 256000 / z;
  printf "  ddp2 PyTorch DDP gloo, 2 proc  %8.2f ms  %8.0f samples/s\n", d, 256000 / d;
  printf "  pp1  baton, 2 stages, 1 proc   %8.2f ms  %8.0f samples/s\n", e, 256000 / e;
  printf "  pp2  baton, 2 stages, 2 ranks  %8.2f ms  %8.0f samples/s\n", f, 256000 / f;
  printf "  half1 baton, batch 128, alone   %8.2f ms  (dp1 / half1: %.2fx: the GEMMs at 128 rows)\n", h, a / h;
  printf "  ind2 2 independent, batch 128  %8.2f ms  (dp1 / ind2: %.2fx: compute-only scaling, the bound of dp2 / dp1)\n", i, a / i;
  printf "  dp2 / dp1: %.2fx   dp2m / dp1: %.2fx   dp2 / dp2m: %.2fx   dp2 / ddp2: %.2fx   dp2z / dp1: %.2fx   pp2 / pp1: %.2f\n", a / c, a / cm, cm / c, d / c, a / z, e / f }'
