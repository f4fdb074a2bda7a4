# tests/dist/common.sh: what the multi-rank test scripts share, sourced (`. .../common.sh`),
# never run: where baton and the test models are, a temporary directory removed on exit, the
# ok/bad counters and `finish` (prints "SCRIPT: N tests, N failed" and exits 0 only when none
# failed), and `mpi_env`, Open MPI's settings for one machine: as root (CI) it needs
# OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), on 2 cores --oversubscribe, it is kept off the network
# interfaces it does not need (loopback only), and under AddressSanitizer the ranks run without
# LeakSanitizer. `mpi` runs mpirun under a timeout (MPI_TIMEOUT seconds, default 120) so a hung
# job fails the test instead of hanging it.
bt_test_name=$(basename "$0" .sh)
b=${BT_BUILDDIR:-.}/baton
src=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
model=$src/tests/dist/skip-mlp.yaml
cmp=$src/tests/dist/compare.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 tests=0
ok() { tests=$((tests + 1)); echo "ok: $1"; }
bad() { tests=$((tests + 1)); fails=$((fails + 1)); echo "FAIL: $1"; }
finish() { echo "$bt_test_name: $tests tests, $fails failed"; [ $fails = 0 ]; exit $?; }
mpirun=${BT_MPIRUN:-mpirun}
mpi_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
  # Under AddressSanitizer (the asan job) the ranks run without LeakSanitizer: Open MPI keeps its
  # allocations until exit, from plugins it unloads (frames LSan cannot name, so no suppression
  # matches them), and LSan's own tracer crashed on about one rank in ten of these runs (signal
  # 11 in StopTheWorld). Memory errors and UBSan still stop a rank; leaks of the executor's code
  # are covered by the one-process tests, which run it with LSan.
  if [ -n "${ASAN_OPTIONS:-}" ]; then export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"; fi
}
mpi() { timeout "${MPI_TIMEOUT:-120}" "$mpirun" --oversubscribe "$@"; }
