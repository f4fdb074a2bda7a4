#!/bin/sh
# tests/plan_link.sh: `baton plan --ranks N` prices the boundaries between ranks with the links a
# profile measured under mpirun (cli/plan_ranks.c, plan/placement.c's link term). A profile of
# tests/dist/skip-mlp.yaml is faked (tests/dist/fake_link_profile.py) so that the answer is known:
# an expensive optimizer step (a pipeline splits it, data parallelism repeats it on every replica),
# 64 KiB crossing every cut per sample and a few KiB of gradients. Over a fast link (1 us, 100 GB/s)
# the plan must choose the pipeline, D=1 x P=2 (one boundary between ranks); over a slow one (1 ms,
# 1 MB/s) data parallelism, D=2 x P=1 (none), and its step must have grown by the link's price.
# Also: a profile without links is refused (exit 2, saying how to measure them), and under mpirun
# `baton profile` writes links that `plan --ranks` reads.
set -u
. "${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/dist/common.sh"
fake=$src/tests/dist/fake_link_profile.py

"$b" profile "$model" --repeats 1 --warmup 0 -o "$tmp/real.json" >"$tmp/o" 2>&1 || { bad "baton profile: $(cat "$tmp/o")"; exit 1; }
python3 "$fake" "$tmp/real.json" "$tmp/fast.json" 0.001 100 && python3 "$fake" "$tmp/real.json" "$tmp/slow.json" 1 0.001 ||
  { bad "faking the profiles"; exit 1; }
best() { # profile -> "D P step_ms" of the chosen split
  "$b" plan "$model" --profile "$1" --ranks 2 --json >"$tmp/plan.json" 2>"$tmp/plan.err" || { echo "exit $?: $(cat "$tmp/plan.err")"; return; }
  python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))
b=j["best"]
s=[x for x in j["splits"] if x["data"] == b["data"] and x["stages"] == b["stages"]][0]
print(b["data"], b["stages"], s["step_ms"])' "$tmp/plan.json"
}
set -- $(best "$tmp/fast.json")
if [ "${1:-}" = 1 ] && [ "${2:-}" = 2 ]; then ok "fast link: the plan chooses D=1 x P=2 (one boundary between ranks), step ${3} ms"
else bad "fast link: chose $*"; fi
fast_step=${3:-0}
set -- $(best "$tmp/slow.json")
if [ "${1:-}" = 2 ] && [ "${2:-}" = 1 ]; then ok "slow link: the plan chooses D=2 x P=1 (no boundary between ranks), step ${3} ms"
else bad "slow link: chose $*"; fi
# the pipeline split over the slow link is priced with it: each of its boundaries' messages costs
# at least the link's latency, so its step is longer than over the fast link
slow_pp=$(python3 -c 'import json,sys; print([x["step_ms"] for x in json.load(open(sys.argv[1]))["splits"] if x["stages"] == 2][0])' "$tmp/plan.json" 2>/dev/null)
if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) + 8 else 1)' "${slow_pp:-0}" "$fast_step"; then
  ok "the pipeline over the slow link: step $slow_pp ms against $fast_step ms over the fast one"
else bad "the pipeline over the slow link: step ${slow_pp:-?} ms against $fast_step ms"; fi
# a profile without links
"$b" plan "$model" --profile "$tmp/real.json" --ranks 2 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "mpirun -np 2 baton profile" "$tmp/e"; then ok "--ranks with a profile without links: exit 2"
else bad "--ranks with a profile without links: exit $rc: $(cat "$tmp/e")"; fi
"$b" plan "$model" --ranks 2 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "needs --profile" "$tmp/e"; then ok "--ranks without --profile: exit 2"
else bad "--ranks without --profile: exit $rc: $(cat "$tmp/e")"; fi

# measured for real under mpirun: the profile has links from rank 0 to rank 1, and plan reads them
if [ "${BT_HAVE_MPI:-1}" = 1 ]; then
  mpi_env
  MPI_TIMEOUT=300 mpi -np 2 "$b" profile "$model" --repeats 1 --warmup 0 \
    -o "$tmp/mpi.json" >"$tmp/o" 2>&1; rc=$?
  n=$(python3 -c 'import json,sys; print(len([l for l in json.load(open(sys.argv[1]))["links"] if l["from_rank"] == 0 and l["to_rank"] == 1 and l["oneway_ms"] > 0]))' "$tmp/mpi.json" 2>/dev/null)
  if [ $rc = 0 ] && [ "$n" = 5 ] && "$b" plan "$model" --profile "$tmp/mpi.json" --ranks 2 >"$tmp/p" 2>&1 && grep -q "<- best" "$tmp/p"; then
    ok "mpirun -np 2 baton profile: 5 link sizes from rank 0 to 1; plan --ranks 2 reads them: $(grep 'link between' "$tmp/p")"
  else bad "mpirun -np 2 baton profile: exit $rc, ${n:-no} links: $(tail -c 800 "$tmp/o") $(cat "$tmp/p" 2>/dev/null)"; fi
fi
finish
