#!/bin/sh
# bench/round_skip.sh: what skipping the exact mixed-precision roundings (BATON_ROUND_SKIP, op.h's
# lowp_exact) saves on models/fashion-cnn.yaml under precision bf16 (batch 128, one stage, one
# micro-batch, --threads 2, synthetic data): ROUNDS rounds, each running the same baton with the
# skip off (0, every value rounded: the peer) and on (1), alternating (the machine is shared: load
# drifts), for `baton run --steps STEPS` (its median step) and `baton profile` (the forward and
# backward totals). Prints each setting's medians over the rounds and the ratio off / on. Both
# settings give bit-identical results (tests/test_round_skip.c); this measures time only.
# Usage: bench/round_skip.sh BUILD_DIR [ROUNDS] [STEPS]
set -eu
build=${1:?usage: round_skip.sh BUILD_DIR [ROUNDS] [STEPS]}
rounds=${2:-5}; steps=${3:-30}
here=$(cd "$(dirname "$0")" && pwd); src=$(dirname "$here")
baton=$build/baton
core=$(grep -q avx512f /proc/cpuinfo && echo SkylakeX || echo Haswell)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(grep -o 'amx_bf16\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for skip in 0 1; do
    BATON_ROUND_SKIP=$skip OPENBLAS_CORETYPE=$core "$baton" run "$src/models/fashion-cnn.yaml" --synthetic \
      --stages 1 --partition params --microbatches 1 --threads 2 --steps "$steps" train.precision=bf16 \
      >"$tmp/run$skip.$r" 2>&1
    sed -n 's/^median step \([0-9.]*\) ms.*/\1/p' "$tmp/run$skip.$r" >>"$tmp/step$skip"
    BATON_ROUND_SKIP=$skip OPENBLAS_CORETYPE=$core "$baton" profile "$src/models/fashion-cnn.yaml" \
      --microbatches 1 --threads 2 train.precision=bf16 -o "$tmp/prof.json" >"$tmp/prof$skip.$r" 2>&1
    awk '$1 == "total" {print $2, $3}' "$tmp/prof$skip.$r" >>"$tmp/prof$skip"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for skip in 0 1; do
  eval "step$skip=\$(median <\"\$tmp/step$skip\")"
  eval "fwd$skip=\$(cut -d' ' -f1 \"\$tmp/prof$skip\" | median)"
  eval "bwd$skip=\$(cut -d' ' -f2 \"\$tmp/prof$skip\" | median)"
done
printf '%-28s %12s %12s %8s\n' "fashion-cnn bf16, $rounds rounds" "skip off" "skip on" "off/on"
printf '%-28s %12s %12s %8s\n' "run: median step ms" "$step0" "$step1" "$(echo "$step0 $step1" | awk '{printf "%.3f", $1 / $2}')"
printf '%-28s %12s %12s %8s\n' "profile: forward ms" "$fwd0" "$fwd1" "$(echo "$fwd0 $fwd1" | awk '{printf "%.3f", $1 / $2}')"
printf '%-28s %12s %12s %8s\n' "profile: backward ms" "$bwd0" "$bwd1" "$(echo "$bwd0 $bwd1" | awk '{printf "%.3f", $1 / $2}')"
echo "per round (run ms, off then on):"
paste "$tmp/step0" "$tmp/step1" | tr '\n' ';'; echo
