#!/bin/sh
# tests/cpu_bf16_paths.sh: runs tests/test_cpu_bf16 once per bf16 path baton can be forced onto
# (BATON_CPU_BF16=f32, avx512_bf16, amx), and once with f32 GEMMs on OpenBLAS (BATON_CPU_F32): the paths this CPU has must pass against the f32
# reference, the ones it lacks must be refused with a message naming BATON_CPU_BF16 (the test
# checks both). `baton devices` and `baton run` must say which path runs, and `baton run` with an
# unknown value must fail naming it, never run anyway.
set -eu
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
for path in f32 avx512_bf16 amx; do
  echo "== BATON_CPU_BF16=$path"
  BATON_CPU_BF16=$path "$builddir/tests/test_cpu_bf16"
done
echo "== BATON_CPU_F32=openblas"
BATON_CPU_F32=openblas "$builddir/tests/test_cpu_bf16"
BATON_CPU_F32=openblas "$builddir/tests/test_watchdog" # the OpenBLAS path's one-count rule
out=$(BATON_CPU_F32=bogus "$builddir/baton" run "$srcdir/models/fashion-mlp.yaml" --synthetic \
  --steps 1 2>&1) && { echo "BATON_CPU_F32=bogus was accepted:"; echo "$out"; exit 1; }
echo "$out" | grep -q 'BATON_CPU_F32=bogus' || { echo "the refusal does not name BATON_CPU_F32:"; echo "$out"; exit 1; }
echo "BATON_CPU_F32=bogus refused: $out"
out=$(BATON_CPU_BF16=bogus "$builddir/baton" run "$srcdir/models/fashion-mlp.yaml" --synthetic \
  --steps 1 train.precision=bf16 2>&1) && { echo "BATON_CPU_BF16=bogus was accepted:"; echo "$out"; exit 1; }
echo "$out" | grep -q 'BATON_CPU_BF16=bogus' || { echo "the refusal does not name BATON_CPU_BF16:"; echo "$out"; exit 1; }
echo "BATON_CPU_BF16=bogus refused: $out"
BATON_CPU_BF16=f32 "$builddir/baton" devices | grep -q 'precision bf16: .*forced by BATON_CPU_BF16=f32' ||
  { echo "baton devices does not show the forced f32 path:"; BATON_CPU_BF16=f32 "$builddir/baton" devices; exit 1; }
out=$(BATON_CPU_BF16=f32 "$builddir/baton" run "$srcdir/models/fashion-mlp.yaml" --synthetic --steps 1 \
  train.precision=bf16 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -q '^  bf16 on cpu .*forced by BATON_CPU_BF16=f32' ||
  { echo "baton run does not say which bf16 path its CPU stages use:"; echo "$out"; exit 1; }
echo "baton devices and baton run name the path"
# BATON_CPU_ISA=avx2 (core/cpu_isa.c): the paths of an AVX2-only CPU on any CPU that has AVX2. The
# bf16 test again under it (oneDNN limited to AVX2: bf16 on the f32 path, as on such a CPU), with
# OpenBLAS's Haswell kernels too (pipelined = one stage at equal threads per stage; 1 thread and 2
# within rounding there); `baton devices` says the kernels are capped; an unknown value is refused.
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  echo "== BATON_CPU_ISA=avx2"
  BATON_CPU_ISA=avx2 "$builddir/tests/test_cpu_bf16"
  echo "== BATON_CPU_ISA=avx2 BATON_CPU_F32=openblas"
  BATON_CPU_ISA=avx2 BATON_CPU_F32=openblas "$builddir/tests/test_cpu_bf16"
  out=$(BATON_CPU_ISA=avx2 "$builddir/baton" devices 2>&1) || { echo "$out"; exit 1; }
  if grep -qw avx512f /proc/cpuinfo; then
    echo "$out" | grep -q 'kernels: AVX2+FMA (capped by BATON_CPU_ISA=avx2' ||
      { echo "baton devices does not show the cap:"; echo "$out"; exit 1; }
    echo "$out" | grep -q 'BLAS: OpenBLAS (Haswell' ||
      { echo "the cap did not reach OpenBLAS:"; echo "$out"; exit 1; }
  fi
fi
out=$(BATON_CPU_ISA=bogus "$builddir/baton" run "$srcdir/models/fashion-mlp.yaml" --synthetic \
  --steps 1 2>&1) && { echo "BATON_CPU_ISA=bogus was accepted:"; echo "$out"; exit 1; }
echo "$out" | grep -q 'BATON_CPU_ISA=bogus' || { echo "the refusal does not name BATON_CPU_ISA:"; echo "$out"; exit 1; }
echo "BATON_CPU_ISA=bogus refused: $out"
