#!/usr/bin/env bash
# check.sh: the whole test suite from a fresh clone, exactly as CI runs it: installs the Debian
# packages, then runs four jobs (docs/testing.md), each timed:
#   tests  build/ (configure, make, make check: CUnit programs and scripts; GPU tests skip with
#          exit 77 where no GPU exists)
#   asan   build-asan/: the whole `make check` again under AddressSanitizer + UndefinedBehavior-
#          Sanitizer (CPU only, -O1; every sanitizer report fails the job), with BATON_CPU_ISA=avx2
#          where the CPU has AVX2 and FMA: every run-time dispatch (oneDNN, OpenBLAS, baton's own
#          kernels) on an AVX2-only CPU's paths, so an AVX-512 machine's CI runs what an AVX2 one
#          would (the tests job runs the CPU's own paths; the sanitizer builds also run the
#          compiler clones' baseline copies)
#   tsan   build-tsan/: the executor tests under ThreadSanitizer (any report fails the job)
#   fuzz   `make -C build fuzz`: each libFuzzer harness for BATON_FUZZ_TIME seconds (default 15)
#   emu    build-emu/ (--enable-cuda-emulator, docs/gpu.md): the emulator's self-tests, test_cuda
#          and test_cuda_engine on the CPU emulator of the CUDA execution model (synchronous), then
#          test_cuda_engine again asynchronously with two pretend GPUs and random delays,
#          test_cuda in reverse and random thread order, and tests/dist_gpu.sh (GPU stages across
#          processes under mpirun, asynchronously); none of them may skip
#   emu_asan  build-emu-asan/: the emulator's self-test, test_cuda and test_cuda_engine (sync)
#          under AddressSanitizer + UndefinedBehaviorSanitizer (slower; not in the default list)
# and ends with one line, "N passed, N failed, N skipped", over all jobs: CUnit test cases (a
# skipped program counts once), one per fuzz harness, one per sanitizer report (failed).
# BATON_CHECK_QUICK=1 runs the tests job alone (for developers), BATON_CHECK_JOBS="asan fuzz"
# the jobs named; CI runs everything. Exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc 2>/dev/null || echo 2)
# make check runs one test more than the cores: the suite's tests spend much of their time
# waiting (mpirun's start-up, ranks on each other, timers), so the cores would otherwise idle
check_jobs=$((jobs + 1))
passed=0; failed=0; skipped=0
times=""

finish() {
  [ -n "$times" ] && printf 'job times:%b\n' "$times"
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
  exit
}

# Adds up the CUnit results of the .trs/.log files in $1/tests (a program without a CUnit
# summary line counts as one test); prints the log of anything that did not pass.
count_tests() {
  local dir=$1 trs log result line n f
  for trs in "$dir"/tests/*.trs; do
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
}

# Every file in $1 is one sanitizer report (log_path=$1/<tool>, one file per process): each
# counts as a failure and is printed.
count_reports() {
  local r
  for r in "$1"/*; do
    [ -f "$r" ] || continue
    failed=$((failed + 1))
    echo "---- sanitizer report $r"
    head -n 60 "$r"
  done
}

# No job's test run may hang CI: each make check is stopped after this many seconds (a hung test
# then counts as a failure, with the partial log shown).
check_limit=${BATON_CHECK_LIMIT:-900}

# configure_build DIR CONFIGURE-ARGS...: (re)configures an out-of-tree build in DIR; on failure
# prints its output and returns 1 (the caller counts the failure).
configure_build() {
  local dir=$1; shift
  mkdir -p "$dir" && (cd "$dir" && "$root/configure" --enable-silent-rules "$@" >configure.out 2>&1) ||
    { cat "$dir/configure.out"; return 1; }
}

# run_job NAME FUNCTION: runs a job and records its wall time and counts.
run_job() {
  local name=$1 start p0=$passed f0=$failed s0=$skipped
  start=$(date +%s)
  echo "==== job $name"
  "$2"
  local took=$(( $(date +%s) - start ))
  times="$times\n  $name: ${took}s, $((passed - p0)) passed, $((failed - f0)) failed, $((skipped - s0)) skipped"
  echo "==== job $name: ${took}s"
}

# ---- builds: each job's build is a function build_<job> that returns non-zero (having printed
# why) on failure. A build can start ahead, in the background and at low priority, while an earlier
# job's tests run: those leave much of the two cores idle (processes waiting on mpirun's start-up,
# on each other and on timers), so the later build fills that time instead of following it. The
# job then waits for it. BATON_CHECK_AHEAD=0 builds each job in turn, when it starts.
ahead=${BATON_CHECK_AHEAD:-1}
ahead_dir=$(mktemp -d)
trap 'rm -rf "$ahead_dir"' EXIT
declare -A ahead_pid=()

# start_ahead JOB: starts build_JOB in the background if JOB is selected and ahead is on.
start_ahead() {
  local job=$1
  [ "$ahead" = 1 ] || return 0
  case " $selected " in *" $job "*) ;; *) return 0 ;; esac
  [ -z "${ahead_pid[$job]:-}" ] || return 0
  # a subshell running the function, its priority lowered (its compilers inherit it)
  ( renice -n 10 -p "$BASHPID" >/dev/null 2>&1; "build_$job" ) >"$ahead_dir/$job.log" 2>&1 &
  ahead_pid[$job]=$!
  echo "check.sh: the $job build started ahead (in the background)"
}

# need_build JOB: JOB's build, waited for if it started ahead, else run now; counts a failure.
need_build() {
  local job=$1 rc
  if [ -n "${ahead_pid[$job]:-}" ]; then
    wait "${ahead_pid[$job]}"; rc=$?
    cat "$ahead_dir/$job.log"
  else
    "build_$job"; rc=$?
  fi
  [ $rc -eq 0 ] || failed=$((failed + 1))
  return $rc
}

build_tests() {
  configure_build build || return 1
  grep -A13 'configured' build/configure.out || true
  make -C build -j"$jobs" >build/make.out 2>&1 || { tail -50 build/make.out; return 1; }
}

job_tests() {
  need_build tests || return
  start_ahead asan # while the tests run (below)
  rm -f build/tests/*.trs build/tests/*.log
  timeout "$check_limit" make -C build -j"$check_jobs" check >build/check.out 2>&1
  local rc=$? f0=$failed
  grep -E '^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):|^# ' build/check.out || true
  count_tests build
  if [ $rc -ne 0 ] && [ $failed -eq "$f0" ]; then tail -30 build/check.out; failed=$((failed + 1)); fi
}

# The CUDA tests under the emulator: each run is one automake test run (TESTS=...), so a skip
# (exit 77) shows as SKIP; here a skip is a failure, since the emulator always has a device.
EMU_RUNS="sync:tests/test_cuda_emu sync:tests/test_cuda_emu_rt sync:tests/test_cuda sync:tests/test_cuda_engine
async:tests/test_cuda_engine reverse:tests/test_cuda random:tests/test_cuda async:tests/dist_gpu.sh
sync:tests/test_round_skip"
# one line: it is passed whole as make's check_PROGRAMS, where a newline breaks the target list
EMU_PROGRAMS="tests/test_cuda_emu tests/test_cuda_emu_rt tests/test_cuda tests/test_cuda_engine tests/test_cuda_build tests/test_round_skip"

build_emu() {
  configure_build build-emu --enable-cuda-emulator --without-protobuf-c --disable-shared || return 1
  # shellcheck disable=SC2086
  make -C build-emu -j"$jobs" $EMU_PROGRAMS baton >build-emu/make.out 2>&1 ||
    { tail -50 build-emu/make.out; return 1; }
}

job_emu() {
  need_build emu || return
  start_ahead tsan # while the emulator runs (mostly one busy core)
  start_ahead fuzz
  local run mode prog env rc f0=$failed
  for run in $EMU_RUNS; do
    mode=${run%%:*}; prog=${run#*:}
    case $mode in
      sync) env="BT_EMU_MODE=sync" ;;
      async) env="BT_EMU_MODE=async BT_EMU_GPUS=2 BT_EMU_SEED=11" ;;
      *) env="BT_EMU_MODE=sync BT_EMU_ORDER=$mode BT_EMU_SEED=7" ;;
    esac
    rm -f build-emu/tests/*.trs build-emu/tests/*.log
    # shellcheck disable=SC2086
    env $env make -C build-emu check TESTS="$prog" check_PROGRAMS="$EMU_PROGRAMS" \
      >build-emu/check-$mode.out 2>&1
    rc=$?
    echo "emu $env: $(grep -E '^(PASS|FAIL|SKIP|ERROR):' build-emu/check-$mode.out | tr '\n' ' ')"
    if grep -q '^SKIP:' build-emu/check-$mode.out; then
      echo "emulator run of $prog skipped: the emulator always has a device"
      tail -20 build-emu/"$prog".log; failed=$((failed + 1)); continue
    fi
    count_tests build-emu
    if [ $rc -ne 0 ] && [ $failed -eq "$f0" ]; then tail -30 build-emu/check-$mode.out; failed=$((failed + 1)); fi
  done
}

build_emu_asan() {
  local san='-fsanitize=address,undefined -fno-sanitize-recover=all'
  configure_build build-emu-asan --enable-cuda-emulator --without-protobuf-c --disable-shared \
    CFLAGS="$san -g -O1" CXXFLAGS="$san -g -O1" LDFLAGS="$san" || return 1
  # shellcheck disable=SC2086
  make -C build-emu-asan -j"$jobs" $EMU_PROGRAMS >build-emu-asan/make.out 2>&1 ||
    { tail -50 build-emu-asan/make.out; return 1; }
}

job_emu_asan() {
  local r
  need_build emu_asan || return
  rm -f build-emu-asan/tests/*.trs build-emu-asan/tests/*.log
  (san_env "$root/build-emu-asan/sanitizer-reports" && BT_EMU_MODE=sync make -C build-emu-asan check \
    TESTS="tests/test_cuda_emu tests/test_cuda tests/test_cuda_engine" check_PROGRAMS="$EMU_PROGRAMS" \
    >build-emu-asan/check.out 2>&1)
  local rc=$? f0=$failed
  grep -E '^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):' build-emu-asan/check.out || true
  if grep -q '^SKIP:' build-emu-asan/check.out; then echo "an emulator run skipped"; failed=$((failed + 1)); fi
  # ASan's one-line notice that it sees swapcontext (the emulator's fibers, annotated) is no report
  for r in build-emu-asan/sanitizer-reports/*; do
    [ -f "$r" ] || continue
    grep -qv "doesn't fully support makecontext/swapcontext" "$r" || rm -f "$r"
  done
  count_tests build-emu-asan
  count_reports build-emu-asan/sanitizer-reports
  if [ $rc -ne 0 ] && [ $failed -eq "$f0" ]; then tail -30 build-emu-asan/check.out; failed=$((failed + 1)); fi
}

# Sanitizer runtime options: reports go to files (so a report is seen even where a test discards
# a child's stderr, and even where the test expected a non-zero exit), and the first one aborts.
san_env() {
  local reports=$1
  rm -rf "$reports" && mkdir -p "$reports"
  export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:abort_on_error=1:strict_string_checks=1"
  export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
  # test_train forks a child that starts threads (a crash mid-checkpoint): allowed, and harmless here
  export TSAN_OPTIONS="log_path=$reports/tsan:halt_on_error=0:die_after_fork=0:second_deadlock_stack=1"
}

build_asan() {
  local san='-fsanitize=address,undefined -fno-sanitize-recover=all'
  configure_build build-asan --without-cuda CFLAGS="$san -g -O1" LDFLAGS="$san" || return 1
  # the test programs too, so that make check below only runs them
  make -C build-asan -j"$jobs" all >build-asan/make.out 2>&1 &&
    make -C build-asan -j"$jobs" check TESTS= >>build-asan/make.out 2>&1 ||
    { tail -50 build-asan/make.out; return 1; }
}

job_asan() {
  need_build asan || return
  rm -f build-asan/tests/*.trs build-asan/tests/*.log
  local isa=auto
  if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then isa=avx2; fi
  echo "asan: BATON_CPU_ISA=$isa ($(grep -qw avx512f /proc/cpuinfo && echo "this CPU has AVX-512" || echo "this CPU has no AVX-512"))"
  (san_env "$root/build-asan/sanitizer-reports" && export BATON_CPU_ISA=$isa &&
    timeout "$check_limit" make -C build-asan -j"$check_jobs" check >build-asan/check.out 2>&1)
  local rc=$? f0=$failed
  grep -E '^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):' build-asan/check.out || true
  count_tests build-asan
  count_reports build-asan/sanitizer-reports
  if [ $rc -ne 0 ] && [ $failed -eq "$f0" ]; then tail -30 build-asan/check.out; failed=$((failed + 1)); fi
}

# the executor's tests: worker threads, channels, transfers, the tracer's clocks, training
TSAN_TESTS="tests/test_engine tests/test_schedules tests/test_transfer tests/test_trace tests/test_mixed_precision tests/test_train tests/test_watchdog tests/test_gpt"

build_tsan() {
  configure_build build-tsan --without-cuda CFLAGS='-fsanitize=thread -g -O1' LDFLAGS='-fsanitize=thread' || return 1
  # shellcheck disable=SC2086
  make -C build-tsan -j"$jobs" $TSAN_TESTS >build-tsan/make.out 2>&1 ||
    { tail -50 build-tsan/make.out; return 1; }
}

job_tsan() {
  need_build tsan || return
  rm -f build-tsan/tests/*.trs build-tsan/tests/*.log
  (san_env "$root/build-tsan/sanitizer-reports" &&
    timeout "$check_limit" make -C build-tsan check TESTS="$TSAN_TESTS" check_PROGRAMS="$TSAN_TESTS" >build-tsan/check.out 2>&1)
  local rc=$? f0=$failed
  grep -E '^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):' build-tsan/check.out || true
  count_tests build-tsan
  count_reports build-tsan/sanitizer-reports
  if [ $rc -ne 0 ] && [ $failed -eq "$f0" ]; then tail -30 build-tsan/check.out; failed=$((failed + 1)); fi
}

# the clang fuzz build nested in build/fuzz (tests/fuzz/Makemodule.am): configured and built here,
# run by job_fuzz
build_fuzz() {
  [ -f build/Makefile ] || configure_build build || return 1
  make -C build fuzz-build >build/fuzz-build.out 2>&1 || { tail -50 build/fuzz-build.out; return 1; }
}

job_fuzz() {
  need_build fuzz || return
  rm -rf build/fuzz/fuzz-artifacts
  make -C build fuzz FUZZ_TIME="${BATON_FUZZ_TIME:-15}" >build/fuzz.out 2>&1
  local rc=$? f0=$failed
  grep -E '^(PASS|FAIL): fuzz_|^  reproduce|^SUMMARY|ERROR' build/fuzz.out || true
  passed=$((passed + $(grep -c '^PASS: fuzz_' build/fuzz.out)))
  failed=$((failed + $(grep -c '^FAIL: fuzz_' build/fuzz.out)))
  if [ $rc -ne 0 ] && [ $failed -eq "$f0" ]; then tail -30 build/fuzz.out; failed=$((failed + 1)); fi
}

if [ "${BATON_SKIP_DEPS:-0}" != 1 ]; then
  bash scripts/install-deps.sh || { echo "dependency installation failed"; failed=1; finish; }
fi
./autogen.sh >/dev/null 2>&1 || { echo "autogen failed"; autoreconf -fi; failed=1; finish; }
# Every job builds out of tree, which configure refuses while the source tree itself is configured
# (someone ran ./configure at the top): clean that build first, saying so, instead of failing
# every job with "source directory already configured".
if [ -f config.status ]; then
  echo "check.sh: the source tree was configured in place; cleaning it (make distclean) to build out of tree"
  make distclean >/dev/null 2>&1 || rm -f config.status config.h config.log
fi

if [ "${BATON_CHECK_QUICK:-0}" = 1 ]; then selected=tests; else selected=${BATON_CHECK_JOBS:-tests emu asan tsan fuzz}; fi
for job in $selected; do
  case $job in
    tests|emu|emu_asan|asan|tsan|fuzz) run_job "$job" "job_$job" ;;
    *) echo "check.sh: unknown job '$job' in BATON_CHECK_JOBS (tests, emu, emu_asan, asan, tsan, fuzz)"; failed=$((failed + 1)) ;;
  esac
done
finish
