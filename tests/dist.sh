#!/bin/sh
# tests/dist.sh: baton across processes under mpirun (src/dist, exec/engine_dist.c). Equivalence:
# for (D, P) in (2,1) (1,2) (2,2) (1,3), GPipe and 1F1B (and ZB-H1 at (2,2)), on tests/dist/skip-mlp.yaml (a skip
# connection crossing every cut, active gradient clipping), the loss of each of 3 steps and every
# tensor of the final checkpoint (weights and AdamW state; sharded across processes: compare.py
# reads either layout) match the one-process run within 1e-5
# relative (normwise per tensor: tests/dist/compare.py); the same over Open MPI's TCP transport (--mca btl tcp,self). Launch errors: a rank
# count that is not D x P, and --dp without mpirun, are exit 2 naming N, D and P. Failures: a rank
# killed mid-step ends the whole job, non-zero, within the watchdog, and the lost rank is named
# (by mpirun, and with mpirun's own abort switched off by the survivors' watchdog: "rank 1 (stage
# 1, replica 0)"). The data-parallel reduction's paths: shm (the default on one machine) and mpi
# (BATON_DP_REDUCE=mpi) both pass the equivalence, with and without parallel.zero: 1. Without MPI in the build, --dp must be refused naming it (exit 2).
# Open MPI as root (CI) needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM); --oversubscribe on 2 cores.
set -u
. "${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/dist/common.sh"

if [ "${BT_HAVE_MPI:-1}" != 1 ]; then
  "$b" run "$model" --dp 2 >"$tmp/o" 2>"$tmp/e"; rc=$?
  if [ $rc = 2 ] && grep -q "built without MPI" "$tmp/e"; then ok "no MPI: --dp 2 refused (exit 2)"; else bad "no MPI: --dp 2 gave $rc: $(cat "$tmp/e")"; fi
  finish
fi
mpi_env

layout_for() { # P -> the cut of skip-mlp into P stages
  case $1 in
  1) echo "fc_in,b0,b1,skip,head,loss" ;;
  2) echo "fc_in,b0|b1,skip,head,loss" ;;
  3) echo "fc_in|b0,b1|skip,head,loss" ;;
  4) echo "fc_in|b0|b1|skip,head,loss" ;;
  esac
}

run_ref() { # schedule -> $tmp/ref-$1/{out.jsonl,checkpoint.safetensors}
  d=$tmp/ref-$1
  "$b" run "$model" --layout "$(layout_for 1)" --schedule "$1" --threads 1 --log-format jsonl \
    --checkpoint-dir "$d" >"$tmp/ref-$1.jsonl" 2>"$tmp/ref-$1.err" ||
    { bad "one-process reference ($1): $(cat "$tmp/ref-$1.err")"; return 1; }
}

extra="" # more baton arguments for equiv (parallel.zero=1)
equiv() { # D P schedule [mpirun options...]
  D=$1 P=$2 S=$3; shift 3
  tag="D=$D P=$P $S${extra:+ $extra}${*:+ $*}"
  name=$(echo "$D-$P-$S-$extra-$*" | tr -c 'A-Za-z0-9-\n' '_')
  d=$tmp/run-$name
  # shellcheck disable=SC2086
  mpi "$@" -np $((D * P)) "$b" run "$model" --layout "$(layout_for "$P")" --schedule "$S" --dp "$D" \
    --threads 1 --log-format jsonl --checkpoint-dir "$d" $extra >"$tmp/$name.jsonl" 2>"$tmp/$name.err"
  rc=$?
  if [ $rc != 0 ]; then bad "$tag: exit $rc: $(head -c 2000 "$tmp/$name.err")"; return; fi
  if ! grep -q "\"path\": \"mpi\"" "$tmp/$name.jsonl" && [ "$P" -gt 1 ]; then
    bad "$tag: the summary reports no mpi boundary"; return
  fi
  m1= m2=
  if m1=$(python3 "$cmp" losses "$tmp/ref-$S.jsonl" "$tmp/$name.jsonl" 1e-5) &&
     m2=$(python3 "$cmp" tensors "$tmp/ref-$S" "$d" 1e-5); then
    ok "$tag: $m1; $m2"
  else
    bad "$tag: $m1 ${m2:-}"
  fi
}

for S in gpipe 1f1b; do
  run_ref $S || continue
  for dp in "2 1" "1 2" "2 2" "1 3"; do
    # shellcheck disable=SC2086
    equiv $dp $S
  done
  extra=parallel.zero=1 # the optimizer state sharded over the replicas
  for dp in "2 1" "2 2"; do
    # shellcheck disable=SC2086
    equiv $dp $S
  done
  extra=""
done
# the replicas' gradient reduction has two paths on one machine: shm (exec/dist_shm.c: loads through
# an MPI shared window, the default when every replica of a stage is here, so the runs above took
# it) and mpi (dist_dp.c: MPI's all-reduce or reduce-scatter), forced with BATON_DP_REDUCE=mpi; the
# summary names the path
reduce_path() { sed -n 's/.*"allreduce": {[^}]*"path": "\([a-z-]*\)"}.*/\1/p' "$1"; }
for z in "" parallel.zero=1; do
  extra=$z
  for dp in "2 1" "2 2"; do
    # shellcheck disable=SC2086
    set -- $dp
    p=$(reduce_path "$tmp/$1-$2-1f1b-$(echo "$z" | tr -c 'A-Za-z0-9-\n' '_')-.jsonl")
    if [ "$p" = shm ]; then ok "D=$1 P=$2 1f1b${z:+ $z}: the default reduction path on one machine is shm"
    else bad "D=$1 P=$2 1f1b${z:+ $z}: the reduction path is '${p}', not shm"; fi
    # shellcheck disable=SC2086
    equiv $dp 1f1b -x BATON_DP_REDUCE=mpi
    p=$(reduce_path "$tmp/$1-$2-1f1b-$(echo "$z" | tr -c 'A-Za-z0-9-\n' '_')--x_BATON_DP_REDUCE_mpi.jsonl")
    if [ "$p" = mpi ]; then ok "D=$1 P=$2${z:+ $z}, BATON_DP_REDUCE=mpi: the summary names mpi"
    else bad "D=$1 P=$2${z:+ $z}, BATON_DP_REDUCE=mpi: the reduction path is '${p}'"; fi
    # with two replicas both paths add a + b: the same bits (the norm's terms are the same too)
    zn=$(echo "$z" | tr -c 'A-Za-z0-9-\n' '_')
    if m=$(python3 "$cmp" tensors "$tmp/run-$1-$2-1f1b-$zn-" "$tmp/run-$1-$2-1f1b-$zn--x_BATON_DP_REDUCE_mpi" 0) &&
       m2=$(python3 "$cmp" losses "$tmp/$1-$2-1f1b-$zn-.jsonl" "$tmp/$1-$2-1f1b-$zn--x_BATON_DP_REDUCE_mpi.jsonl" 0); then
      ok "D=$1 P=$2${z:+ $z}: shm and mpi give the same bits ($m; $m2)"
    else bad "D=$1 P=$2${z:+ $z}: shm against mpi: $m ${m2:-}"; fi
  done
done
extra=""
mpi -x BATON_DP_REDUCE=nccl -np 2 "$b" run "$model" --layout "$(layout_for 1)" --dp 2 --steps 1 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "BATON_DP_REDUCE must be auto, mpi or shm, not 'nccl'" "$tmp/e"; then ok "BATON_DP_REDUCE=nccl: exit 2 naming it"
else bad "BATON_DP_REDUCE=nccl: exit $rc: $(head -c 600 "$tmp/e")"; fi

# parallel.zero: 1 holds a 1/D share of the optimizer state (rank 0's row of the summary)
peak() { sed -n 's/.*"summary": true.*"stages": \[{"stage": 0, "device": "[^"]*", "peak_bytes": \([0-9]*\).*/\1/p' "$1"; }
full=$(peak "$tmp/2-1-gpipe--.jsonl"); sharded=$(peak "$tmp/2-1-gpipe-parallel_zero_1-.jsonl")
# skip-mlp: 3,110 parameters, AdamW's two moments in f32: 24,880 bytes, half of it on each replica
if [ -n "$full" ] && [ -n "$sharded" ] && [ $((full - sharded)) -ge 12000 ] && [ $((full - sharded)) -le 12800 ]; then
  ok "parallel.zero: 1, D=2: stage 0 peaks at $sharded bytes against $full (half the optimizer state)"
else bad "parallel.zero: 1, D=2: peak bytes $sharded against $full"; fi

# each rank allocates its own stage only: the wide layers of wide-tail.yaml hold about 67 MB
# (weights, gradients, AdamW moments), the rest a few KiB. Each rank's peak resident memory is
# measured by a wrapper around it, once with the wide layers on rank 1 and once on rank 0, and each
# rank is compared with itself (a rank's baseline depends on the build: the CUDA build's libraries
# weigh 200 MB and more, unevenly between ranks): the rank holding the wide layers must be at least
# 12 MB above its own run without them. Measured: 75 MB apart without CUDA; about 20 MB in the
# CUDA build, whose peak is partly the CUDA runtime's start-up, which the tensors allocated later
# fit under; a rank holding both stages measured 0.8 MB apart. The summary's per-rank rows likewise
rss_run() { # LAYOUT TAG
  mkdir -p "$tmp/rss-$2"
  mpi -np 2 /usr/bin/python3 -c 'import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(os.path.join(sys.argv[1], "rss." + os.environ["OMPI_COMM_WORLD_RANK"]), "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$tmp/rss-$2" "$b" run "$src/tests/dist/wide-tail.yaml" --layout "$1" --threads 1 >"$tmp/rss-$2.out" 2>&1
}
rss_run "fc_in|wide0,wide1,head,loss" tail; rc=$?
rss_run "fc_in,wide0,wide1|head,loss" head; rc2=$?
r0=$(cat "$tmp/rss-tail/rss.0" 2>/dev/null); r1=$(cat "$tmp/rss-tail/rss.1" 2>/dev/null)
h0=$(cat "$tmp/rss-head/rss.0" 2>/dev/null); h1=$(cat "$tmp/rss-head/rss.1" 2>/dev/null)
if [ $rc = 0 ] && [ $rc2 = 0 ] && [ -n "$r0" ] && [ -n "$r1" ] && [ -n "$h0" ] && [ -n "$h1" ] &&
   [ $((r1 - h1)) -ge 12288 ] && [ $((h0 - r0)) -ge 12288 ] &&
   grep -Eq '^  0 +0 +0 +[0-9.]+ KiB' "$tmp/rss-tail.out" && grep -Eq '^  1 +0 +1 +6[0-9.]+ MiB' "$tmp/rss-tail.out"; then
  ok "each rank holds its own stage: peak resident memory (KiB) with the wide layers on rank 1: $r0, $r1; on rank 0: $h0, $h1"
else bad "each rank holds its own stage: exit $rc/$rc2, peak resident memory (KiB) wide on rank 1: ${r0:-?}, ${r1:-?}; wide on rank 0: ${h0:-?}, ${h1:-?}: $(tail -c 1200 "$tmp/rss-tail.out")"; fi
# under mpirun no rank draws the progress bar (Open MPI gives every rank a pseudo-terminal, so a
# bar would go to mpirun's output, here a file): rank 0 prints plain step lines, once each
if grep -q "$(printf '\r')" "$tmp/rss-tail.out" || [ "$(grep -c '^step [12]/2 ' "$tmp/rss-tail.out")" != 2 ]; then
  bad "under mpirun: a progress bar, or not one plain line per step: $(od -c "$tmp/rss-tail.out" | head -20)"
else ok "under mpirun: plain step lines from rank 0, no progress bar"; fi
# parallel.zero: 1 with one replica changes nothing, and says so (on rank 0 only)
mpi -np 2 "$b" run "$model" --layout "$(layout_for 2)" --steps 1 parallel.zero=1 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 0 ] && [ "$(grep -c 'note: parallel.zero: 1 .* one replica (D = 1), so it changes nothing' "$tmp/e")" = 1 ]; then
  ok "parallel.zero: 1 with D = 1: one note"
else bad "parallel.zero: 1 with D = 1: exit $rc: $(head -c 600 "$tmp/e")"; fi

# checkpoints move between layouts: 3 steps on one, 2 more on another, against 5 steps in one process
"$b" run "$model" --layout "$(layout_for 1)" --threads 1 --steps 5 --log-format jsonl \
  --checkpoint-dir "$tmp/ref5" >"$tmp/ref5.jsonl" 2>"$tmp/ref5.err" || bad "5 steps: $(cat "$tmp/ref5.err")"
resume() { # label first-launch second-launch: each "D P [baton args]" ("1 1" runs without mpirun)
  label=$1 first=$2 second=$3
  # shellcheck disable=SC2086
  set -- $first; D1=$1 P1=$2; shift 2; a1=$*
  # shellcheck disable=SC2086
  set -- $second; D2=$1 P2=$2; shift 2; a2=$*
  launch() { # D P args...
    d=$1 p=$2; shift 2
    if [ "$d$p" = 11 ]; then "$b" run "$model" --layout "$(layout_for 1)" --threads 1 --log-format jsonl "$@"
    else mpi -np $((d * p)) "$b" run "$model" --layout "$(layout_for "$p")" --dp "$d" --threads 1 --log-format jsonl "$@"; fi
  }
  # shellcheck disable=SC2086
  launch "$D1" "$P1" --steps 3 --checkpoint-dir "$tmp/$label-a" $a1 >"$tmp/$label-a.out" 2>&1 &&
  # shellcheck disable=SC2086
  launch "$D2" "$P2" --steps 5 --resume "$tmp/$label-a" --checkpoint-dir "$tmp/$label-b" $a2 >"$tmp/$label-b.out" 2>&1
  rc=$?
  if [ $rc != 0 ]; then bad "resume $label: exit $rc: $(tail -c 1500 "$tmp/$label-a.out" "$tmp/$label-b.out")"; return; fi
  if m=$(python3 "$cmp" tensors "$tmp/ref5" "$tmp/$label-b" 1e-5); then
    ok "resume $label: $m"
  else bad "resume $label: $m"; fi
}
resume "D=2,P=2,zero -> D=1,P=1" "2 2 parallel.zero=1" "1 1"
resume "D=1,P=1 -> D=2,P=2,zero" "1 1" "2 2 parallel.zero=1"
resume "D=2,P=2 -> D=1,P=4" "2 2" "1 4"
resume "D=1,P=4 -> D=2,P=2" "1 4" "2 2"

# ZB-H1 (a split backward: weight gradients in W, where their buckets start), with and without zero
if run_ref zb-h1; then
  equiv 2 2 zb-h1
  extra=parallel.zero=1 equiv 2 2 zb-h1
  # one bucket per parameter: every bucket starts during the backward work (its W), none at STEP
  BATON_DP_BUCKET=1024 extra="--steps 3" equiv 2 2 zb-h1
  extra=""
  f=$tmp/2-2-zb-h1---steps_3-.jsonl
  c=$(sed -n 's/.*"allreduce": {"count": \([0-9]*\), "early": \([0-9]*\).*/\1 \2/p' "$f")
  set -- $c
  if [ $# = 2 ] && [ "$1" -gt 3 ] && [ "$1" = "$2" ]; then ok "zb-h1, D=2: all $1 bucket reductions started during the backward work"
  else bad "zb-h1, D=2: bucket reductions (count, early): ${c:-none}: $(tail -c 400 "$f")"; fi
fi
# the same over TCP instead of shared memory
for dp in "2 2" "1 3"; do
  # shellcheck disable=SC2086
  equiv $dp 1f1b --mca btl tcp,self
done
# shellcheck disable=SC2086
equiv 2 1 gpipe --mca btl tcp,self

# rank 0's trace shows every stage of its replica, each recorded by its own rank
mpi -np 3 "$b" run "$model" --layout "$(layout_for 3)" --steps 2 --trace "$tmp/job.json" >"$tmp/o" 2>"$tmp/e"; rc=$?
stages=$(python3 -c 'import json,sys; print(len({e["pid"] for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"}))' "$tmp/job.json" 2>/dev/null)
if [ $rc = 0 ] && [ "$stages" = 3 ]; then ok "--trace under mpirun -np 3: slices of all 3 stages"
else bad "--trace under mpirun -np 3: exit $rc, slices of ${stages:-no} stages: $(head -c 600 "$tmp/e")"; fi

# launch errors name N, D and P
mpi -np 3 "$b" run "$model" --layout "$(layout_for 2)" --dp 2 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "N = 3 ranks but D x P = 2 x 2" "$tmp/e"; then ok "3 ranks for D=2, P=2: exit 2 naming N, D, P"
else bad "3 ranks for D=2, P=2: exit $rc: $(head -c 600 "$tmp/e")"; fi
"$b" run "$model" --layout "$(layout_for 2)" --dp 2 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "N = D x P = 4 ranks, mpirun -np 4" "$tmp/e"; then ok "--dp 2 without mpirun: exit 2 naming N, D, P"
else bad "--dp 2 without mpirun: exit $rc: $(cat "$tmp/e")"; fi
mpi -np 2 "$b" run "$model" --layout "$(layout_for 3)" >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "2 ranks (N) do not divide among the model's 3 pipeline stages (P)" "$tmp/e"; then
  ok "2 ranks for P=3: exit 2 naming N and P"
else bad "2 ranks for P=3: exit $rc: $(head -c 600 "$tmp/e")"; fi

mpi -np 3 "$b" run "$model" --layout "$(layout_for 2)" parallel.data=2 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "N = 3 ranks but D x P = 2 x 2" "$tmp/e"; then ok "parallel.data: 2 on 3 ranks: exit 2 naming N, D, P"
else bad "parallel.data: 2 on 3 ranks: exit $rc: $(head -c 600 "$tmp/e")"; fi
# parallel: auto is not resolved rank by rank (each would measure and choose its own layout)
awk '/^parallel:/ {print "parallel: auto"; skip = 1; next} skip && /^ / {next} {skip = 0; print}' "$model" >"$tmp/auto.yaml"
mpi -np 2 "$b" run "$tmp/auto.yaml" --dp 2 --steps 1 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "parallel: auto cannot be resolved across processes" "$tmp/e"; then ok "parallel: auto under mpirun: exit 2"
else bad "parallel: auto under mpirun: exit $rc: $(head -c 600 "$tmp/e") $(grep -c 'parallel: auto' "$tmp/auto.yaml")"; fi
# every rank checks that the others were started alike (here: another seed on rank 1; the other
# fields: tests/dist_agree.sh)
mpi -np 1 "$b" run "$model" --layout "$(layout_for 2)" --seed 1 : -np 1 "$b" run "$model" \
  --layout "$(layout_for 2)" --seed 2 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "ranks disagree on --seed (initialisation and dropout): rank 0 has 1, rank 1 has 2" "$tmp/e"; then
  ok "ranks started with different seeds: refused (exit $rc)"
else bad "ranks started with different seeds: exit $rc: $(head -c 600 "$tmp/e")"; fi

# SIGTERM or SIGINT to mpirun: Open MPI sends SIGTERM to every rank (and SIGKILL a second later,
# odls_base_sigkill_timeout, raised to 8 s here so a loaded machine does not cut the checkpoint
# short; mpirun then waits that long per rank before it exits); the ranks agree to stop after the same step, each stage's owner writes its shard of the
# checkpoint of that step and every rank ends on its own, as one process does on a signal. mpirun
# stops forwarding the ranks' output meanwhile (rank 0's step records may be cut off), so the
# test reads the checkpoint: one numbered (sharded) checkpoint, of the step the ranks stopped at, that resumes
signal_test() { # SIGNAL
  k=$tmp/sig-$1
  mkdir -p "$k"
  # --foreground: timeout passes the signal on to mpirun alone (else to its whole process group)
  timeout --foreground 120 "$mpirun" --oversubscribe --mca odls_base_sigkill_timeout 8 -np 2 "$b" run "$model" --layout "$(layout_for 2)" --steps 100000000 \
    --threads 1 --log-format jsonl --checkpoint-dir "$k/ck" >"$k/out" 2>"$k/err" &
  job=$!
  i=0
  while ! grep -q '"step": 20,' "$k/out" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 300 ] && break; sleep 0.05
  done
  start=$(date +%s)
  kill -"$1" $job
  wait $job; rc=$?
  took=$(($(date +%s) - start))
  # sharded (docs/checkpoints.md): one index per checkpoint, written last
  files=$(cd "$k/ck" 2>/dev/null && ls checkpoint-*.safetensors.index.json 2>/dev/null)
  at=$(echo "$files" | sed -n 's/^checkpoint-0*\([0-9][0-9]*\)\.safetensors\.index\.json$/\1/p')
  if [ $rc != 0 ] && [ "$took" -le 60 ] && [ "$(echo "$files" | wc -w)" = 1 ] && [ -n "$at" ] &&
     [ "$(grep -c 'stopping after this step' "$k/err")" = 2 ] && ! grep -q "MPI_ABORT\|signal 9" "$k/err" &&
     "$b" run "$model" --layout "$(layout_for 1)" --threads 1 --steps $((at + 1)) --resume "$k/ck" >"$k/resume" 2>&1 &&
     grep -q "^step $((at + 1))/$((at + 1)) " "$k/resume"; then
    ok "SIG$1 to mpirun: both ranks stopped after step $at and its checkpoint resumes; ended in ${took}s (mpirun exit $rc)"
  else
    bad "SIG$1 to mpirun: exit $rc after ${took}s, checkpoints: $files: $(tail -c 800 "$k/err") $(tail -c 400 "$k/resume" 2>/dev/null)"
  fi
}
signal_test TERM
signal_test INT

# a rank killed mid-step: every rank ends, non-zero, within the watchdog, naming the lost rank
kill_test() { # label watchdog [mpirun options...]
  label=$1 wd=$2; shift 2
  k=$tmp/kill-$label
  mkdir -p "$k"
  (mpi "$@" -np 2 sh -c 'echo $$ > "$0/pid.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$k" \
     "$b" run "$model" --layout "$(layout_for 2)" --steps 100000000 --watchdog "$wd" --threads 1 \
     --log-format jsonl >"$k/out" 2>&1; echo $? >"$k/rc") &
  waiter=$!
  i=0
  while [ ! -s "$k/out" ] || ! grep -q '"step": 20,' "$k/out"; do # well into the run
    i=$((i + 1)); [ $i -gt 300 ] && break; sleep 0.05
  done
  start=$(date +%s)
  kill -9 "$(cat "$k/pid.1")" 2>/dev/null
  wait $waiter
  took=$(($(date +%s) - start))
  echo "$(cat "$k/rc") $took"
}
set -- $(kill_test default 4)
out=$tmp/kill-default/out
if [ "$1" != 0 ] && [ "$2" -le 9 ] && grep -q "process rank 1 .*exited on signal 9" "$out"; then
  ok "killed rank 1: the job ended in ${2}s, exit $1, mpirun names rank 1"
else bad "killed rank 1: exit $1 after ${2}s: $(tail -c 1500 "$out")"; fi
set -- $(kill_test watchdog 3 --mca orte_abort_on_non_zero_status 0)
out=$tmp/kill-watchdog/out
if [ "$1" != 0 ] && [ "$2" -le 8 ] && grep -q "watchdog: after 3.0 s, .* from rank 1 (stage 1, replica 0)" "$out"; then
  ok "killed rank 1, mpirun's abort off: the survivor's watchdog ended the job in ${2}s naming rank 1 (stage 1, replica 0)"
else bad "killed rank 1, mpirun's abort off: exit $1 after ${2}s: $(tail -c 1500 "$out")"; fi

finish
