#!/bin/sh
# tests/dist_trace.sh: one view of a job across processes (trace/trace_job.c, cli/run_trace.c,
# cli/run_job_summary.c). `baton run --trace` under mpirun writes one Chrome trace of the whole
# job; tests/dist/check_trace.py checks it: valid JSON, one process per rank named "rank r (replica
# i, stage s)", flows that pair up across processes and end inside the matching send and receive
# slices, every receive ending no earlier than its send began within the clock uncertainty the file
# states, and gradient reduction slices on every rank when there are replicas. Layouts: (D, P) =
# (2, 2) under 1F1B, and (1, 3) under GPipe (the skip connection sends from stage 0 straight to
# stage 2, over rank 1). The summary's JSON "job" record has every replica's boundaries and one
# reduction row per rank (path, bytes, GB/s, time hidden behind compute), for the shm path (the
# default on one machine) and the mpi path (BATON_DP_REDUCE=mpi).
# Open MPI as root (CI) needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM); --oversubscribe on 2 cores.
set -u
if [ "${BT_HAVE_MPI:-1}" != 1 ]; then echo "SKIP: this baton was built without MPI"; exit 77; fi
. "${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/dist/common.sh"
check=$src/tests/dist/check_trace.py
mpi_env

traced() { # D P schedule layout
  D=$1 P=$2 S=$3 L=$4
  tag="D=$D P=$P $S --trace"
  name=$D-$P-$S
  mpi -np $((D * P)) "$b" run "$model" --layout "$L" --schedule "$S" --dp "$D" --threads 1 --steps 3 \
    --trace "$tmp/$name.json" >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
  if [ $rc != 0 ]; then bad "$tag: exit $rc: $(head -c 2000 "$tmp/$name.err")"; return; fi
  if m=$(python3 "$check" "$tmp/$name.json" $((D * P)) "$D"); then ok "$tag: $m"; else bad "$tag: $m"; fi
  if grep -q "wrote $tmp/$name.json: the whole job, $((D * P)) ranks" "$tmp/$name.out"; then ok "$tag: rank 0 says so"
  else bad "$tag: no 'wrote ... the whole job' line: $(tail -c 600 "$tmp/$name.out")"; fi
}
traced 2 2 1f1b "fc_in,b0|b1,skip,head,loss"
traced 1 3 gpipe "fc_in|b0,b1|skip,head,loss"
# the skip connection's flows go from rank 0 straight to rank 2
n=$(python3 -c 'import json,sys
e=json.load(open(sys.argv[1]))["traceEvents"]
s={x["id"]: x["pid"] for x in e if x.get("ph") == "s"}
print(sum(1 for x in e if x.get("ph") == "f" and s.get(x["id"]) == 0 and x["pid"] == 2))' "$tmp/1-3-gpipe.json" 2>&1)
if [ "$n" = 12 ]; then ok "D=1 P=3: 12 flows from rank 0 to rank 2 (4 micro-batches x 3 steps of the skip)"
else bad "D=1 P=3: flows from rank 0 to rank 2: $n, expected 12"; fi

# the summary: every replica's boundaries, each rank's reductions (JSON and text); the reductions'
# path is shm on one machine (exec/dist_shm.c), mpi when BATON_DP_REDUCE=mpi forces it
for path in shm mpi; do
mpi -x BATON_DP_REDUCE=$path -np 4 "$b" run "$model" --layout "fc_in,b0|b1,skip,head,loss" --dp 2 --threads 1 --steps 3 --log-format jsonl \
  >"$tmp/sum.jsonl" 2>"$tmp/sum.err"; rc=$?
m=$(python3 -c 'import json,sys
job=[json.loads(l)["job"] for l in open(sys.argv[1]) if l.startswith("{\"job\"")][0]
b={(x["replica"], x["from"], x["to"]) for x in job["boundaries"] if x["path"] == "mpi" and x["messages"] > 0}
c=[x for x in job["collectives"] if x["path"] == sys.argv[2] and x["reductions"] == 3 and x["bytes"] > 0 and x["total_ms"] > 0
   and 0 <= x["hidden_ms"] <= x["total_ms"] + 1e-9 and x["gb_per_s"] > 0]
print("%d boundaries, %d reduction rows (%s)" % (len(b), len(c), sys.argv[2]))
sys.exit(0 if len(b) == 4 and len(c) == 4 else 1)' "$tmp/sum.jsonl" $path 2>&1); mrc=$?
if [ $rc = 0 ] && [ $mrc = 0 ]; then ok "D=2 P=2 summary record: $m"; else bad "D=2 P=2 summary record (exit $rc): $m $(head -c 600 "$tmp/sum.err")"; fi
done
mpi -np 4 "$b" run "$model" --layout "fc_in,b0|b1,skip,head,loss" --dp 2 --threads 1 --steps 3 >"$tmp/sum.txt" 2>&1
rows=$(grep -cE '^  [0-3] +[01] +all-reduce +shm +3 ' "$tmp/sum.txt")
reps=$(grep -cE '^  1 +[01] -> [01] +(activations|gradients) +mpi ' "$tmp/sum.txt")
if [ "$rows" = 4 ] && [ "$reps" = 2 ]; then ok "D=2 P=2 summary text: 4 reduction rows, replica 1's 2 boundaries"
else bad "D=2 P=2 summary text: $rows reduction rows, $reps replica-1 boundaries: $(tail -25 "$tmp/sum.txt")"; fi

finish
