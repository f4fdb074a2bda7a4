#!/bin/sh
# bench/compare_fused.sh: a layer's `act: relu` fused into linear/conv2d (the default) against the
# same model with every such relu as a layer of its own (the unfused graph: a second node and
# activation buffer per layer), alternating, ROUNDS times; medians of `baton run`'s median step.
# Same numbers bit for bit (tests/test_fused); this measures the pass and the buffer saved.
# Usage: bench/compare_fused.sh BUILD_DIR [ROUNDS] [STEPS] [THREADS] [PRECISION]
set -eu
build=${1:?usage: compare_fused.sh BUILD_DIR [ROUNDS] [STEPS] [THREADS] [PRECISION]}
rounds=${2:-5}; steps=${3:-20}; threads=${4:-1}; prec=${5:-f32}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for m in mlp cnn; do
  cp "$here/../models/fashion-$m.yaml" "$tmp/$m-fused.yaml"
  sed 's/^\(  - {name: \([a-z0-9_]*\),.*\), act: relu}\(.*\)$/\1}\n  - {name: \2_relu, op: relu}/' \
    "$here/../models/fashion-$m.yaml" >"$tmp/$m-unfused.yaml"
  grep -q '_relu, op: relu' "$tmp/$m-unfused.yaml" || { echo "compare_fused: no relu split in $m"; exit 1; }
done
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
run() { # yaml -> "median_step_ms activation_MiB"
  "$build/baton" run "$1" --synthetic --stages 1 --partition params --microbatches 1 \
    --threads "$threads" --steps "$steps" train.precision="$prec" 2>&1 |
    awk '/^median step/ {ms = $3} /activations/ && !act {for (i = 1; i <= NF; i++) if ($i ~ /activations/) act = $(i + 1)} END {print ms, act}'
}
out="$tmp/out"
for r in $(seq "$rounds"); do
  for m in mlp cnn; do
    for v in fused unfused; do
      res=$(run "$tmp/$m-$v.yaml"); echo "$m $v $res" >>"$out"
      echo "round $r $m $v: $res"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for m in mlp cnn; do
  f=$(awk -v m=$m '$1 == m && $2 == "fused" {print $3}' "$out" | median)
  u=$(awk -v m=$m '$1 == m && $2 == "unfused" {print $3}' "$out" | median)
  awk -v m=$m -v f="$f" -v u="$u" -v p="$prec" -v t="$threads" 'BEGIN {
    printf "  %s %s, %d thread(s): fused %.2f ms, unfused %.2f ms: unfused/fused %.3fx\n", m, p, t, f, u, u / f }'
done
