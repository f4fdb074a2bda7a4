#!/bin/sh
# tests/dist_gpu.sh: GPU stages across processes under mpirun (exec/transfer_staged.c, dist_nccl.c).
# Runs wherever `baton devices` lists cuda:0: on a GPU, and in the CUDA emulator build (the emu job
# of scripts/check.sh runs it there, each rank with its own emulated GPU); elsewhere it skips (77)
# saying why. Equivalence: (D, P) in (1,2) (2,1) (2,2) under 1F1B and (1,2) under GPipe, every
# stage on cuda:0 of its rank, and a pipeline with a CPU stage and a GPU stage on different ranks
# (both orders): the loss and gradient norm of each of 3 steps and every tensor of the final
# checkpoint match the one-process run on cuda:0 within 1e-5 relative, and the one-process run on
# cpu:0 within 1e-4 (the CUDA tests' tolerance against the CPU); boundaries between ranks report the
# path mpi-staged (no NCCL here) or nccl. Refusals (exit 2, naming what): --transfer nccl in a build
# without NCCL, parallel.zero: 1 with a GPU stage. With NCCL and two GPUs or more (a real machine),
# the nccl path and the NCCL all-reduce run too; NCCL cannot join two ranks on one GPU, so with one
# GPU they are skipped, saying so, and the staged path is forced on the one GPU instead.
set -u
. "${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/dist/common.sh"

if [ "${BT_HAVE_MPI:-1}" != 1 ]; then echo "SKIP: dist_gpu: this build has no MPI"; exit 77; fi
"$b" devices >"$tmp/devices" 2>&1
gpus=$(grep -c '^cuda:[0-9]' "$tmp/devices")
if [ "$gpus" = 0 ]; then
  why="no GPU here and not the CUDA emulator build ($(grep -i cuda "$tmp/devices" | head -n1))"
  # scripts/gpu-check.sh: on a GPU machine a skip would hide a broken driver
  if [ "${BT_REQUIRE_GPU:-0}" = 1 ]; then echo "FAIL: dist_gpu: BT_REQUIRE_GPU=1 but $why"; exit 1; fi
  echo "SKIP: dist_gpu: $why"
  exit 77
fi
emulated=0
grep -q 'emulated GPU' "$tmp/devices" && emulated=1
mpi_env
# the emulator's mode and order reach every rank (mpirun passes the environment on one machine,
# but say it: -x works under any launcher set-up)
xenv=""
for v in BT_EMU_MODE BT_EMU_ORDER BT_EMU_SEED BT_EMU_GPUS; do
  eval "val=\${$v:-}"
  [ -n "$val" ] && xenv="$xenv -x $v"
done
mpi() { timeout 300 "$mpirun" --oversubscribe $xenv "$@"; }

layout_for() {
  case $1 in
  1) echo "fc_in,b0,b1,skip,head,loss" ;;
  2) echo "fc_in,b0|b1,skip,head,loss" ;;
  esac
}
devices_for() { # P [device] -> the device list of P stages on one device
  d=${2:-cuda:0}
  case $1 in 1) echo "$d" ;; 2) echo "$d,$d" ;; esac
}

run_ref() { # schedule device -> $tmp/ref-$1-$2.jsonl and its checkpoint
  n=ref-$1-$(echo "$2" | tr : _)
  "$b" run "$model" --layout "$(layout_for 1)" --devices "$2" --schedule "$1" --threads 1 --log-format jsonl \
    --checkpoint-dir "$tmp/$n" >"$tmp/$n.jsonl" 2>"$tmp/$n.err" ||
    { bad "one-process reference ($1 on $2): $(cat "$tmp/$n.err")"; return 1; }
}

# equiv D P schedule path devices [baton args]: 3 steps over D x P ranks against both references
equiv() {
  D=$1 P=$2 S=$3 want=$4 devs=$5; shift 5
  tag="D=$D P=$P $S on $devs${*:+ $*}"
  name=$(echo "$D-$P-$S-$devs-$*" | tr -c 'A-Za-z0-9-\n' '_')
  d=$tmp/run-$name
  mpi -np $((D * P)) "$b" run "$model" --layout "$(layout_for "$P")" --devices "$devs" --schedule "$S" \
    --dp "$D" --threads 1 --log-format jsonl --checkpoint-dir "$d" "$@" >"$tmp/$name.jsonl" 2>"$tmp/$name.err"
  rc=$?
  if [ $rc != 0 ]; then bad "$tag: exit $rc: $(head -c 2000 "$tmp/$name.err")"; return; fi
  if [ "$P" -gt 1 ] && ! grep -q "\"path\": \"$want\"" "$tmp/$name.jsonl"; then
    bad "$tag: the summary reports no $want boundary: $(grep -o '"path": "[a-z-]*"' "$tmp/$name.jsonl" | sort -u | tr '\n' ' ')"
    return
  fi
  if [ "$D" -gt 1 ] && ! grep -q "\"allreduce\": {[^}]*\"path\": \"$want\"" "$tmp/$name.jsonl"; then
    bad "$tag: the summary's gradient all-reduce is not $want: $(grep -o '"allreduce": {[^}]*}' "$tmp/$name.jsonl")"
    return
  fi
  m1= m2= m3= m4=
  if m1=$(python3 "$cmp" losses "$tmp/ref-$S-cuda_0.jsonl" "$tmp/$name.jsonl" 1e-5) &&
     m2=$(python3 "$cmp" tensors "$tmp/ref-$S-cuda_0" "$d" 1e-5) &&
     m3=$(python3 "$cmp" losses "$tmp/ref-$S-cpu_0.jsonl" "$tmp/$name.jsonl" 1e-4) &&
     m4=$(python3 "$cmp" tensors "$tmp/ref-$S-cpu_0" "$d" 1e-4); then
    ok "$tag ($want): against cuda:0 in one process: $m1; $m2; against cpu:0: $m4"
  else
    bad "$tag: $m1 ${m2:-} ${m3:-} ${m4:-}"
  fi
}

nccl_built=${BT_HAVE_NCCL:-0} # configure's answer (Makefile.am's test environment)
remote=mpi-staged
for S in 1f1b gpipe; do
  run_ref "$S" cuda:0 && run_ref "$S" cpu:0 || continue
  if [ $emulated = 1 ] || [ $nccl_built = 0 ]; then
    force=""
  else
    force="--transfer staged" # one GPU shared by the ranks: NCCL cannot join them; staged is what runs
  fi
  if [ "$S" = 1f1b ]; then
    # shellcheck disable=SC2086
    for dp in "1 2" "2 1" "2 2"; do set -- $dp; equiv "$1" "$2" "$S" $remote "$(devices_for "$2")" $force; done
    # shellcheck disable=SC2086
    equiv 1 2 "$S" $remote cpu:0,cuda:0 $force
    # shellcheck disable=SC2086
    equiv 1 2 "$S" $remote cuda:0,cpu:0 $force
    if [ "$gpus" -ge 2 ]; then # cuda:local is each rank's own GPU: cuda:0 on rank 0, cuda:1 on rank 1
      # shellcheck disable=SC2086
      equiv 1 2 "$S" $remote cuda:local,cuda:local $force
      # shellcheck disable=SC2086
      equiv 2 1 "$S" $remote cuda:local $force
    fi
  else
    # shellcheck disable=SC2086
    equiv 1 2 "$S" $remote "$(devices_for 2)" $force
  fi
done

# refusals, before anything runs: exit 2 naming what cannot be honoured
refuse() { # label grep-pattern mpirun-np baton-args...
  label=$1 pat=$2 np=$3; shift 3
  mpi -np "$np" "$b" run "$model" --threads 1 "$@" >"$tmp/refuse.out" 2>"$tmp/refuse.err"
  rc=$?
  if [ $rc = 2 ] && grep -q -- "$pat" "$tmp/refuse.err"; then ok "$label: exit 2, naming it"
  else bad "$label: exit $rc: $(head -c 600 "$tmp/refuse.err")"; fi
}
refuse "parallel.zero: 1 with GPU stages" "parallel.zero: 1 with stage 0 on cuda:0" 2 \
  --layout "$(layout_for 1)" --devices cuda:0 --dp 2 parallel.zero=1
if [ $nccl_built = 0 ]; then
  refuse "--transfer nccl without NCCL in the build" "this build has no NCCL" 2 \
    --layout "$(layout_for 2)" --devices cuda:0,cuda:0 --transfer nccl
fi
refuse "--transfer nccl with a CPU stage across ranks" "one of them is not a GPU" 2 \
  --layout "$(layout_for 2)" --devices cpu:0,cuda:0 --transfer nccl

# NCCL: two GPUs or more (a lent machine with several; NCCL refuses two ranks on one GPU).
# cuda:local is each rank's own GPU, cuda:<local rank>.
if [ $nccl_built = 1 ] && [ "$gpus" -ge 2 ]; then
  equiv 1 2 1f1b nccl cuda:local,cuda:local --transfer nccl
  equiv 1 2 gpipe nccl cuda:local,cuda:local --transfer nccl
  equiv 2 1 1f1b nccl cuda:local --transfer nccl # the NCCL all-reduce (no boundary)
  if [ "$gpus" -ge 4 ]; then equiv 2 2 1f1b nccl cuda:local,cuda:local --transfer nccl; fi
elif [ $nccl_built = 1 ]; then
  echo "skipped: the nccl path and the NCCL all-reduce need two GPUs (this machine has $gpus)"
else
  echo "skipped: the nccl path (this build has no NCCL)"
fi
finish
