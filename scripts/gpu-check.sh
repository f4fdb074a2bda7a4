#!/usr/bin/env bash
# gpu-check.sh: builds and verifies baton on a lent GPU machine, from the repository root with the
# kit from scripts/gpu-kit.sh carried in .gpu/ (the machine has CUDA, gcc and PyTorch but no
# network, no apt, no autotools and none of baton's Debian libraries).
#
#   scripts/gpu-check.sh [--quick] [--only STEPS] [--budget SECONDS] [--cuda DIR]
#
# STEPS is a comma-separated list of build, check, sanitize, bench (default: all four, in that
# order). --quick shortens every step so the whole run fits in one 10-minute command; --budget
# (default 570 s) is the wall time this invocation may use: each step's timeout is cut to what is
# left, and a step with no time left is skipped, so summary.txt is always written.
#
# What it does, all under /tmp (nothing is installed into /):
#   build     unpacks .gpu/debs/*.deb with `dpkg -x` into /tmp/deps (libraries the system already
#             has are dropped there, so nothing shadows them), unpacks the `make dist` tarball into
#             /tmp/baton-src and copies over it every source file of this checkout that differs
#             (build-system files cannot be regenerated here: a difference in them is reported),
#             configures with CUDA for this GPU's architecture, builds with all cores, builds bench/.
#   (always)  nvidia-smi, into env.log.
#   check     `make check` (BT_REQUIRE_GPU=1: the GPU tests fail rather than skip); `baton
#             devices`; a 3-stage pipelined run on cuda:0 x 3 and
#             parity of its eval loss against the same model as 1 stage on cpu:0; tests/dist_gpu.sh
#             (GPU stages across processes; a SKIP with its reason where the build has no MPI).
#   sanitize  compute-sanitizer memcheck on tests/test_cuda and on a small pipelined training run
#             (cuda:0 x 3); racecheck, synccheck and initcheck as well without --quick (with
#             --quick: racecheck and synccheck on test_cuda after the benchmarks, if time is left).
#   bench     bench/compare_gpu.sh (baton against PyTorch, mlp and cnn), bench_gpu stages
#             (p = 2, 3, 4) and bench_gpu copy (auto, staged).
#
# Results go to $OUT (default ./gpu-out): summary.txt (one line per step: name, PASS/FAIL/SKIP,
# seconds, note), env.log, build.log, check.log, sanitizer.log, bench.log. A later invocation on
# the same (still warm) machine without `build` in STEPS copies the checkout's changed sources
# into /tmp's build and runs an incremental make; on a fresh machine it builds first.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
kit=$root/.gpu
deps=/tmp/deps
src=/tmp/baton-src
build=/tmp/baton-build
cuda=/usr/local/cuda
python=${PYTHON:-python3}
jobs=$(nproc 2>/dev/null || echo 16)
quick=0
only="build,check,sanitize,bench"
budget=570
start=$(date +%s)

while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --only) only=${2:?--only needs build,check,sanitize or bench}; shift ;;
    --budget) budget=${2:?--budget needs seconds}; shift ;;
    --cuda) cuda=${2:?--cuda needs a directory}; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
deadline=$((start + budget))

summary=$out/summary.txt
: >>"$summary"
failures=0

remaining() { echo $((deadline - $(date +%s))); }

# record NAME STATUS SECONDS [NOTE...]
record() {
  local name=$1 status=$2 secs=$3; shift 3
  printf '%-22s %-4s %5ss %s\n' "$name" "$status" "$secs" "$*" | tee -a "$summary"
  if [ "$status" = FAIL ]; then failures=$((failures + 1)); fi
}

# step NAME LOG TIMEOUT COMMAND...: runs COMMAND (a program or one of this script's exported
# functions) with its output appended to LOG, under a timeout cut to the time left; records
# PASS/FAIL, or SKIP when no time is left. Returns COMMAND's status.
step() {
  local name=$1 log=$2 limit=$3; shift 3
  local left t0 rc secs
  left=$(remaining)
  if [ "$left" -lt 15 ]; then
    record "$name" SKIP 0 "no time left in the budget"
    return 124
  fi
  if [ "$limit" -gt $((left - 10)) ]; then limit=$((left - 10)); fi
  {
    echo
    echo "==== $name ($(date -u +%H:%M:%S), timeout ${limit}s)"
    echo "\$ $*"
  } >>"$log"
  t0=$(date +%s)
  timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" >>"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  echo "==== $name: exit $rc after ${secs}s" >>"$log"
  if [ $rc -eq 0 ]; then
    record "$name" PASS "$secs"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record "$name" FAIL "$secs" "timed out after ${limit}s (see $(basename "$log"))"
  else
    record "$name" FAIL "$secs" "exit $rc (see $(basename "$log"))"
  fi
  return $rc
}

wants() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# ---- dependencies ---------------------------------------------------------------------------

libdir=$deps/usr/lib/x86_64-linux-gnu
openblas=$libdir/openblas-pthread/libopenblas.so.0

# Path of soname in the system's linker cache, or nothing.
system_lib() { ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64/ {print $NF; exit}'; }

unpack_deb() {
  if command -v dpkg-deb >/dev/null; then
    dpkg -x "$1" "$deps"
  else
    # No dpkg: a .deb is an ar archive holding data.tar.{xz,zst,gz}.
    local tmp m
    tmp=$(mktemp -d)
    (cd "$tmp" && ar x "$1") || return 1
    m=$(find "$tmp" -maxdepth 1 -name 'data.tar.*' | head -n1)
    case "$m" in
      *.zst) zstd -dc "$m" | tar -x -C "$deps" ;;
      *) tar -xf "$m" -C "$deps" ;;
    esac
    rm -rf "$tmp"
  fi
}

unpack_deps() {
  [ -f "$deps/.unpacked" ] && return 0
  ls "$kit"/debs/*.deb >/dev/null 2>&1 || { echo "no .gpu/debs/*.deb: run scripts/gpu-kit.sh first and carry .gpu"; return 1; }
  rm -rf "$deps" && mkdir -p "$deps"
  for d in "$kit"/debs/*.deb; do
    echo "unpack $(basename "$d")"
    unpack_deb "$d" || return 1
  done
  # Drop the runtime libraries the system already has (zlib, perhaps libgfortran): the system's
  # copy stays the one every program loads, and the -dev symlink (libz.so) is pointed at it.
  local f so sys dev
  for f in "$deps"/lib/x86_64-linux-gnu/lib*.so.[0-9]* "$libdir"/lib*.so.[0-9]*; do
    [ -L "$f" ] || continue
    so=$(basename "$f")
    case "$so" in *.so.[0-9]*.[0-9]*) continue ;; esac
    sys=$(system_lib "$so")
    [ -n "$sys" ] || continue
    echo "the system has $so ($sys): using it"
    rm -f "$(dirname "$f")/$(readlink "$f")" "$f"
    dev=$libdir/${so%%.so.*}.so
    if [ -L "$dev" ]; then ln -sfn "$sys" "$dev"; fi
  done
  for f in "$libdir"/*.so "$libdir"/*/*.so; do
    if [ -L "$f" ] && [ ! -e "$f" ]; then echo "warning: $f points nowhere ($(readlink "$f"))"; fi
  done
  touch "$deps/.unpacked"
  echo "unpacked into $deps:"
  find "$deps" -path '*/share' -prune -o \( -name 'lib*.so*' -printf '  %p %l\n' \) | sort
}

cudnn_extra=""
setup_env() {
  export CPATH=$deps/usr/include${CPATH:+:$CPATH}
  export LIBRARY_PATH=$libdir:$libdir/openblas-pthread:$deps/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$libdir:$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export PATH=$cuda/bin:$PATH
  # cuDNN: /usr/local/cuda may lack it while PyTorch's wheel (nvidia-cudnn) carries headers and
  # libraries; baton builds without it otherwise (conv2d then uses its own kernels).
  if [ ! -e "$cuda/include/cudnn.h" ]; then
    local d
    d=$("$python" -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
    local so=""
    [ -n "$d" ] && so=$(find "$d/lib" -maxdepth 1 -name 'libcudnn.so.*' 2>/dev/null | sort | head -n1)
    if [ -n "$so" ] && [ -f "$d/include/cudnn.h" ]; then
      mkdir -p "$deps-cudnn"
      ln -sf "$so" "$deps-cudnn/libcudnn.so"
      export CPATH=$CPATH:$d/include
      export LIBRARY_PATH=$LIBRARY_PATH:$deps-cudnn:$d/lib
      export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d/lib
      cudnn_extra="cuDNN from PyTorch's wheel ($d)"
    fi
  fi
}

# ---- build ----------------------------------------------------------------------------------

unpack_source() {
  local tarball
  tarball=$(find "$kit" -maxdepth 1 -name 'baton-*.tar.gz' 2>/dev/null | sort | head -n1)
  [ -n "$tarball" ] || { echo "no .gpu/baton-*.tar.gz: run scripts/gpu-kit.sh first and carry .gpu"; return 1; }
  cat "$kit/STAMP" 2>/dev/null
  rm -rf "$src" "$build" && mkdir -p "$src" "$build"
  tar -xzf "$tarball" -C "$src" --strip-components=1 || return 1
  overlay_sources
}

# This checkout may be newer than the kit (or than the last build on a warm machine): copy its
# changed or new sources over /tmp/baton-src. Build-system files are only compared.
overlay_sources() {
  local f n=0 stale=""
  while IFS= read -r f; do
    f=${f#./}
    case "$f" in
      Makefile.am|configure.ac|*/Makemodule.am|m4/baton_*.m4)
        cmp -s "$f" "$src/$f" || stale="$stale $f"; continue ;;
    esac
    if ! cmp -s "$f" "$src/$f"; then
      mkdir -p "$src/$(dirname "$f")" && cp "$f" "$src/$f" && echo "newer here: $f" && n=$((n + 1))
    fi
  done < <(find . Makefile.am configure.ac -maxdepth 0 -type f; \
           find src include kernels tests bench models docs scripts m4 -type f \
             \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' \
                -o -name '*.sh' -o -name '*.yaml' -o -name '*.md' -o -name '*.am' -o -name 'baton_*.m4' \) 2>/dev/null)
  echo "$n source file(s) copied over /tmp/baton-src"
  mkdir -p "$build"
  rm -f "$build/.stale"
  if [ -n "$stale" ]; then
    echo "STALE KIT: build files changed since scripts/gpu-kit.sh ran:$stale"
    echo "the build uses the kit's versions; re-run scripts/gpu-kit.sh on the build machine"
    echo "$stale" >"$build/.stale"
  fi
  return 0
}

configure_build() {
  local arch cap
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
  arch=${cap:-90}
  cd "$build" || return 1
  "$src/configure" --enable-silent-rules --with-cuda="$cuda" --with-cuda-arch="$arch" \
    --with-openblas-soname="$openblas" \
    YAML_CFLAGS="-I$deps/usr/include" YAML_LIBS="-L$libdir -lyaml" \
    JANSSON_CFLAGS="-I$deps/usr/include" JANSSON_LIBS="-L$libdir -ljansson" \
    ZLIB_CFLAGS="-I$deps/usr/include" ZLIB_LIBS="-L$libdir -lz" \
    CUNIT_CFLAGS="-I$deps/usr/include" CUNIT_LIBS="-L$libdir -lcunit" || { tail -40 config.log; return 1; }
  if ! grep -q '^#define BATON_HAVE_CUDA 1' config.h; then
    echo "configure did not find CUDA with cuBLAS under $cuda; what is there:"
    find "$cuda/" "$cuda/lib64/" -maxdepth 1 2>&1 | head -80
    find / -xdev \( -name 'libcublas.so*' -o -name 'cuda_runtime.h' \) 2>/dev/null | head -20
    return 1
  fi
}

do_build() {
  step unpack-deps "$out/build.log" 120 unpack_deps || return 1
  step unpack-source "$out/build.log" 120 unpack_source || return 1
  report_stale
  if [ -n "$cudnn_extra" ]; then echo "$cudnn_extra" >>"$out/build.log"; fi
  step configure "$out/build.log" 240 configure_build || return 1
  step make "$out/build.log" 500 make -C "$build" -j"$jobs" || return 1
  # bench/ on its own: its failure (an engine API not written yet, say) must not hide the rest.
  step make-bench "$out/build.log" 200 make -C "$build" -j"$jobs" bench
  return 0
}

# A warm machine's build, brought up to date with this checkout's sources.
do_update() {
  step update-sources "$out/build.log" 60 overlay_sources || return 1
  report_stale
  step make "$out/build.log" 500 make -C "$build" -j"$jobs" || return 1
  step make-bench "$out/build.log" 200 make -C "$build" -j"$jobs" bench
  return 0
}

report_stale() {
  if [ -f "$build/.stale" ]; then
    record stale-kit FAIL 0 "build files changed since gpu-kit.sh ran:$(cat "$build/.stale")"
  fi
}

built() { [ -x "$build/baton" ] && [ -f "$build/config.h" ]; }

# ---- check ----------------------------------------------------------------------------------

# The CUnit summary of every test program, the result automake recorded, and test_cuda's log.
collect_test_logs() {
  local trs log
  echo
  echo "==== test summaries"
  for trs in "$build"/tests/*.trs; do
    [ -f "$trs" ] || continue
    log=${trs%.trs}.log
    printf '%-6s %-28s %s\n' "$(sed -n 's/^:test-result: //p' "$trs" | head -n1)" "$(basename "$log")" \
      "$(grep -E '^[a-z_0-9]+: [0-9]+ tests, [0-9]+ failed|SKIPPED' "$log" | tail -n1)"
  done
  for log in "$build"/tests/test_cuda.log "$build"/tests/test_cuda_build.log "$build"/test-suite.log; do
    [ -f "$log" ] || continue
    echo
    echo "==== $log"
    cat "$log"
  done
}

# The eval loss a jsonl run prints last.
eval_loss() { sed -n 's/^{"eval": true.*"loss": \([-0-9.e+]*\).*/\1/p' | tail -n1; }

# parity MODEL STEPS [ARGS...]: the model as 1 stage on cpu:0 against 3 stages on cuda:0 x 3
# (1F1B, 4 micro-batches); their eval losses must agree to 2e-3 (relative).
parity() {
  local model=$1 steps=$2; shift 2
  local a b
  a=$("$build/baton" run "$model" --steps "$steps" --log-format jsonl --threads 8 "$@" \
        --devices cpu:0 --stages 1 --microbatches 1 --partition uniform | eval_loss)
  b=$("$build/baton" run "$model" --steps "$steps" --log-format jsonl "$@" \
        --devices cuda:0,cuda:0,cuda:0 --stages 3 --microbatches 4 --schedule 1f1b --partition uniform | eval_loss)
  echo "$(basename "$model"), $steps steps: eval loss cpu:0 (1 stage) $a, cuda:0 x 3 (3 stages) $b"
  awk -v a="$a" -v b="$b" 'BEGIN { if (a == "" || b == "") exit 1;
    d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); if (m < 1e-6) m = 1e-6;
    printf "relative difference %.2e (tolerance 2e-3)\n", d / m; exit !(d / m <= 2e-3) }'
}

run_pipelined() {
  "$build/baton" run "$src/models/fashion-mlp.yaml" --synthetic --steps 20 \
    --devices cuda:0,cuda:0,cuda:0 --stages 3 --microbatches 8 --schedule 1f1b
}

do_check() {
  local limit=900
  [ $quick = 1 ] && limit=300
  step make-check "$out/check.log" $limit make -C "$build" -j"$jobs" check
  collect_test_logs >>"$out/check.log" 2>&1
  step baton-devices "$out/check.log" 30 "$build/baton" devices
  step run-3-stages "$out/check.log" 120 run_pipelined
  step parity-mlp "$out/check.log" 120 parity "$src/models/mlp.yaml" 20
  step parity-fashion-mlp "$out/check.log" 120 parity "$src/models/fashion-mlp.yaml" 10 --synthetic
  step parity-fashion-cnn "$out/check.log" 180 parity "$src/models/fashion-cnn.yaml" 5 --synthetic
  do_dist_gpu
}

# GPU stages across processes (tests/dist_gpu.sh, also part of make check): mpi-staged on the GPU,
# and with NCCL and two GPUs or more the nccl path and the NCCL all-reduce. It needs Open MPI in
# the build (the kit does not carry it): a skip is recorded as SKIP with the script's reason.
do_dist_gpu() {
  local t0 rc mk=$build/Makefile
  t0=$(date +%s)
  {
    echo; echo "==== dist-gpu ($(date -u +%H:%M:%S))"
    BT_BUILDDIR=$build BT_SRCDIR=$src \
      BT_HAVE_MPI=$(sed -n 's/^BT_HAVE_MPI = //p' "$mk") BT_HAVE_NCCL=$(sed -n 's/^BT_HAVE_NCCL = //p' "$mk") \
      BT_MPIRUN=$(sed -n 's/^MPIRUN = //p' "$mk") timeout -k 10 400 sh "$src/tests/dist_gpu.sh"
  } >"$out/dist_gpu.log" 2>&1
  rc=$?
  cat "$out/dist_gpu.log" >>"$out/check.log"
  case $rc in
    0) record dist-gpu PASS $(($(date +%s) - t0)) "$(tail -n1 "$out/dist_gpu.log")" ;;
    77) record dist-gpu SKIP $(($(date +%s) - t0)) "$(grep '^SKIP' "$out/dist_gpu.log" | head -n1)" ;;
    *) record dist-gpu FAIL $(($(date +%s) - t0)) "exit $rc (see dist_gpu.log)" ;;
  esac
}

# ---- sanitize -------------------------------------------------------------------------------

sanitizer() { command -v compute-sanitizer || echo "$cuda/bin/compute-sanitizer"; }

# --report-api-errors no: a CUDA call that returns an error is baton's to check (every one is, and
# turned into a status), not a sanitizer finding; test_cuda makes one on purpose (a 1 << 50-byte
# cudaMalloc must fail cleanly). The tools still report every memory, race and sync error.
san_test_cuda() {
  cd "$build" && "$(sanitizer)" --tool "$1" --report-api-errors no --error-exitcode 97 \
    --print-limit 30 tests/test_cuda
}

san_run() {
  cd "$build" && ./libtool --mode=execute "$(sanitizer)" --tool "$1" --report-api-errors no \
    --error-exitcode 97 --print-limit 30 --target-processes all \
    ./baton run "$src/models/mlp.yaml" --steps 3 \
    --devices cuda:0,cuda:0,cuda:0 --stages 3 --microbatches 4 --schedule 1f1b
}

do_sanitize() {
  local tools="memcheck racecheck synccheck initcheck" t1=420 t2=120 tool
  [ $quick = 1 ] && tools=memcheck t1=150 t2=60
  step make-test_cuda "$out/sanitizer.log" 200 make -C "$build" tests/test_cuda || return 1
  for tool in $tools; do
    step "$tool-test_cuda" "$out/sanitizer.log" $t1 san_test_cuda "$tool"
    step "$tool-run-3-stages" "$out/sanitizer.log" $t2 san_run "$tool"
  done
}

# With --quick: racecheck and synccheck on tests/test_cuda after the benchmarks, if time is left.
do_sanitize_extra() {
  local tool
  for tool in racecheck synccheck; do
    if [ "$(remaining)" -lt 100 ]; then
      record "$tool-test_cuda" SKIP 0 "not enough time left (--quick)"
      continue
    fi
    step "$tool-test_cuda" "$out/sanitizer.log" 150 san_test_cuda "$tool"
  done
}

sanitizer_totals() {
  awk '/^==== [a-z]+-[^ ]* \(/ {name = $2; next}
       /ERROR SUMMARY|RACECHECK SUMMARY/ {sub(/^=+ /, ""); print "  " name ": " $0}' \
    "$out/sanitizer.log" >>"$summary"
}

# ---- bench ----------------------------------------------------------------------------------

do_bench() {
  local rounds=5 steps=30 p
  [ $quick = 1 ] && rounds=3 steps=20
  if [ ! -x "$build/bench/bench_gpu" ]; then
    step make-bench "$out/bench.log" 200 make -C "$build" -j"$jobs" bench || return 1
  fi
  step compare-gpu "$out/bench.log" 300 env PYTHON="$python" bash "$src/bench/compare_gpu.sh" "$build" $rounds $steps
  for p in 2 3 4; do
    step "stages-p$p" "$out/bench.log" 120 "$build/bench/bench_gpu" stages --stages $p --steps $steps
  done
  step copy-auto "$out/bench.log" 120 "$build/bench/bench_gpu" copy --transfer auto --steps $steps
  step copy-staged "$out/bench.log" 120 "$build/bench/bench_gpu" copy --transfer staged --steps $steps
  grep -E '^device:|^ratio|baton/pytorch' "$out/bench.log" | sort -u | sed 's/^/  /' >>"$summary"
}

# ---- main -----------------------------------------------------------------------------------

# A GPU must be here: tests/test_cuda*.c fail instead of skipping when they find none (a broken
# driver would otherwise pass `make check` as a skip).
export BT_REQUIRE_GPU=1

export deps libdir openblas src build cuda python kit jobs out summary
export -f system_lib unpack_deb unpack_deps unpack_source overlay_sources configure_build sanitizer san_test_cuda san_run \
  eval_loss parity run_pipelined

setup_env
{
  echo "gpu-check.sh $* (quick=$quick, only=$only, budget=${budget}s) at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kit:"; cat "$kit/STAMP" 2>/dev/null || echo "  (no .gpu/STAMP)"
  ls -l "$kit" 2>&1
  echo; nvidia-smi topo -m 2>&1
  echo; "$cuda/bin/nvcc" --version 2>&1
  echo; gcc --version 2>&1 | head -n1; make --version 2>&1 | head -n1
  echo; "$(sanitizer)" --version 2>&1 | tail -n2
  echo; "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  echo; echo "cores $(nproc)"; free -g 2>&1; df -h /tmp 2>&1
} >>"$out/env.log"
echo "# gpu-check.sh (quick=$quick, only=$only) $(date -u +%Y-%m-%dT%H:%M:%SZ); $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)" >>"$summary"

step nvidia-smi "$out/env.log" 30 nvidia-smi
if wants build || ! built; then
  do_build
else
  do_update
fi
if built; then
  wants check && do_check
  wants sanitize && do_sanitize
  wants bench && do_bench
  if [ $quick = 1 ] && wants sanitize; then do_sanitize_extra; fi
  if [ -f "$out/sanitizer.log" ]; then sanitizer_totals; fi
fi
record total "$([ $failures = 0 ] && echo PASS || echo FAIL)" $(($(date +%s) - start)) "$failures step(s) failed"
[ $failures = 0 ]
