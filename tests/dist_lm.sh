#!/bin/sh
# tests/dist_lm.sh: the language-model loop (train/lm.c) across processes. Each replica trains on
# its own rows of every global batch (the windows one process draws, in its order), the
# gradients are all-reduced, the reported loss and the validation loss are global means. On a GPT
# whose output head is tied to its token embedding (tie: wte; across the cut at P=2 the two ranks
# trade the tied gradients at the optimizer step) trained on text, for (D, P) in (2,1) (1,2)
# (2,2): the loss and gradient norm of each of 4 steps, the validation losses (steps 2 and 4), and
# every tensor of the final checkpoint match the one-process run within 1e-5 relative
# (tests/dist/compare.py); a checkpoint of D=2,P=2 resumes on D=1,P=1 to the one-process run's
# state. An untied model on an llm.c token shard (type: tokens) does the same at (2,2) with
# parallel.zero: 1 (the shared checkpoint path gathers the optimizer state); a tie with
# parallel.zero: 1 across processes is refused (exit 2) naming it.
# Open MPI as root (CI) needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM); --oversubscribe on 2 cores.
set -u
. "${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/dist/common.sh"

if [ "${BT_HAVE_MPI:-1}" != 1 ]; then
  echo "dist_lm: no MPI in this build (the language-model loop in one process: tests/lm_cli.sh)"
  exit 77
fi
mpi_env

python3 - "$tmp" <<'PY'
import random, struct, sys
t = sys.argv[1]
r = random.Random(1)
w = ["the", "king", "shall", "come", "to", "rome", "and", "speak", "of", "love"]
open(t + "/text.txt", "w").write(" ".join(r.choice(w) + ("\n" if r.random() < 0.1 else "") for _ in range(3000)))
toks = [r.randrange(30) for _ in range(6000)]  # an llm.c shard: 256 int32 (magic, version, count), uint16 tokens
open(t + "/tok.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)) + struct.pack("<%dH" % len(toks), *toks))
PY

# lm NAME HEAD DATA: a small GPT; HEAD is the head layer's extra keys (", tie: wte" or "")
lm() {
  cat >"$tmp/$1.yaml" <<YAML
format: 1
name: $1
inputs:
  idx: {shape: [8], dtype: i32}
  label: {shape: [8], dtype: i32}
layers:
  - {name: wte, op: embedding, args: {num: 40, dim: 16}, from: idx}
  - {name: wpe, op: pos_embedding, args: {num: 8}}
  - {name: ln, op: layernorm}
  - {name: qkv, op: linear, args: {out: 48, bias: false}}
  - {name: attn, op: attention, args: {heads: 2}}
  - {name: proj, op: linear, args: {out: 16, bias: false}}
  - {name: res, op: add, from: [-1, wpe]}
  - {name: ln_f, op: layernorm}
  - {name: head, op: linear, args: {out: 40, bias: false}$2}
  - {name: loss, op: cross_entropy, from: [head, label]}
parallel: {pipeline: {microbatches: 2}}
train:
  batch: 8
  optimizer: {type: adamw, lr: 3.0e-3, weight_decay: 0.1}
  clip_grad_norm: 1.0
data:
  train: $3
YAML
}
lm tied ", tie: wte" "{type: text, path: $tmp/text.txt, val_fraction: 0.1}"
lm tokens "" "{type: tokens, path: $tmp/tok.bin, val_fraction: 0.1}"

layout_for() { # P -> the cut into P stages (at 2 the residual from wpe and the tie cross it)
  case $1 in
  1) echo "wte,wpe,ln,qkv,attn,proj,res,ln_f,head,loss" ;;
  2) echo "wte,wpe,ln,qkv|attn,proj,res,ln_f,head,loss" ;;
  esac
}

# launch MODEL NAME D P args...: D x P ranks (D=P=1: one process, no mpirun); $tmp/NAME.{jsonl,err,rc}
launch() {
  model=$1 name=$2 d=$3 p=$4; shift 4
  if [ "$d$p" = 11 ]; then
    "$b" run "$tmp/$model.yaml" --layout "$(layout_for 1)" --threads 1 --log-format jsonl "$@" \
      >"$tmp/$name.jsonl" 2>"$tmp/$name.err"
  else
    mpi -np $((d * p)) "$b" run "$tmp/$model.yaml" --layout "$(layout_for "$p")" \
      --dp "$d" --threads 1 --log-format jsonl "$@" >"$tmp/$name.jsonl" 2>"$tmp/$name.err"
  fi
  echo $? >"$tmp/$name.rc"
}
need() { # name: the run succeeded
  if [ "$(cat "$tmp/$1.rc")" != 0 ]; then bad "$1: exit $(cat "$tmp/$1.rc"): $(head -c 1500 "$tmp/$1.err")"; return 1; fi
}
# close REF RUN what: losses (steps, evaluations) and the final checkpoints within 1e-5
close() {
  m1= m2=
  if m1=$(python3 "$cmp" losses "$tmp/$1.jsonl" "$tmp/$2.jsonl" 1e-5) && m2=$(python3 "$cmp" tensors "$tmp/$1" "$tmp/$2" 1e-5)
  then ok "$3: $m1; $m2"; else bad "$3: ${m1:-} ${m2:-}"; fi
}

# the tied GPT on text: 4 steps, evaluations at 2 and 4
launch tied ref 1 1 --steps 4 --eval-every 2 --checkpoint-dir "$tmp/ref"
if need ref; then
  for dp in "2 1" "1 2" "2 2"; do
    set -- $dp
    n=tied-$1-$2
    launch tied "$n" "$1" "$2" --steps 4 --eval-every 2 --checkpoint-dir "$tmp/$n"
    need "$n" && close ref "$n" "tied GPT on text, D=$1 P=$2 against one process"
  done
fi

# the step-2 checkpoint of D=2,P=2 resumed on D=1,P=1: the one-process run's steps 3, 4 and state
launch tied ref4 1 1 --steps 4 --checkpoint-dir "$tmp/ref4"
launch tied half 2 2 --steps 2 --eval-every 0 --checkpoint-dir "$tmp/half"
if need ref4 && need half; then
  launch tied back 1 1 --steps 4 --resume "$tmp/half" --checkpoint-dir "$tmp/back"
  grep -v '^{"step": [12],' "$tmp/ref4.jsonl" >"$tmp/ref4-tail.jsonl"
  mv "$tmp/ref4-tail.jsonl" "$tmp/ref4.jsonl"
  need back && close ref4 back "tied GPT: D=2,P=2 for 2 steps resumed on D=1,P=1 to 4"
fi

# an untied model on an llm.c token shard, D=2,P=2 with parallel.zero: 1
launch tokens tref 1 1 --steps 4 --checkpoint-dir "$tmp/tref"
launch tokens tzero 2 2 --steps 4 --checkpoint-dir "$tmp/tzero" parallel.zero=1
if need tref && need tzero; then close tref tzero "token shard, D=2 P=2 zero: 1 against one process"; fi

# a tie with parallel.zero: 1 across processes is refused, naming it
launch tied tiezero 2 1 --steps 1 parallel.zero=1
if [ "$(cat "$tmp/tiezero.rc")" = 2 ] && grep -q "tied parameters.*parallel.zero: 1" "$tmp/tiezero.err"; then
  ok "a tie with parallel.zero: 1 across processes: refused (exit 2) naming it"
else bad "a tie with parallel.zero: 1: exit $(cat "$tmp/tiezero.rc"): $(head -c 800 "$tmp/tiezero.err")"; fi

finish
