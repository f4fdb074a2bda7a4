#!/bin/sh
# tests/fuzz/run.sh: runs libFuzzer harnesses for a bounded time each (`make fuzz` calls it; see
# docs/testing.md). Usage: run.sh SEED_DIR SECONDS 'LIBFUZZER FLAGS' HARNESS...
# Each harness starts from SEED_DIR/<name>/ (the checked-in seeds, never written) plus
# fuzz-corpus/<name>/ (what earlier runs in this build found; libFuzzer adds to it), runs for
# SECONDS with a 10 s limit per input, writes its log to fuzz-logs/<name>.log and any crashing,
# leaking or hanging input to fuzz-artifacts/<name>/. Prints one "PASS: name" or "FAIL: name"
# line per harness (scripts/check.sh counts them) and exits 1 if any failed.
set -u
seeds=$1 seconds=$2 flags=$3
shift 3
failed=0
for bin in "$@"; do
  name=$(basename "$bin")
  mkdir -p "fuzz-corpus/$name" "fuzz-artifacts/$name" fuzz-logs
  log="fuzz-logs/$name.log"
  start=$(date +%s)
  # shellcheck disable=SC2086 # FUZZ_FLAGS is a list of flags
  "$bin" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="fuzz-artifacts/$name/" $flags "fuzz-corpus/$name" "$seeds/$name" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    echo "PASS: $name (${runs:-?} inputs in ${took}s)"
  else
    failed=1
    echo "FAIL: $name (exit $rc after ${took}s; log $(pwd)/$log)"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -n 5
    for a in "fuzz-artifacts/$name"/*; do
      [ -f "$a" ] && echo "  reproduce: $(cd "$(dirname "$bin")" && pwd)/$name $(pwd)/$a"
    done
  fi
done
exit $failed
