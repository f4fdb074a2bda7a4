#!/bin/sh
# tests/generate_checks.sh: `baton generate` reads only what exists (issue 29, rule B), on a tiny
# text model whose embedding (24 ids) is larger than its text's vocabulary (16 bytes):
#   - --score on a validation split shorter than a window (T + 1 tokens) is refused naming both
#     lengths (it read past the token array before: garbage ids, or SIGSEGV);
#   - sampling draws only ids vocab.txt has: 300 tokens at a high temperature, under three seeds,
#     print (they failed mid-output naming an id >= 16 before);
#   - --temperature 0 is greedy: the same text under any seed, and the text --top-k 1 gives; above
#     its limit the message names it (1e6);
#   - a NUL byte in a --prompts line is refused naming the line, the prompt and the offset;
#   - vocab.txt is read strictly: trailing text, a repeated byte and more entries than the
#     embedding takes are refused (exit 2) naming vocab.txt:line(:column).
# Prints "generate_checks: N tests, N failed".
. "$(dirname "$0")/cli_lib.sh"

check() { # description grep-pattern file
  tests=$((tests + 1))
  grep -q -- "$2" "$3" || { fail "$1: no '$2' in: $(head -c 600 "$3")"; return 1; }
}

for i in $(seq 60); do echo "to be, or not to be: that is the question"; done >"$tmp/t.txt"
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
train: {batch: 4, steps: 3}
data:
  train: {type: text, path: $tmp/t.txt}
YAML
gen() { "$baton" generate "$tmp/lm.yaml" --weights "$tmp/ck" "$@"; }
expect_rc 0 "train" "$baton" run "$tmp/lm.yaml" --checkpoint-dir "$tmp/ck" || { echo "generate_checks: $tests tests, $failed failed"; exit 1; }

# --score: 2520 tokens, 0.3% of them validate: 7, fewer than the 9 a window reads
if expect_rc 2 "--score on a short validation split" gen --score 2 data.train.val_fraction=0.003; then
  check "--score short split" "the validation split of .*t.txt has 7 tokens (val_fraction 0.003 of 2520), fewer than the T + 1 = 9 a window needs" "$tmp/err"
fi
expect_rc 0 "--score on a split of exactly T + 1 tokens" gen --score 2 data.train.val_fraction=0.0036

# the logits have 24 ids, vocab.txt 16: no sample names an id past it
for seed in 1 2 3; do
  expect_rc 0 "300 tokens at temperature 3, seed $seed" gen --tokens 300 --temperature 3 --seed $seed
done

# greedy
expect_rc 0 "--temperature 0" gen --tokens 40 --temperature 0 --seed 1 && sed '/tokens in /,$d' "$tmp/out" >"$tmp/g1"
expect_rc 0 "--temperature 0, another seed" gen --tokens 40 --temperature 0 --seed 9 --top-k 5 &&
  sed '/tokens in /,$d' "$tmp/out" >"$tmp/g2"
expect_rc 0 "--top-k 1" gen --tokens 40 --top-k 1 --seed 4 && sed '/tokens in /,$d' "$tmp/out" >"$tmp/k1"
tests=$((tests + 1))
[ -s "$tmp/g1" ] && cmp -s "$tmp/g1" "$tmp/g2" && cmp -s "$tmp/g1" "$tmp/k1" ||
  fail "greedy: seeds or --top-k 1 differ: $(cat "$tmp/g1" "$tmp/g2" "$tmp/k1" | head -c 400)"
if expect_rc 2 "--temperature above its limit" gen --temperature 2e6; then
  check "--temperature limit" "temperature: must be a number from 0 (greedy) to 1e6, got '2e6'" "$tmp/err"
fi
expect_rc 2 "--temperature -1" gen --temperature -1

# a NUL in a prompt
printf 'to\nbe\000x\n' >"$tmp/nul.txt"
if expect_rc 2 "a NUL byte in --prompts" gen --prompt or --prompts "$tmp/nul.txt" --tokens 2; then
  check "NUL prompt" "nul.txt: line 2 (prompt 3) has a NUL byte at offset 2 of the line (byte 5 of the file)" "$tmp/err"
fi

# vocab.txt, strictly
good=$(cat "$tmp/ck/vocab.txt")
cp "$tmp/ck/checkpoint.safetensors" "$tmp/w.safetensors"
vocab_refused() { # description contents pattern
  printf "$2" >"$tmp/vocab.txt"
  if expect_rc 2 "vocab.txt: $1" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/w.safetensors" --tokens 2; then
    check "vocab.txt: $1" "$3" "$tmp/err"
  fi
}
vocab_refused "trailing text" "$good\nmore\n" "vocab.txt:2:1: text after the 16 entries the count announces"
vocab_refused "a repeated byte" "16 0a202c3a61626568696e6f7172737474\n" "vocab.txt:1:34: entry 15 (byte 0x74) repeats entry 14"
vocab_refused "more entries than the embedding" "26 0a202c3a61626568696e6f71727374757677787a7b7c7d7e7f80\n" \
  "vocab.txt:1: 26 entries, more than the 24 token ids the model's 'wte' takes"
printf '%s\n' "$good" >"$tmp/vocab.txt"
expect_rc 0 "vocab.txt as written" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/w.safetensors" --tokens 2

echo "generate_checks: $tests tests, $failed failed"
[ "$failed" = 0 ]
