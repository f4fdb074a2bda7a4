#!/bin/sh
# tests/cpu_isa_qemu.sh: the CPU tests on an AVX2-only CPU, whatever CPU runs the suite. qemu's
# user-mode emulator (Debian's qemu-user) runs the test programs as an AMD EPYC Milan (family 25
# model 1: AVX2 and FMA, no AVX-512; the AVX2-only machine this project has met), so everything
# that asks the CPU sees that CPU: the compiler's clones (BT_VCLONES, chosen by cpuid at load),
# oneDNN's ISA and cache sizes, OpenBLAS's kernels and baton's own dispatch (core/cpu_isa.c).
# BATON_CPU_ISA=avx2 (the asan job) caps baton's, oneDNN's and OpenBLAS's run-time choices; this
# also reaches the clones, which no variable can.
# The programs whose code dispatches by CPU (kernels, rounding, the optimizer, oneDNN's GEMMs and
# convolutions, attention), and test_engine for a whole training step. Left out: test_train (it
# forks a child from a threaded process, which qemu-user 7.2 cannot do: qemu itself asserts),
# test_profile (two minutes emulated; its kernels are the ones test_ops checks), the I/O and
# scheduling programs (no CPU-dependent path), test_cpu_bf16 (it reads the host's /proc/cpuinfo, which qemu does not emulate; the
# cap runs it in tests/cpu_bf16_paths.sh), the CUDA tests, and the shell tests (the baton
# command's paths are the library's). Not under the sanitizers: their shadow memory and qemu's
# address space do not mix (ASAN_OPTIONS or TSAN_OPTIONS set: skipped, exit 77, saying so).
# On an x86-64 host qemu-x86_64 must exist (scripts/install-deps.sh installs qemu-user): its absence
# is a failure, not a skip. Prints "cpu_isa_qemu: N tests, N failed" like the CUnit programs.
set -u
builddir=${BT_BUILDDIR:-.}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
model=EPYC-Milan-v1
if [ "$(uname -m)" != x86_64 ]; then echo "cpu_isa_qemu: not an x86-64 host: nothing to emulate"; exit 77; fi
if [ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]; then
  echo "cpu_isa_qemu: a sanitizer build: qemu-user cannot run its programs (the tests job runs this)"
  exit 77
fi
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  echo "cpu_isa_qemu: qemu-x86_64 not found (Debian's qemu-user; scripts/install-deps.sh installs it)"
  echo "cpu_isa_qemu: 1 tests, 1 failed"
  exit 1
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# the emulated CPU really lacks AVX-512 and has AVX2 (a plain program asks cpuid, as the clones do)
cat >"$tmp/isa.c" <<'EOF'
#include <stdio.h>
int main(void)
{
    __builtin_cpu_init();
    printf("avx2=%d fma=%d avx512f=%d\n", !!__builtin_cpu_supports("avx2"),
           !!__builtin_cpu_supports("fma"), !!__builtin_cpu_supports("avx512f"));
    return 0;
}
EOF
tests=1; failed=0
if ${CC:-cc} -O1 -o "$tmp/isa" "$tmp/isa.c" 2>"$tmp/cc.err"; then
  seen=$(qemu-x86_64 -cpu "$model" "$tmp/isa" 2>/dev/null)
  if [ "$seen" = "avx2=1 fma=1 avx512f=0" ]; then
    echo "PASS: qemu's $model: $seen"
  else
    echo "FAIL: qemu's $model shows '$seen', expected AVX2 and FMA without AVX-512"; failed=1
  fi
else
  echo "FAIL: cannot compile the cpuid probe: $(cat "$tmp/cc.err")"; failed=1
fi

progs="test_ops test_optim test_precision test_conv test_fused test_mixed_precision test_bf16_store
test_round_skip test_gpt test_engine"
# two programs at a time (each emulated program is one busy core), reported in this order
run_one() {
  BT_SRCDIR=$srcdir BT_BUILDDIR=$builddir qemu-x86_64 -cpu "$model" "$builddir/tests/$1" \
    >"$tmp/$1.out" 2>&1
  echo $? >"$tmp/$1.rc"
}
running=0
for t in $progs; do
  [ -x "$builddir/tests/$t" ] || continue # not in this build (no CUnit)
  run_one "$t" &
  running=$((running + 1))
  if [ $running -ge 2 ]; then wait; running=0; fi
done
wait
for t in $progs; do
  [ -x "$builddir/tests/$t" ] || continue
  tests=$((tests + 1))
  rc=$(cat "$tmp/$t.rc" 2>/dev/null || echo "none")
  summary=$(grep -E '^[a-z_0-9]+: [0-9]+ tests, [0-9]+ failed' "$tmp/$t.out" | tail -n 1)
  if [ "$rc" = 0 ]; then
    echo "PASS: $t on $model: $summary"
  else
    failed=$((failed + 1))
    echo "FAIL: $t on $model exited $rc: $summary"
    grep -v '^qemu-x86_64: warning' "$tmp/$t.out" | grep -B2 -A4 -E 'FAILED|^ +[0-9]+\. |signal|Illegal' | head -40
  fi
done
echo "cpu_isa_qemu: $tests tests, $failed failed"
[ "$failed" = 0 ]
