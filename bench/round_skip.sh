#!/bin/sh
# bench/round_skip.sh: what skipping the exact mixed-precision roundings (BATON_ROUND_SKIP, op.h's
# lowp_exact; conv2d rounding its own output) saves on models/fashion-cnn.yaml under precision
# bf16 (batch 128, one stage, one micro-batch, --threads 2, synthetic data): ROUNDS rounds, each
# running, alternating (the machine is shared: load drifts), the same baton with the skip off (0:
# every value rounded by the worker; conv2d still rounds its own output too) and on (1), and, with
# BASE=BUILD_DIR, the baton built there (a build from before the skip: the peer), for `baton run
# --steps STEPS` (its median step) and `baton profile` (the forward and backward totals). Prints
# each setting's medians over the rounds and its ratio to the skip on. The settings give
# bit-identical results (tests/test_round_skip.c); this measures time only.
# Usage: [BASE=BUILD_DIR] bench/round_skip.sh BUILD_DIR [ROUNDS] [STEPS]
set -eu
build=${1:?usage: round_skip.sh BUILD_DIR [ROUNDS] [STEPS]}
rounds=${2:-5}; steps=${3:-30}
here=$(cd "$(dirname "$0")" && pwd); src=$(dirname "$here")
core=$(grep -q avx512f /proc/cpuinfo && echo SkylakeX || echo Haswell)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

settings="off on"
[ -n "${BASE:-}" ] && settings="base off on"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(grep -o 'amx_bf16\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for set in $settings; do
    case $set in
      base) baton=$BASE/baton; skip=1 ;;
      off) baton=$build/baton; skip=0 ;;
      on) baton=$build/baton; skip=1 ;;
    esac
    BATON_ROUND_SKIP=$skip OPENBLAS_CORETYPE=$core "$baton" run "$src/models/fashion-cnn.yaml" --synthetic \
      --stages 1 --partition params --microbatches 1 --threads 2 --steps "$steps" train.precision=bf16 \
      >"$tmp/run-$set.$r" 2>&1
    sed -n 's/^median step \([0-9.]*\) ms.*/\1/p' "$tmp/run-$set.$r" >>"$tmp/step-$set"
    BATON_ROUND_SKIP=$skip OPENBLAS_CORETYPE=$core "$baton" profile "$src/models/fashion-cnn.yaml" \
      --microbatches 1 --threads 2 train.precision=bf16 -o "$tmp/prof.json" >"$tmp/prof-$set.$r" 2>&1
    awk '$1 == "total" {print $2, $3}' "$tmp/prof-$set.$r" >>"$tmp/prof-$set"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
on_step=$(median <"$tmp/step-on"); on_fwd=$(cut -d' ' -f1 "$tmp/prof-on" | median); on_bwd=$(cut -d' ' -f2 "$tmp/prof-on" | median)
printf 'fashion-cnn bf16, %s rounds: medians (ratio to skip on)\n' "$rounds"
printf '%-10s %22s %22s %22s\n' setting "run: step ms" "profile: forward ms" "profile: backward ms"
for set in $settings; do
  step=$(median <"$tmp/step-$set"); fwd=$(cut -d' ' -f1 "$tmp/prof-$set" | median); bwd=$(cut -d' ' -f2 "$tmp/prof-$set" | median)
  printf '%-10s %22s %22s %22s\n' "$set" "$step ($(echo "$step $on_step" | awk '{printf "%.3f", $1 / $2}'))" \
    "$fwd ($(echo "$fwd $on_fwd" | awk '{printf "%.3f", $1 / $2}'))" "$bwd ($(echo "$bwd $on_bwd" | awk '{printf "%.3f", $1 / $2}'))"
done
for set in $settings; do echo "run step ms per round, $set: $(tr '\n' ' ' <"$tmp/step-$set")"; done
