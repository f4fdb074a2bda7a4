#!/bin/sh
# tests/require_gpu.sh: a GPU test may skip (exit 77) only where no GPU is wanted. Where
# tests/test_cuda and tests/test_cuda_engine skip, the same programs with BT_REQUIRE_GPU=1 (what
# scripts/gpu-check.sh sets on a GPU machine) must fail (exit 1) and say why, so a broken driver
# there can never pass as a skip. Where they run (a GPU, or the emulator), there is nothing to check.
# Prints "require_gpu: N tests, N failed" like the CUnit programs.
builddir=${BT_BUILDDIR:-.}
tests=0; failed=0
for t in test_cuda test_cuda_engine; do
  prog="$builddir/tests/$t"
  if [ ! -x "$prog" ]; then echo "require_gpu: $t not built (no CUDA in this build): nothing to check"; continue; fi
  BT_REQUIRE_GPU= "$prog" >/dev/null 2>&1
  rc=$?
  [ "$rc" = 77 ] || { echo "require_gpu: $t ran (exit $rc): a GPU or the emulator is here"; continue; }
  tests=$((tests + 1))
  out=$(BT_REQUIRE_GPU=1 "$prog" 2>&1)
  rc=$?
  if [ "$rc" != 1 ]; then
    echo "FAIL: $t with BT_REQUIRE_GPU=1 exited $rc, expected 1 (a skip must become a failure)"; failed=$((failed + 1))
  elif ! printf '%s' "$out" | grep -q "BT_REQUIRE_GPU"; then
    echo "FAIL: $t with BT_REQUIRE_GPU=1 does not say why it failed: $out"; failed=$((failed + 1))
  fi
  tests=$((tests + 1))
  BT_REQUIRE_GPU=0 "$prog" >/dev/null 2>&1
  rc=$?
  [ "$rc" = 77 ] || { echo "FAIL: $t with BT_REQUIRE_GPU=0 exited $rc, expected the skip (77)"; failed=$((failed + 1)); }
done
echo "require_gpu: $tests tests, $failed failed"
[ "$failed" = 0 ]
