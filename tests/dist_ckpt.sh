#!/bin/sh
# tests/dist_ckpt.sh: sharded checkpoints across processes (train/checkpoint_shards.c,
# docs/checkpoints.md), on tests/dist/skip-mlp.yaml. Bit for bit (compare.py at tolerance 0: every
# loss and gradient-norm line, and every tensor of the final checkpoint):
#   - a checkpoint of D=2,P=2 (each stage's owner wrote its shard, rank 0 the index) resumes on
#     D=1,P=1 (one process, writing one file) and on D=1,P=4 (four shards) to the same steps and
#     the same final state; and back: those two checkpoints resume on D=2,P=2 alike;
#   - the same with parallel.zero: 1 (the optimizer state is gathered within each stage's replicas
#     before its owner writes it);
#   - D=2,P=2 for 3 steps resumed on D=2,P=2 equals 5 straight steps (with and without zero);
#   - --init and `baton predict --weights` read a sharded checkpoint: predictions equal those from
#     the single file of the same state; a text model (train/lm.c) under mpirun writes shards and
#     vocab.txt, and `baton generate --weights` scores them as the one-process single file.
# Failures: a shard corrupted or truncated is refused naming it (one process and under mpirun); a
# rank whose shard cannot be written fails the job naming the rank, and no index is written for
# that step (the index is written last: the latest still resumes the step before). keep_last
# removes every file of older sharded checkpoints.
# Open MPI as root (CI) needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM); --oversubscribe on 2 cores.
set -u
. "${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/dist/common.sh"

if [ "${BT_HAVE_MPI:-1}" != 1 ]; then
  echo "dist_ckpt: no MPI in this build (tests/test_ckpt_shards covers sharded checkpoints in one process)"
  exit 77
fi
mpi_env

layout_for() { # P -> the cut of skip-mlp into P stages
  case $1 in
  1) echo "fc_in,b0,b1,skip,head,loss" ;;
  2) echo "fc_in,b0|b1,skip,head,loss" ;;
  4) echo "fc_in|b0|b1|skip,head,loss" ;;
  esac
}

# launch NAME D P args...: D x P ranks (D=P=1: one process, no mpirun); output in $tmp/NAME.jsonl
launch() {
  name=$1 d=$2 p=$3; shift 3
  if [ "$d$p" = 11 ]; then
    "$b" run "$model" --layout "$(layout_for 1)" --threads 1 --log-format jsonl "$@" >"$tmp/$name.jsonl" 2>"$tmp/$name.err"
  else
    mpi -np $((d * p)) "$b" run "$model" --layout "$(layout_for "$p")" --dp "$d" \
      --threads 1 --log-format jsonl "$@" >"$tmp/$name.jsonl" 2>"$tmp/$name.err"
  fi
}

# same A B what: runs A and B agree bit for bit (the loss lines they share, and their final checkpoints)
same() {
  if m1=$(python3 "$cmp" losses "$tmp/$1.jsonl" "$tmp/$2.jsonl" 0) && m2=$(python3 "$cmp" tensors "$tmp/$1" "$tmp/$2" 0)
  then ok "$3: $m1; $m2"; else bad "$3: ${m1:-} ${m2:-}"; fi
}

need() { # name: the run succeeded
  if [ "$(cat "$tmp/$1.rc")" != 0 ]; then bad "$1: exit $(cat "$tmp/$1.rc"): $(head -c 1500 "$tmp/$1.err")"; return 1; fi
}
run() { name=$1; launch "$@"; echo $? >"$tmp/$name.rc"; need "$name"; }

for zero in 0 1; do
  z="parallel.zero=$zero"; t=z$zero
  # D=2,P=2: 3 steps, a sharded checkpoint; its owners wrote 2 shards, rank 0 the index
  run "$t-a" 2 2 --steps 3 --checkpoint-dir "$tmp/$t-a" "$z" || continue
  n=$(ls "$tmp/$t-a" | grep -c '^checkpoint-00000003-0000[12]-of-00002\.safetensors$')
  if [ "$n" = 2 ] && [ -f "$tmp/$t-a/checkpoint.safetensors.index.json" ] && [ ! -e "$tmp/$t-a/checkpoint.safetensors" ]
  then ok "$z: D=2,P=2 wrote 2 shards and the index"; else bad "$z: D=2,P=2 wrote $(ls "$tmp/$t-a")"; fi
  # resumed on D=1,P=1 (one file) and on D=1,P=4 (four shards), to step 5
  run "$t-b1" 1 1 --steps 5 --resume "$tmp/$t-a" --checkpoint-dir "$tmp/$t-b1"
  run "$t-b4" 1 4 --steps 5 --resume "$tmp/$t-a" --checkpoint-dir "$tmp/$t-b4"
  same "$t-b1" "$t-b4" "$z: D=2,P=2 -> D=1,P=1 and -> D=1,P=4, bit for bit"
  # and back: each of those resumed on D=2,P=2 to step 7
  run "$t-c1" 2 2 --steps 7 --resume "$tmp/$t-b1" --checkpoint-dir "$tmp/$t-c1" "$z"
  run "$t-c4" 2 2 --steps 7 --resume "$tmp/$t-b4" --checkpoint-dir "$tmp/$t-c4" "$z"
  same "$t-c1" "$t-c4" "$z: D=1,P=1 -> D=2,P=2 and D=1,P=4 -> D=2,P=2, bit for bit"
  # a resume on the same layout is the straight run
  run "$t-s5" 2 2 --steps 5 --checkpoint-dir "$tmp/$t-s5" "$z"
  run "$t-r5" 2 2 --steps 5 --resume "$tmp/$t-a" --checkpoint-dir "$tmp/$t-r5" "$z"
  grep -v '^{"step": [123],' "$tmp/$t-s5.jsonl" >"$tmp/$t-s5-tail.jsonl" # the steps both ran: 4 and 5
  mv "$tmp/$t-s5-tail.jsonl" "$tmp/$t-s5.jsonl"
  same "$t-s5" "$t-r5" "$z: D=2,P=2 3 steps + 2 resumed = 5 straight, bit for bit"
done

# --init and predict read a sharded checkpoint like the single file of the same state
if [ -d "$tmp/z0-b4" ] && [ -d "$tmp/z0-b1" ]; then
  for w in b1 b4; do
    "$b" predict "$model" --weights "$tmp/z0-$w" --data train --output "$tmp/pred-$w.npy" --threads 1 \
      >"$tmp/pred-$w.out" 2>&1 || bad "predict --weights $w: $(head -c 800 "$tmp/pred-$w.out")"
  done
  if [ -s "$tmp/pred-b4.npy" ] && cmp -s "$tmp/pred-b1.npy" "$tmp/pred-b4.npy"; then
    ok "predict --weights: a sharded checkpoint's outputs equal its single file's"
  else bad "predict --weights: outputs differ or are missing"; fi
  run init1 1 1 --steps 2 --init "$tmp/z0-b1/checkpoint-00000005.safetensors" --checkpoint-dir "$tmp/init1" &&
  run init4 1 1 --steps 2 --init "$tmp/z0-b4/checkpoint-00000005.safetensors.index.json" --checkpoint-dir "$tmp/init4" &&
    same init1 init4 "--init from an index equals --init from the single file"
fi

# a language model on text (train/lm.c) under mpirun: shards and vocab.txt, and `baton generate
# --weights` scores the same from its directory, its index, and a one-process run's single file
python3 -c 'import random
r = random.Random(1); w = ["the", "king", "shall", "come", "to", "rome", "and", "speak", "of", "love"]
open("'"$tmp"'/text.txt", "w").write(" ".join(r.choice(w) + ("\n" if r.random() < 0.1 else "") for _ in range(2000)))'
cat >"$tmp/textlm.yaml" <<YAML
format: 1
name: textlm
inputs:
  idx: {shape: [8], dtype: i32}
  label: {shape: [8], dtype: i32}
layers:
  - {name: wte, op: embedding, args: {num: 40, dim: 16}}
  - {name: wpe, op: pos_embedding, args: {num: 8}}
  - {name: ln, op: layernorm}
  - {name: qkv, op: linear, args: {out: 48, bias: false}}
  - {name: attn, op: attention, args: {heads: 2}}
  - {name: res, op: add, from: [-1, wpe]}
  - {name: head, op: linear, args: {out: 40}}
  - {name: loss, op: cross_entropy, from: [head, label]}
parallel: {pipeline: {stages: 2, microbatches: 2}}
train:
  batch: 4
  optimizer: {type: adamw, lr: 3.0e-3}
data:
  train: {type: text, path: $tmp/text.txt, val_fraction: 0.1}
YAML
mpi -np 2 "$b" run "$tmp/textlm.yaml" --steps 4 --threads 1 \
  --checkpoint-dir "$tmp/lm2" >"$tmp/lm2.out" 2>&1; rc=$?
"$b" run "$tmp/textlm.yaml" --steps 4 --threads 1 --checkpoint-dir "$tmp/lm1" >"$tmp/lm1.out" 2>&1
for w in lm1 lm2 lm2/checkpoint-00000004.safetensors.index.json; do
  "$b" generate "$tmp/textlm.yaml" --weights "$tmp/$w" --score 5 2>&1 | tail -n 1
done >"$tmp/scores"
if [ $rc = 0 ] && [ -f "$tmp/lm2/checkpoint-00000004-00002-of-00002.safetensors" ] && [ -f "$tmp/lm2/vocab.txt" ] &&
   [ "$(sort -u "$tmp/scores" | wc -l)" = 1 ] && grep -q 'mean loss' "$tmp/scores"; then
  ok "text model under mpirun: sharded checkpoint and vocab.txt; generate --weights scores it as the single file ($(head -n 1 "$tmp/scores"))"
else bad "text model under mpirun: exit $rc: $(tail -c 600 "$tmp/lm2.out") scores: $(cat "$tmp/scores")"; fi

# a corrupted or a truncated shard: refused naming it, in one process and under mpirun
if [ -d "$tmp/z0-a" ]; then
  shard=checkpoint-00000003-00002-of-00002.safetensors
  cp -r "$tmp/z0-a" "$tmp/bad"
  printf 'X' | dd of="$tmp/bad/$shard" bs=1 seek=$(($(wc -c <"$tmp/bad/$shard") - 3)) conv=notrunc 2>/dev/null
  launch badrun 1 1 --steps 5 --resume "$tmp/bad"; rc=$?
  if [ $rc != 0 ] && grep -q "$shard: tensor '.*' is corrupt" "$tmp/badrun.err"; then ok "a corrupted shard: refused (exit $rc) naming it"
  else bad "a corrupted shard: exit $rc: $(head -c 800 "$tmp/badrun.err")"; fi
  cp "$tmp/z0-a/$shard" "$tmp/bad/$shard"
  truncate -s 700 "$tmp/bad/$shard"
  launch badrun2 2 2 --steps 5 --resume "$tmp/bad"; rc=$?
  if [ $rc != 0 ] && grep -q "names shard $shard" "$tmp/badrun2.err"; then ok "a truncated shard under mpirun: refused (exit $rc) naming it"
  else bad "a truncated shard under mpirun: exit $rc: $(head -c 800 "$tmp/badrun2.err")"; fi
fi

# a shard that cannot be written (its name taken by a directory; --keep-last 0, or step 2's prune
# would try to remove it first): the job fails naming the rank, no index names the step, and the
# latest still resumes the step before (planted: the index written before the shards fails this)
mkdir -p "$tmp/fail/checkpoint-00000004-00002-of-00002.safetensors"
launch failrun 2 2 --steps 4 --checkpoint-every 2 --keep-last 0 --checkpoint-dir "$tmp/fail"; rc=$?
if [ $rc != 0 ] && grep -q "rank 1 (stage 1, replica 0): .*checkpoint-00000004-00002-of-00002" "$tmp/failrun.err" &&
   [ ! -e "$tmp/fail/checkpoint-00000004.safetensors.index.json" ] && [ -e "$tmp/fail/checkpoint-00000002.safetensors.index.json" ]
then ok "a shard that cannot be written: exit $rc naming rank 1 (stage 1, replica 0), no index for its step"
else bad "a shard that cannot be written: exit $rc, files: $(ls "$tmp/fail"): $(head -c 800 "$tmp/failrun.err")"; fi
launch failback 1 1 --steps 4 --resume "$tmp/fail"; rc=$?
if [ $rc = 0 ] && grep -q '"step": 3,' "$tmp/failback.jsonl"; then ok "... and its directory resumes at step 2"
else bad "resume after the failed shard: exit $rc: $(head -c 800 "$tmp/failback.err")"; fi

# keep_last: older sharded checkpoints go whole (index and shards)
launch keep 2 2 --steps 4 --checkpoint-every 1 --keep-last 2 --checkpoint-dir "$tmp/keep"; rc=$?
files=$(ls "$tmp/keep" | grep '^checkpoint' | tr '\n' ' ')
want="checkpoint-00000003-00001-of-00002.safetensors checkpoint-00000003-00002-of-00002.safetensors checkpoint-00000003.safetensors.index.json checkpoint-00000004-00001-of-00002.safetensors checkpoint-00000004-00002-of-00002.safetensors checkpoint-00000004.safetensors.index.json checkpoint.safetensors.index.json "
if [ $rc = 0 ] && [ "$files" = "$want" ]; then ok "--keep-last 2 under mpirun: steps 3 and 4 remain, each whole"
else bad "--keep-last 2: exit $rc, files: $files"; fi

finish
