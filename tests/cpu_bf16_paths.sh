#!/bin/sh
# tests/cpu_bf16_paths.sh: runs tests/test_cpu_bf16 once per bf16 path baton can be forced onto
# (BATON_CPU_BF16=f32, avx512_bf16, amx): the paths this CPU has must pass against the f32
# reference, the ones it lacks must be refused with a message naming BATON_CPU_BF16 (the test
# checks both). Then `baton run` with an unknown value must fail naming it, never run anyway.
set -eu
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
for path in f32 avx512_bf16 amx; do
  echo "== BATON_CPU_BF16=$path"
  BATON_CPU_BF16=$path "$builddir/tests/test_cpu_bf16"
done
out=$(BATON_CPU_BF16=bogus "$builddir/baton" run "$srcdir/models/fashion-mlp.yaml" --synthetic \
  --steps 1 train.precision=bf16 2>&1) && { echo "BATON_CPU_BF16=bogus was accepted:"; echo "$out"; exit 1; }
echo "$out" | grep -q 'BATON_CPU_BF16=bogus' || { echo "the refusal does not name BATON_CPU_BF16:"; echo "$out"; exit 1; }
echo "BATON_CPU_BF16=bogus refused: $out"
