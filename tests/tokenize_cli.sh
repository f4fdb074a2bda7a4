#!/bin/sh
# tests/tokenize_cli.sh: the `baton tokenize` command itself, on a small SentencePiece-style
# tokenizer.json written here (no Python, no regex: it runs in every build). Checks the output
# forms (ids on one line ended by a newline; --decode's text bytes exact, nothing added), the
# three inputs (--text, --file, standard input), --no-special and --keep-special, MODEL as a
# directory or the file, and the exit codes: 2 naming what is wrong for a missing tokenizer or
# input file, both inputs, a bad or unknown id, text that is not UTF-8 and an unsupported
# tokenizer.json feature (named by its JSON path); 1 when the output cannot be written.
. "$(dirname "$0")/cli_lib.sh"

mkdir -p "$tmp/tok"
cat >"$tmp/tok/tokenizer.json" <<'JSON'
{"version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [{"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
                  {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
 "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
 "pre_tokenizer": null,
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
 "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
 "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null, "end_of_word_suffix": null,
           "fuse_unk": true, "byte_fallback": true,
           "vocab": {"<unk>": 0, "<s>": 1, "\u2581": 2, "h": 3, "i": 4, "\u2581h": 5, "\u2581hi": 6, "<0x0A>": 7, "<0xC3>": 8, "<0xA9>": 9},
           "merges": ["\u2581 h", "\u2581h i"]}}
JSON
tk="$tmp/tok"

expect_rc 0 "encode --text" "$baton" tokenize "$tk" --text "hi hi" &&
  { [ "$(cat "$tmp/out")" = "1 6 6" ] && [ "$(wc -l <"$tmp/out")" = 1 ] || fail "encode --text: got '$(cat "$tmp/out")', want '1 6 6' and one newline"; }
expect_rc 0 "encode the file itself, from standard input" sh -c "printf 'hi\\n\\303\\251' | '$baton' tokenize '$tk/tokenizer.json'" &&
  { [ "$(cat "$tmp/out")" = "1 6 7 8 9" ] || fail "stdin: got '$(cat "$tmp/out")', want '1 6 7 8 9' (byte fallback)"; }
printf 'hi h' >"$tmp/in.txt"
expect_rc 0 "encode --file --no-special" "$baton" tokenize "$tk" --file "$tmp/in.txt" --no-special &&
  { [ "$(cat "$tmp/out")" = "6 5" ] || fail "--no-special: got '$(cat "$tmp/out")', want '6 5'"; }
expect_rc 0 "encode the empty text" "$baton" tokenize "$tk" --text "" &&
  { [ "$(cat "$tmp/out")" = "1" ] || fail "empty text: got '$(cat "$tmp/out")', want '1'"; }

# --decode: the text back, bytes exact, nothing added; specials left out unless --keep-special
printf 'hi\n\303\251 hi' >"$tmp/want"
expect_rc 0 "decode" "$baton" tokenize "$tk" --decode --text "1 6 7
8 9   6" && { cmp -s "$tmp/out" "$tmp/want" || fail "decode: got '$(od -c "$tmp/out" | head -3)'"; }
expect_rc 0 "decode --keep-special" "$baton" tokenize "$tk" --decode --keep-special --text "1 6" &&
  { [ "$(cat "$tmp/out")" = "<s> hi" ] || fail "--keep-special: got '$(cat "$tmp/out")', want '<s> hi'"; }
expect_rc 0 "decode(encode(x)) == x" sh -c "'$baton' tokenize '$tk' --file '$tmp/want' | '$baton' tokenize '$tk' --decode" &&
  { cmp -s "$tmp/out" "$tmp/want" || fail "round trip: got '$(od -c "$tmp/out" | head -3)'"; }

# exit 2, naming what is wrong
expect_rc 2 "an unknown id" "$baton" tokenize "$tk" --decode --text "1 6 10" &&
  { grep -q "id 10 (the 3rd" "$tmp/err" || fail "unknown id: $(cat "$tmp/err")"; }
expect_rc 2 "an id that is not a number" "$baton" tokenize "$tk" --decode --text "1 6x" &&
  { grep -q "the 2nd id, \"6x\", is not a token id" "$tmp/err" || fail "bad id: $(cat "$tmp/err")"; }
expect_rc 2 "text that is not UTF-8" sh -c "printf 'hi\\377' | '$baton' tokenize '$tk'" &&
  { grep -q "not valid UTF-8 (at byte 2)" "$tmp/err" || fail "bad UTF-8: $(cat "$tmp/err")"; }
expect_rc 2 "both --text and --file" "$baton" tokenize "$tk" --text x --file "$tmp/in.txt"
expect_rc 2 "a missing --file" "$baton" tokenize "$tk" --file "$tmp/nope.txt" &&
  { grep -q "nope.txt" "$tmp/err" || fail "missing file: $(cat "$tmp/err")"; }
expect_rc 2 "a missing tokenizer" "$baton" tokenize "$tmp/none" --text x &&
  { grep -q "$tmp/none" "$tmp/err" || fail "missing tokenizer: $(cat "$tmp/err")"; }
mkdir -p "$tmp/empty"
expect_rc 2 "a directory without tokenizer.json" "$baton" tokenize "$tmp/empty" --text x &&
  { grep -q "empty/tokenizer.json" "$tmp/err" || fail "no tokenizer.json: $(cat "$tmp/err")"; }
expect_rc 2 "--keep-special without --decode" "$baton" tokenize "$tk" --keep-special --text x
expect_rc 2 "no tokenizer" "$baton" tokenize --text x
expect_rc 2 "an unknown option" "$baton" tokenize "$tk" --txet x &&
  { grep -q "unknown option '--txet'" "$tmp/err" || fail "unknown option: $(cat "$tmp/err")"; }
mkdir -p "$tmp/bad"
sed 's/"dropout": null/"dropout": 0.1/' "$tk/tokenizer.json" >"$tmp/bad/tokenizer.json"
expect_rc 2 "an unsupported feature" "$baton" tokenize "$tmp/bad" --text x &&
  { grep -q "bad/tokenizer.json: model.dropout: is not supported" "$tmp/err" || fail "dropout: $(cat "$tmp/err")"; }
printf '{"tokenizer_class": "LlamaTokenizerFast", "add_eos_token": true}' >"$tmp/bad/tokenizer_config.json"
cp "$tk/tokenizer.json" "$tmp/bad/tokenizer.json"
expect_rc 2 "tokenizer_config.json's eos_token missing from the vocabulary" "$baton" tokenize "$tmp/bad" --text x &&
  { grep -q "tokenizer_config.json: eos_token \"</s>\" is not a token" "$tmp/err" || fail "eos: $(cat "$tmp/err")"; }
if [ -w /dev/full ]; then
  expect_rc 1 "output that cannot be written" sh -c "'$baton' tokenize '$tk' --text hi >/dev/full"
fi
expect_rc 0 "help" "$baton" help tokenize && { grep -q "usage: baton tokenize" "$tmp/out" || fail "help: $(cat "$tmp/out")"; }

echo "tokenize_cli: $tests tests, $failed failed"
[ "$failed" = 0 ]
