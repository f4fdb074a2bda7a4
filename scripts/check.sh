#!/usr/bin/env bash
# check.sh: the whole test suite from a fresh clone, exactly as CI runs it: installs the Debian
# packages, builds baton out of tree in build/, runs `make check` (CUnit programs; GPU tests skip
# with exit 77 where no GPU exists), and ends with one line: "N passed, N failed, N skipped",
# counting CUnit test cases (a skipped program counts once). Exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc 2>/dev/null || echo 2)

if [ "${BATON_SKIP_DEPS:-0}" != 1 ]; then
  bash scripts/install-deps.sh || { echo "dependency installation failed"; echo "0 passed, 1 failed"; exit 1; }
fi
./autogen.sh >/dev/null 2>&1 || { echo "autogen failed"; autoreconf -fi; echo "0 passed, 1 failed"; exit 1; }
mkdir -p build && cd build
"$root/configure" --enable-silent-rules >configure.out 2>&1 || { cat configure.out; echo "0 passed, 1 failed"; exit 1; }
grep -A12 'configured' configure.out || true
make -j"$jobs" >make.out 2>&1 || { tail -50 make.out; echo "0 passed, 1 failed"; exit 1; }
make -j"$jobs" check >check.out 2>&1
check_rc=$?
grep -E '^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):|^# ' check.out || true

passed=0; failed=0; skipped=0
for trs in tests/*.trs; do
  [ -f "$trs" ] || continue
  log="${trs%.trs}.log"
  result=$(sed -n 's/^:test-result: //p' "$trs" | head -n1)
  line=$(grep -E '^[a-z_0-9]+: [0-9]+ tests, [0-9]+ failed' "$log" 2>/dev/null | tail -n1)
  if [ "$result" = SKIP ]; then
    skipped=$((skipped + 1)); continue
  fi
  if [ -n "$line" ]; then
    n=$(echo "$line" | sed -E 's/.*: ([0-9]+) tests, ([0-9]+) failed.*/\1/')
    f=$(echo "$line" | sed -E 's/.*: ([0-9]+) tests, ([0-9]+) failed.*/\2/')
    passed=$((passed + n - f)); failed=$((failed + f))
    if [ "$result" != PASS ] && [ "$f" = 0 ]; then failed=$((failed + 1)); fi
  elif [ "$result" = PASS ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
  if [ "$result" != PASS ]; then echo "---- $log"; tail -40 "$log"; fi
done
if [ $check_rc -ne 0 ] && [ $failed -eq 0 ]; then tail -30 check.out; failed=1; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ] && [ $check_rc -eq 0 ]
