#!/bin/sh
# tests/lm_cli.sh: models with token-id inputs and per-position labels (tokens [T] i32, labels [T]
# i32, cross_entropy over [T, V] logits), from npy files and from a text file. Both resume
# exactly: a run resumed from its step-4 checkpoint ends with a checkpoint byte-identical to the
# uninterrupted run's (AdamW state and a cosine schedule included), and `baton predict` on the
# final checkpoint reproduces the eval loss the run reported, every printed digit (for text:
# `--data eval`, the run's validation windows). A text run stopped by SIGINT resumes to the same
# bytes as an uninterrupted one. Resuming text data refuses another seed or batch
# and --init beside --resume; --init-partial loads. When data/shakespeare.txt is there (scripts/
# fetch-shakespeare.sh), the README's language-model example runs (a few steps). Prints
# "lm_cli: N tests, N failed".
. "$(dirname "$0")/cli_lib.sh"

check() { # description grep-pattern file
  tests=$((tests + 1))
  grep -q -- "$2" "$3" || { fail "$1: no '$2' in: $(head -c 600 "$3")"; return 1; }
}
same() { # description a b
  tests=$((tests + 1))
  [ -n "$2" ] && [ "$2" = "$3" ] || fail "$1: '$2' vs '$3'"
}
# the JSON value of key in the last record of file that has it

if ! command -v python3 >/dev/null 2>&1; then
  echo "lm_cli: python3 is needed to write npy files; skipping"
  exit 77
fi

BT_TESTS_DIR="$srcdir/tests" python3 - "$tmp" <<'PY'
import os, random, struct, sys
sys.path.insert(0, os.environ["BT_TESTS_DIR"])
from npy_write import npy
r = random.Random(11)
t = sys.argv[1]
T = 8
for name, n in (("train", 64), ("eval", 24)):
    seqs = [[r.randrange(20) for _ in range(T + 1)] for _ in range(n)]
    npy("%s/%s_tok.npy" % (t, name), "<i4", (n, T), "i", [v for s in seqs for v in s[:T]])
    npy("%s/%s_lab.npy" % (t, name), "<i8", (n, T), "q", [v for s in seqs for v in s[1:]])
words = ["the", "king", "shall", "come", "to", "rome", "and", "speak", "of", "love", "ROMEO:", "JULIET:"]
with open(t + "/text.txt", "w") as f:
    f.write(" ".join(r.choice(words) + ("\n" if r.random() < 0.1 else "") for _ in range(2000)))
PY

# the layers both models share: per-position logits [T, V] scored against labels [T]
cat >"$tmp/layers.inc" <<'YAML'
layers:
  - {name: wte, op: embedding, args: {num: 40, dim: 16}}
  - {name: wpe, op: pos_embedding, args: {num: 8}}
  - {name: ln, op: layernorm}
  - {name: qkv, op: linear, args: {out: 48, bias: false}}
  - {name: attn, op: attention, args: {heads: 2}}
  - {name: res, op: add, from: [-1, wpe]}
  - {name: head, op: linear, args: {out: 40}}
  - {name: loss, op: cross_entropy, from: [head, label]}
parallel: {devices: [cpu:0, cpu:1], pipeline: {stages: 2, microbatches: 2}}
train:
  batch: 4
  optimizer: {type: adamw, lr: 3.0e-3}
  lr_schedule: {type: cosine, warmup_steps: 2, min_lr: 1.0e-4}
YAML
{ printf 'format: 1\nname: npylm\ninputs:\n  idx: {shape: [8], dtype: i32}\n  label: {shape: [8], dtype: i32}\n'
  cat "$tmp/layers.inc"
  printf 'data:\n  train: {type: npy, inputs: {idx: %s/train_tok.npy, label: %s/train_lab.npy}}\n' "$tmp" "$tmp"
  printf '  eval: {type: npy, inputs: {idx: %s/eval_tok.npy, label: %s/eval_lab.npy}}\n' "$tmp" "$tmp"
} >"$tmp/npylm.yaml"
{ printf 'format: 1\nname: textlm\ninputs:\n  idx: {shape: [8], dtype: i32}\n  label: {shape: [8], dtype: i32}\n'
  cat "$tmp/layers.inc"
  printf 'data:\n  train: {type: text, path: %s/text.txt, val_fraction: 0.1}\n' "$tmp"
} >"$tmp/textlm.yaml"

# A run of 10 steps keeping every checkpoint, a run resumed from its step 4 to 10 (the final
# checkpoints byte-identical), and predict on the final checkpoint (the eval loss to the digit).
resume_and_predict() { # model tag predict-args...
  model=$1; tag=$2; shift 2
  if expect_rc 0 "$tag: 10 steps" "$baton" run "$model" --steps 10 --checkpoint-every 4 --keep-last 0 \
       --checkpoint-dir "$tmp/$tag.a" --log-format jsonl; then
    cp "$tmp/out" "$tmp/$tag.run"
    tests=$((tests + 1))
    [ -f "$tmp/$tag.a/checkpoint-00000004.safetensors" ] || fail "$tag: no step-4 checkpoint"
  fi
  expect_rc 0 "$tag: resumed from step 4" "$baton" run "$model" --steps 10 \
    --resume "$tmp/$tag.a/checkpoint-00000004.safetensors" --checkpoint-dir "$tmp/$tag.b" --log-format jsonl
  tests=$((tests + 1))
  cmp -s "$tmp/$tag.a/checkpoint.safetensors" "$tmp/$tag.b/checkpoint.safetensors" ||
    fail "$tag: the checkpoints of the straight and the resumed run differ"
  if expect_rc 0 "$tag: predict" "$baton" predict "$model" --weights "$tmp/$tag.a" "$@" --log-format jsonl; then
    same "$tag: predict reproduces the run's final eval loss" "$(json_field "$tmp/$tag.run" loss)" \
      "$(json_field "$tmp/out" loss)"
  fi
}

# 1. token ids and per-position labels from npy files
resume_and_predict "$tmp/npylm.yaml" npy --input "idx=$tmp/eval_tok.npy" --labels "$tmp/eval_lab.npy"
# 2. the same model on a text file (next-token windows)
resume_and_predict "$tmp/textlm.yaml" text --data eval
# a language model's step records give tokens/s: samples/s times the 8 positions of a sample
tests=$((tests + 1))
python3 - "$tmp/text.run" <<'PY' || fail "text: step records without tokens_per_s = 8 x samples_per_s"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
assert recs and all(abs(r["tokens_per_s"] - 8 * r["samples_per_s"]) <= 1e-6 * r["tokens_per_s"] for r in recs), recs[:1]
PY
if expect_rc 0 "text: step lines in text" "$baton" run "$tmp/textlm.yaml" --steps 2 --log-every 1; then
  check "text: step lines say tokens/s" "^step 2/2 .* [0-9]* tokens/s  bubble" "$tmp/out"
fi
if expect_rc 0 "text: predict, text output" "$baton" predict "$tmp/textlm.yaml" --weights "$tmp/text.a" --data eval; then
  check "text: predict prints the loss" "^  loss [0-9]" "$tmp/out"
fi
expect_rc 2 "text: predict --data train" "$baton" predict "$tmp/textlm.yaml" --weights "$tmp/text.a" --data train

# SIGINT mid-run: a checkpoint of the step it stopped at, exit 130, the message says --resume; resuming
# ends bit-identical to an uninterrupted run (a script's background job starts with SIGINT ignored:
# env --default-signal gives it back)
lm_long() { "$baton" run "$tmp/textlm.yaml" train.batch=32 --steps 1500 --eval-every 0 "$@"; }
wait_step() { # file step
  i=0
  while ! grep -q "^step $2/" "$1" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
}
env --default-signal=INT "$baton" run "$tmp/textlm.yaml" train.batch=32 --steps 1500 --eval-every 0 \
  --checkpoint-dir "$tmp/int" >"$tmp/int.out" 2>"$tmp/int.err" &
bg=$!
wait_step "$tmp/int.out" 3
kill -INT $bg; wait $bg; rc=$?
same "text: SIGINT exit code" 130 "$rc"
check "text: SIGINT says how to continue" "^interrupted by SIGINT after step [0-9]* of 1500; continue with --resume" \
  "$tmp/int.out"
if expect_rc 0 "text: resume after SIGINT" lm_long --resume "$tmp/int" --checkpoint-dir "$tmp/int" &&
   expect_rc 0 "text: uninterrupted" lm_long --checkpoint-dir "$tmp/whole"; then
  tests=$((tests + 1))
  cmp -s "$tmp/int/checkpoint.safetensors" "$tmp/whole/checkpoint.safetensors" ||
    fail "text: resumed after SIGINT differs from the uninterrupted run"
fi

# 3. what a text resume cannot honour is refused, naming it; --init-partial loads
if expect_rc 2 "text: --resume with --init" "$baton" run "$tmp/textlm.yaml" --steps 12 --resume "$tmp/text.a" \
     --init "$tmp/text.a"; then
  check "resume + init" "resuming .* and initialising from weights" "$tmp/err"
fi
if expect_rc 2 "text: --resume with another seed" "$baton" run "$tmp/textlm.yaml" --steps 12 --resume "$tmp/text.a" \
     --seed 5; then
  check "resume seed" "saved with seed 0 but this run uses seed 5" "$tmp/err"
fi
if expect_rc 2 "text: --resume with another batch" "$baton" run "$tmp/textlm.yaml" --steps 12 --resume "$tmp/text.a" \
     train.batch=8; then
  check "resume batch" "saved by a run of batch 4, but this run has batch 8" "$tmp/err"
fi
expect_rc 2 "text: --resume of an empty directory" "$baton" run "$tmp/textlm.yaml" --steps 12 --resume "$tmp"
if expect_rc 0 "text: --resume at the end" "$baton" run "$tmp/textlm.yaml" --steps 10 --resume "$tmp/text.a"; then
  check "nothing to do" "nothing to do: .* is at step 10" "$tmp/err"
fi
if expect_rc 0 "text: --init-partial" "$baton" run "$tmp/textlm.yaml" --steps 2 --init-partial "$tmp/text.a"; then
  check "init-partial report" "loaded 7 parameters, skipped 0 tensors" "$tmp/out"
fi

# 4. the README's language-model example, a few steps (needs scripts/fetch-shakespeare.sh's text)
if [ -f "$srcdir/data/shakespeare.txt" ]; then
  tests=$((tests + 1))
  if (cd "$srcdir" && "$baton" run models/gpt-shakespeare.yaml --checkpoint-dir "$tmp/gpt" --steps 3 \
        --eval-every 0) >"$tmp/out" 2>"$tmp/err"; then
    check "README: run ends with the validation loss" "^final: validation loss" "$tmp/out"
  else
    fail "README: run: $(head -c 300 "$tmp/err")"
  fi
  tests=$((tests + 1))
  (cd "$srcdir" && "$baton" generate models/gpt-shakespeare.yaml --weights "$tmp/gpt" --prompt "ROMEO:" \
     --tokens 30 >"$tmp/gen" 2>&1) || fail "README: generate: $(head -c 300 "$tmp/gen")"
else
  echo "lm_cli: no data/shakespeare.txt (scripts/fetch-shakespeare.sh): the README example is not run"
fi

echo "lm_cli: $tests tests, $failed failed"
[ "$failed" = 0 ]
