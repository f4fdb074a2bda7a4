#!/bin/sh
# tests/fuzz/run.sh: runs libFuzzer harnesses for a bounded time each (`make fuzz` calls it; see
# docs/testing.md). Usage: run.sh SEED_DIR SECONDS 'LIBFUZZER FLAGS' HARNESS...
# Each harness starts from SEED_DIR/<name>/ (the checked-in seeds, never written) plus
# fuzz-corpus/<name>/ (what earlier runs in this build found; libFuzzer adds to it), runs for
# SECONDS with a 10 s limit per input, writes its log to fuzz-logs/<name>.log and any crashing,
# leaking or hanging input to fuzz-artifacts/<name>/. Prints one "PASS: name" or "FAIL: name"
# line per harness (scripts/check.sh counts them) and exits 1 if any failed. Harnesses run
# FUZZ_JOBS at a time (default: the cores).
set -u
seeds=$1 seconds=$2 flags=$3
shift 3
# Harnesses run this many at a time (each is one process on one core): FUZZ_JOBS, default the
# cores. Each still gets SECONDS of its own; their lines are printed in the order given.
parallel=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
mkdir -p fuzz-logs

# one harness: its PASS/FAIL line (and what to reproduce) into fuzz-logs/<name>.result
run_one() {
  bin=$1 name=$(basename "$1")
  mkdir -p "fuzz-corpus/$name" "fuzz-artifacts/$name"
  log="fuzz-logs/$name.log" result="fuzz-logs/$name.result"
  start=$(date +%s)
  # shellcheck disable=SC2086 # FUZZ_FLAGS is a list of flags
  "$bin" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="fuzz-artifacts/$name/" $flags "fuzz-corpus/$name" "$seeds/$name" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    echo "PASS: $name (${runs:-?} inputs in ${took}s)" >"$result"
  else
    {
      echo "FAIL: $name (exit $rc after ${took}s; log $(pwd)/$log)"
      grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -n 5
      for a in "fuzz-artifacts/$name"/*; do
        [ -f "$a" ] && echo "  reproduce: $(cd "$(dirname "$bin")" && pwd)/$name $(pwd)/$a"
      done
    } >"$result"
  fi
}

running=0
for bin in "$@"; do
  rm -f "fuzz-logs/$(basename "$bin").result"
  run_one "$bin" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then wait; running=0; fi
done
wait
failed=0
for bin in "$@"; do
  result="fuzz-logs/$(basename "$bin").result"
  if [ -f "$result" ]; then cat "$result"; else echo "FAIL: $(basename "$bin") (no result)"; fi
  grep -q '^PASS:' "$result" 2>/dev/null || failed=1
done
exit $failed
