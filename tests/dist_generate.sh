#!/bin/sh
# tests/dist_generate.sh: `baton generate` under mpirun (exec/decode.c, exec/decode_dist.c), one
# rank per stage of a two-block GPT whose residual stream crosses every cut. Against the same
# command in one process (the model's 2 stages as threads), for P = 2 and P = 3 ranks: the
# generated text is identical, greedy (--top-k 1) and sampled (--temperature 0.8 --seed 7), with 1
# and with 4 prompts in flight; --score prints the same losses; --no-kv-cache too. P = 2 reads the
# sharded checkpoint a 2-rank training wrote (each rank loads its own stage), P = 3 the one file a
# one-process run wrote. Rank 0 alone prints, once, with tokens/s. Refused: more ranks than stages
# (D > 1: exit 2 naming N, D and P). A rank killed mid-run ends the job non-zero within a few
# seconds: by mpirun naming the lost rank, and with mpirun's abort off by the survivor's watchdog
# ("waits for its next item from rank 1 (stage 1, replica 0)").
# Open MPI's settings for one machine (as root, oversubscribed): tests/dist/common.sh.
set -u
. "${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/dist/common.sh"

if [ "${BT_HAVE_MPI:-1}" != 1 ]; then
  echo "dist_generate: no MPI in this build"
  exit 77
fi
mpi_env

# the vocabulary: every byte of the text (the model's embedding and head take exactly as many)
V=$(python3 -c 'import random
r = random.Random(3); w = ["the", "king", "shall", "come", "to", "rome", "and", "speak", "of", "love", "ROMEO:"]
t = " ".join(r.choice(w) + ("\n" if r.random() < 0.1 else "") for _ in range(3000))
open("'"$tmp"'/text.txt", "w").write(t); print(len(set(t)))')
cat >"$tmp/gpt.yaml" <<YAML
format: 1
name: tiny-gpt
inputs:
  idx: {shape: [16], dtype: i32}
  label: {shape: [16], dtype: i32}
layers:
  - {name: wte, op: embedding, args: {num: $V, dim: 16}}
  - {name: wpe, op: pos_embedding, args: {num: 16}}
  - {name: ln1, op: layernorm}
  - {name: qkv1, op: linear, args: {out: 48, bias: false}}
  - {name: attn1, op: attention, args: {heads: 2}}
  - {name: res1, op: add, from: [-1, wpe]}
  - {name: ln2, op: layernorm}
  - {name: qkv2, op: linear, args: {out: 48}}
  - {name: attn2, op: attention, args: {heads: 4}}
  - {name: res2, op: add, from: [-1, res1]}
  - {name: lnf, op: layernorm}
  - {name: head, op: linear, args: {out: $V}}
  - {name: loss, op: cross_entropy, from: [head, label]}
parallel: {pipeline: {stages: 2, microbatches: 2}}
train:
  batch: 4
  optimizer: {type: adamw, lr: 3.0e-3}
data:
  train: {type: text, path: $tmp/text.txt, val_fraction: 0.1}
YAML
# two trainings of the same steps: a sharded checkpoint from 2 ranks, one file from one process
mpi -np 2 "$b" run "$tmp/gpt.yaml" --steps 6 --threads 1 --checkpoint-dir "$tmp/ck2" >"$tmp/train2.out" 2>&1 ||
  bad "training on 2 ranks: $(tail -c 800 "$tmp/train2.out")"
"$b" run "$tmp/gpt.yaml" --steps 6 --threads 1 --checkpoint-dir "$tmp/ck1" >"$tmp/train1.out" 2>&1 ||
  bad "training in one process: $(tail -c 800 "$tmp/train1.out")"
[ -f "$tmp/ck2/checkpoint-00000006-00002-of-00002.safetensors" ] || bad "no sharded checkpoint: $(ls "$tmp/ck2")"

# gen NAME P CKPT args...: P = 1 in one process (the model's 2 stages as threads), else P ranks
gen() {
  name=$1 p=$2 ck=$3; shift 3
  if [ "$p" = 1 ]; then
    "$b" generate "$tmp/gpt.yaml" --weights "$tmp/$ck" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  else
    mpi -np "$p" "$b" generate "$tmp/gpt.yaml" --stages "$p" --weights "$tmp/$ck" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  fi
  echo $? >"$tmp/$name.rc"
  grep -v 'tokens/s\|^$' "$tmp/$name.out" >"$tmp/$name.text"
}
# agree LABEL REF RUN: both succeeded and printed the same text (rank 0 alone: once), RUN its rate
agree() {
  if [ "$(cat "$tmp/$2.rc")" != 0 ] || [ "$(cat "$tmp/$3.rc")" != 0 ]; then
    bad "$1: exit $(cat "$tmp/$2.rc")/$(cat "$tmp/$3.rc"): $(tail -c 1200 "$tmp/$2.err" "$tmp/$3.err")"
  elif [ ! -s "$tmp/$2.text" ] || ! cmp -s "$tmp/$2.text" "$tmp/$3.text"; then
    bad "$1: the text differs: $(diff "$tmp/$2.text" "$tmp/$3.text" | head -c 1500)"
  elif ! grep -q 'tokens/s\|mean loss' "$tmp/$3.out"; then
    bad "$1: no rate: $(head -c 1500 "$tmp/$3.out")"
  else ok "$1: $(grep -c . "$tmp/$3.text") lines equal ($(grep -m 1 'tokens/s\|mean loss' "$tmp/$3.out" | sed 's/ (.*//'))"
  fi
}
four="--prompt ROMEO: --prompt the --prompt and --prompt of"
for ck in ck2 ck1; do
  for P in 2 3; do
    [ $ck = ck2 ] && [ $P = 3 ] && continue # P = 2 reads the shards, P = 3 the one file
    for mode in greedy sampled; do
      if [ $mode = greedy ]; then how="--top-k 1"; else how="--temperature 0.8 --seed 7"; fi
      # shellcheck disable=SC2086
      [ -f "$tmp/ref-$ck-$mode-1.rc" ] || gen "ref-$ck-$mode-1" 1 $ck --prompt "the king" --tokens 60 $how
      # shellcheck disable=SC2086
      gen "p$P-$ck-$mode-1" "$P" $ck --prompt "the king" --tokens 60 $how
      agree "P=$P ($ck), $mode, 1 prompt" "ref-$ck-$mode-1" "p$P-$ck-$mode-1"
      # shellcheck disable=SC2086
      [ -f "$tmp/ref-$ck-$mode-4.rc" ] || gen "ref-$ck-$mode-4" 1 $ck $four --tokens 40 $how
      # shellcheck disable=SC2086
      gen "p$P-$ck-$mode-4" "$P" $ck $four --tokens 40 $how
      agree "P=$P ($ck), $mode, 4 prompts in flight" "ref-$ck-$mode-4" "p$P-$ck-$mode-4"
    done
  done
done
if grep -q 'across 2 ranks' "$tmp/p2-ck2-greedy-1.out"; then ok "P=2: the rate line says the stages ran on 2 ranks"
else bad "P=2: the rate line does not say the ranks: $(tail -n 2 "$tmp/p2-ck2-greedy-1.out")"; fi
# --score: the decoder's and the forward's losses, as in one process
gen score1 1 ck1 --score 4
for P in 2 3; do
  gen "score$P" "$P" ck1 --score 4
  agree "P=$P: --score equals one process's" score1 "score$P"
done
gen nokv1 1 ck1 --prompt "the" --tokens 12 --no-kv-cache --top-k 1
gen nokv2 2 ck1 --prompt "the" --tokens 12 --no-kv-cache --top-k 1
agree "P=2: --no-kv-cache equals one process's" nokv1 nokv2

# more ranks than stages: data-parallel replicas are refused, naming N, D and P
mpi -np 4 "$b" generate "$tmp/gpt.yaml" --stages 2 --weights "$tmp/ck1" --tokens 5 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && [ "$(grep -c 'N = 4 ranks for the model.s P = 2 pipeline stages.*not D = 2 data-parallel' "$tmp/e")" = 1 ]; then
  ok "4 ranks for 2 stages: exit 2 naming N, D and P, once"
else bad "4 ranks for 2 stages: exit $rc: $(head -c 800 "$tmp/e")"; fi

# a rank killed mid-run: every rank ends, non-zero, within seconds, the lost rank named
kill_test() { # label [mpirun options...]
  label=$1; shift
  k=$tmp/kill-$label
  mkdir -p "$k"
  (mpi "$@" -np 2 sh -c 'echo $$ > "$0/pid.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$k" \
     "$b" generate "$tmp/gpt.yaml" --stages 2 --weights "$tmp/ck1" --tokens 1000000 --watchdog 3 \
     $four >"$k/out" 2>&1; echo $? >"$k/rc") &
  waiter=$!
  i=0
  while [ ! -s "$k/pid.1" ]; do i=$((i + 1)); [ $i -gt 300 ] && break; sleep 0.05; done
  sleep 3 # set up and decoding
  start=$(date +%s)
  kill -9 "$(cat "$k/pid.1")" 2>/dev/null
  wait $waiter
  echo "$(cat "$k/rc") $(($(date +%s) - start))"
}
set -- $(kill_test default)
if [ "$1" != 0 ] && [ "$2" -le 9 ] && grep -q "process rank 1 .*exited on signal 9" "$tmp/kill-default/out"; then
  ok "killed rank 1 mid-generate: the job ended in ${2}s, exit $1, mpirun names rank 1"
else bad "killed rank 1 mid-generate: exit $1 after ${2}s: $(tail -c 1500 "$tmp/kill-default/out")"; fi
set -- $(kill_test watchdog --mca orte_abort_on_non_zero_status 0)
out=$tmp/kill-watchdog/out
if [ "$1" != 0 ] && [ "$2" -le 9 ] &&
   grep -q "rank 0 (stage 0, replica 0): watchdog: decode: after 3.0 s, rank 0 (stage 0, replica 0) waits for its next item from rank 1 (stage 1, replica 0)" "$out"; then
  ok "killed rank 1, mpirun's abort off: the survivor's watchdog ended the job in ${2}s naming rank 1"
else bad "killed rank 1, mpirun's abort off: exit $1 after ${2}s: $(tail -c 1500 "$out")"; fi

finish
