#!/bin/sh
# tests/resume_checks.sh: `--resume` checks what it continues (issue 29, rule A), each refusal
# exit 2 naming the difference:
#   - text data: a text whose vocabulary maps ids to other bytes (same length, 'q' replaced by
#     'z') is refused naming the first entry that differs, and vocab.txt is left as it was; a
#     fresh run into that directory with the other text is refused too (vocab.txt is never
#     overwritten); a text checkpoint without vocab.txt beside it is refused;
#   - a model whose graph changed with the same parameter names and shapes (fc2's activation) is
#     refused naming the line of the graph's description that differs;
#   - precision f16 resumes bit for bit: its first steps are skipped (the loss scale overflows),
#     and the run resumed after them ends with the uninterrupted run's checkpoint, byte for byte
#     (the scale and its clean-step count are in the checkpoint);
#   - parallel: auto's auto-layout.txt is read strictly: threads 0, an overflowing integer,
#     trailing junk, an unknown or repeated key, a missing key and a missing final newline are
#     refused naming file:line; the record as baton writes it resumes.
# Prints "resume_checks: N tests, N failed".
. "$(dirname "$0")/cli_lib.sh"

check() { # description grep-pattern file
  tests=$((tests + 1))
  grep -q -- "$2" "$3" || { fail "$1: no '$2' in: $(head -c 600 "$3")"; return 1; }
}

# 1. the vocabulary of a text run
for i in $(seq 60); do echo "to be, or not to be: that is the question"; done >"$tmp/t.txt"
tr q z <"$tmp/t.txt" >"$tmp/z.txt"
cat >"$tmp/lm.yaml" <<YAML
format: 1
name: tlm
inputs:
  idx: {shape: [8], dtype: i32}
  label: {shape: [8], dtype: i32}
layers:
  - {name: wte, op: embedding, args: {num: 24, dim: 8, std: 0.1}, from: idx}
  - {name: wpe, op: pos_embedding, args: {std: 0.1}}
  - {name: ln, op: layernorm}
  - {name: qkv, op: linear, args: {out: 24}}
  - {name: attn, op: attention, args: {heads: 2}}
  - {name: res, op: add, from: [-1, -4]}
  - {name: lm_head, op: linear, args: {out: 24, bias: false}, tie: wte}
  - {name: loss, op: cross_entropy, from: [lm_head, label]}
train: {batch: 4}
data:
  train: {type: text, path: $tmp/t.txt}
YAML
lm() { "$baton" run "$tmp/lm.yaml" --eval-every 0 "$@"; }
if expect_rc 0 "text: 4 steps" lm --steps 4 --checkpoint-dir "$tmp/ck"; then
  cp "$tmp/ck/vocab.txt" "$tmp/vocab.kept"
  # entries 0-10 agree (\n ' ' , : a b e h i n o); entry 11 is 'q' there, 'r' in the other text
  if expect_rc 2 "text: resumed on a text with another vocabulary" lm --steps 6 --resume "$tmp/ck" \
       --checkpoint-dir "$tmp/ck" "data.train.path=$tmp/z.txt"; then
    check "text: the differing entry" "ck/vocab.txt differs from the vocabulary of .*z.txt: entry 11 is byte 0x71 ('q') there, 0x72 ('r') in the text" "$tmp/err"
  fi
  tests=$((tests + 1))
  cmp -s "$tmp/ck/vocab.txt" "$tmp/vocab.kept" || fail "text: vocab.txt was overwritten: $(cat "$tmp/ck/vocab.txt")"
  if expect_rc 2 "text: a new run into a directory of another vocabulary" lm --steps 2 --checkpoint-dir "$tmp/ck" \
       "data.train.path=$tmp/z.txt"; then
    check "text: vocab.txt never overwritten" "the checkpoint directory's vocab.txt is never overwritten" "$tmp/err"
  fi
  tests=$((tests + 1))
  cmp -s "$tmp/ck/vocab.txt" "$tmp/vocab.kept" || fail "text: vocab.txt was overwritten by a new run"
  mkdir "$tmp/bare" && cp "$tmp/ck/checkpoint.safetensors" "$tmp/bare/"
  if expect_rc 2 "text: a checkpoint without vocab.txt" lm --steps 6 --resume "$tmp/bare"; then
    check "text: no vocab.txt" "bare has no vocab.txt beside it" "$tmp/err"
  fi
  expect_rc 0 "text: resumed on the same text" lm --steps 6 --resume "$tmp/ck" --checkpoint-dir "$tmp/ck"
fi

# 2. the model graph: fc2's activation relu -> tanh keeps every name and shape
mlp="$srcdir/models/mlp.yaml"
if expect_rc 0 "mlp: 3 steps" "$baton" run "$mlp" --steps 3 --checkpoint-dir "$tmp/mlp"; then
  if expect_rc 2 "mlp: resumed with another activation" "$baton" run "$mlp" --steps 5 --resume "$tmp/mlp" \
       layers.fc2.act=tanh; then
    check "mlp: the line that differs" "was saved by another model graph (parameter names and shapes alone agree): line 4 of its description is 'fc2: linear(fc1){act=\"relu\", out=32} -> \[32\] f32 params fc2.weight \[32, 32\], fc2.bias \[32\]', this model's is 'fc2: linear(fc1){out=32} -> \[32\] f32; tanh(fc2:pre)" "$tmp/err"
  fi
  expect_rc 0 "mlp: resumed as it was" "$baton" run "$mlp" --steps 5 --resume "$tmp/mlp"
fi

# 3. f16: a loss scale of 1e8 overflows the first 5 steps; resumed at step 6, bit for bit
f16() { "$baton" run "$mlp" --steps 12 train.precision=f16 train.loss_scale=1e8 --log-every 1 "$@"; }
if expect_rc 0 "f16: 12 steps" f16 --checkpoint-dir "$tmp/f16a" --checkpoint-every 6 --keep-last 0; then
  check "f16: early steps skipped" "^step 5 skipped: gradients overflowed" "$tmp/out"
  if expect_rc 0 "f16: resumed at step 6" f16 --resume "$tmp/f16a/checkpoint-00000006.safetensors" \
       --checkpoint-dir "$tmp/f16b"; then
    tests=$((tests + 1))
    cmp -s "$tmp/f16a/checkpoint.safetensors" "$tmp/f16b/checkpoint.safetensors" ||
      fail "f16: the resumed run's checkpoint differs from the uninterrupted run's"
  fi
fi

# 4. auto-layout.txt, strictly (a record beside mlp's checkpoint, resumed by mlp as parallel: auto)
sed 's/^parallel:.*/parallel: auto/; /^  devices:/d; /^  pipeline:/d; /^    [a-z]*:/d' "$mlp" >"$tmp/auto.yaml"
good='stages 2\nmicrobatches 4\nschedule gpipe\nvirtual 1\nthreads 1\nrecompute 0\ndevices cpu:0,cpu:1\nlayout -\n'
record_refused() { # description printf-format pattern
  printf "$2" >"$tmp/mlp/auto-layout.txt"
  if expect_rc 2 "auto-layout.txt: $1" "$baton" run "$tmp/auto.yaml" --steps 5 --resume "$tmp/mlp"; then
    check "auto-layout.txt: $1" "$3" "$tmp/err"
  fi
}
record_refused "threads 0" "$(printf "$good" | sed 's/^threads 1$/threads 0/')\n" \
  "mlp/auto-layout.txt:5: threads '0' is not an integer from 1 to 256"
record_refused "an overflowing integer" "$(printf "$good" | sed 's/^stages 2$/stages 18446744073709551618/')\n" \
  "auto-layout.txt:1: stages '18446744073709551618' is not an integer from 1 to 64"
record_refused "trailing junk" "$(printf "$good" | sed 's/^microbatches 4$/microbatches 4x/')\n" \
  "auto-layout.txt:2: microbatches '4x' is not an integer from 1 to 4096"
record_refused "an unknown key" "${good}colour blue\n" "auto-layout.txt:9: unknown key 'colour'"
record_refused "a repeated key" "${good}threads 2\n" "auto-layout.txt:9: 'threads' again (first on line 5)"
record_refused "a missing key" "$(printf "$good" | grep -v '^recompute')\n" "auto-layout.txt: the record has no 'recompute' line"
record_refused "no final newline" "$(printf "$good")" "auto-layout.txt:8: the record ends without a newline"
printf "$good" >"$tmp/mlp/auto-layout.txt"
if expect_rc 0 "auto-layout.txt as baton writes it" "$baton" run "$tmp/auto.yaml" --steps 5 --resume "$tmp/mlp"; then
  check "auto-layout.txt taken" "^parallel: auto: resuming with the layout recorded in .*auto-layout.txt: 2 stages" "$tmp/out"
fi

echo "resume_checks: $tests tests, $failed failed"
[ "$failed" = 0 ]
