#!/bin/sh
# bench/compare_schedules.sh: bench_schedules (1F1B, interleaved 1F1B v2, ZB-H1 and ZBV on cpu:0 +
# cpu:1, measured against the simulator) alternated with the PyTorch peer training the same model
# in one process (bench/torch_deep.py at 1 and 2 threads, its best kept), ROUNDS times; prints each
# round's lines, then per schedule the medians of the measured step, the simulator's prediction
# (with the turn hand-off `baton profile` measures), their ratio (target: within 10%), the
# prediction with the hand-off gap the schedule's own trace showed instead, the measured and predicted
# bubble, and the throughput against PyTorch's best; the load before and after.
# Usage: bench/compare_schedules.sh BUILD_DIR [ROUNDS] [STEPS]
# Needs Debian's python3-torch (/usr/bin/python3).
set -eu
build=${1:?usage: compare_schedules.sh BUILD_DIR [ROUNDS] [STEPS]}
rounds=${2:-3}; steps=${3:-5}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
$python -c 'import torch' 2>/dev/null || { echo "compare_schedules: python3-torch is not installed"; exit 2; }
make -s -C "$build" bench/bench_schedules >/dev/null
core=$(env -u OPENBLAS_CORETYPE "$build/bench/bench_cpu" mlp --steps 1 --threads 1 2>/dev/null |
  sed -n 's/^blas: OpenBLAS (\([A-Za-z0-9]*\) kernels.*/\1/p' || true)
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); cores: $(nproc)"
f1=""; fi=""; fz=""; tb=""; rows=""
for r in $(seq "$rounds"); do
  out=$("$build/bench/bench_schedules" --steps "$steps" --rounds 1)
  [ "$r" = 1 ] && echo "$out" | head -1
  a=$(echo "$out" | sed -n 's/^result schedule=1f1b measured_ms=\([0-9.]*\).*/\1/p')
  b=$(echo "$out" | sed -n 's/^result schedule=interleaved-1f1b measured_ms=\([0-9.]*\).*/\1/p')
  c=$(echo "$out" | sed -n 's/^result schedule=zb-h1 measured_ms=\([0-9.]*\).*/\1/p')
  echo "$out" | grep -E '^result|^load:|^(interleaved|zbv) trace:' | sed "s/^/round $r: /"
  rows="$rows
$(echo "$out" | grep '^result')"
  best=""
  for t in 1 2; do
    ms=$(OPENBLAS_CORETYPE=${core:-SkylakeX} OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
      $python "$here/torch_deep.py" "$steps" "$t" | awk '{print $2}')
    echo "round $r: pytorch $t thread(s) $ms ms"
    best=$(awk -v a="$best" -v b="$ms" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }')
  done
  f1="$f1 $a"; fi="$fi $b"; fz="$fz $c"; tb="$tb $best"
done
median() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
t=$(median $tb)
echo "medians of $rounds rounds x $steps steps (load after: $(cut -d' ' -f1-3 /proc/loadavg)):"
field() { # schedule key -> the values of key= over the rounds
  echo "$rows" | grep "schedule=$1 " | sed -n "s/.* $2=\([0-9.e+-]*\).*/\1/p" | tr '\n' ' '
}
printf '  %-18s %11s %11s %9s %11s %9s %9s %9s %14s\n' schedule "measured" "predicted" "meas/pred" "pred(gap)" \
  "bubble" "pred bub" "pytorch" "baton/pytorch"
for n in 1f1b interleaved-1f1b zb-h1 zbv; do
  b=$(median $(field $n measured_ms)); pr=$(median $(field $n predicted_ms)); pg=$(median $(field $n predicted_gap_ms))
  mb=$(median $(field $n measured_bubble)); pb=$(median $(field $n predicted_bubble))
  awk -v n="$n" -v b="$b" -v pr="$pr" -v pg="$pg" -v mb="$mb" -v pb="$pb" -v t="$t" 'BEGIN {
    printf "  %-18s %8.2f ms %8.2f ms %9.3f %8.2f ms %8.1f%% %8.1f%% %6.2f ms %13.2fx%s\n", n, b, pr, b / pr, pg,
      100 * mb, 100 * pb, t, t / b, (b / pr > 1.1 || b / pr < 0.9) ? "  (outside 10%)" : "" }'
done
echo "  hand-off priced in 'predicted' (bt_profile_measure_handoff, each round): $(field 1f1b handoff_ms)ms"
