#!/bin/sh
# tests/cli_ignored.sh: nothing accepted and ignored (issue 29, rule A). vocab and val_fraction on
# data.eval, and data.train's val_fraction beside a data.eval, are errors at the key
# (file:line:col, or the override); a file's copy of a tied weight (head.weight beside wte.weight)
# loads only when bitwise equal to its source, else exit 2 naming both (--init, --init-partial,
# predict); `baton check --recompute stage` shows the activations `baton run` then reports, with
# and without recomputation; predict, profile and generate load --plugin (tests/plugin_myops.c) as
# run does. Prints "cli_ignored: N tests, N failed".
. "$(dirname "$0")/cli_lib.sh"
mlp="$srcdir/models/mlp.yaml"
plugin="$builddir/tests/.libs/libmyops.so"

check() { what=$1; shift; tests=$((tests + 1)); "$@" || fail "$what"; }
has() { # description pattern file
  tests=$((tests + 1))
  grep -q -- "$2" "$3" || fail "$1: no '$2' in: $(head -c 600 "$3")"
}
if ! command -v python3 >/dev/null 2>&1; then
  echo "cli_ignored: python3 is needed (text data, safetensors files, JSON); skipping"
  exit 77
fi

# a small language model on text, its output head tied to the embedding
python3 - "$tmp" <<'PY'
import random, sys
r = random.Random(5)
words = ["the", "king", "shall", "come", "to", "rome"]
for name, n in (("tr", 2000), ("ev", 300)):
    open("%s/%s.txt" % (sys.argv[1], name), "w").write(" ".join(r.choice(words) for _ in range(n)))
PY
lm_model() { # file eval-source [head-op]
  cat >"$1" <<YAML
format: 1
name: tiedlm
inputs:
  idx: {shape: [8], dtype: i32}
  label: {shape: [8], dtype: i32}
layers:
  - {name: wte, op: embedding, args: {num: 15, dim: 16}}
  - {name: wpe, op: pos_embedding, args: {num: 8}}
  - {name: head, op: linear, args: {out: 15, bias: false}, tie: wte}
  - {name: loss, op: cross_entropy, from: [head, label]}
parallel: {devices: [cpu:0], pipeline: {stages: 1, microbatches: 2}}
train: {batch: 4}
data:
  train: {type: text, path: $tmp/tr.txt}
YAML
  [ -n "$2" ] && printf '  eval: %s\n' "$2" >>"$1"
  return 0
}

# 1. the training source's keys on data.eval, and val_fraction with a data.eval
lm_model "$tmp/ev_vocab.yaml" "{type: text, path: $tmp/ev.txt, vocab: byte}"
expect_rc 2 "data.eval.vocab" "$baton" check "$tmp/ev_vocab.yaml" &&
  has "data.eval.vocab: at the key" "ev_vocab.yaml:15:[0-9]*: data.eval.vocab: the eval text is encoded with the vocabulary built from data.train" "$tmp/err"
lm_model "$tmp/ev_frac.yaml" "{type: text, path: $tmp/ev.txt, val_fraction: 0.5}"
expect_rc 2 "data.eval.val_fraction (text)" "$baton" run "$tmp/ev_frac.yaml" --steps 1 &&
  has "data.eval.val_fraction: at the key" "ev_frac.yaml:15:[0-9]*: data.eval.val_fraction: the eval source is evaluated whole" "$tmp/err"
lm_model "$tmp/ev_tok.yaml" "{type: tokens, path: $tmp/ev.bin, val_fraction: 0.2}"
expect_rc 2 "data.eval.val_fraction (tokens)" "$baton" check "$tmp/ev_tok.yaml" &&
  has "tokens: data.eval.val_fraction named" "data.eval.val_fraction" "$tmp/err"
lm_model "$tmp/tr_frac.yaml" "{type: text, path: $tmp/ev.txt}"
sed -i "s|  train: {type: text, path: $tmp/tr.txt}|  train: {type: text, path: $tmp/tr.txt, val_fraction: 0.2}|" "$tmp/tr_frac.yaml"
expect_rc 2 "data.train.val_fraction beside data.eval" "$baton" check "$tmp/tr_frac.yaml" &&
  has "data.train.val_fraction: at the key" "tr_frac.yaml:14:[0-9]*: data.train.val_fraction: data.eval is given" "$tmp/err"
lm_model "$tmp/lm.yaml" "{type: text, path: $tmp/ev.txt}"
expect_rc 2 "data.eval.vocab as an override" "$baton" check "$tmp/lm.yaml" data.eval.vocab=char &&
  has "override: named" "override 'data.eval.vocab=char': data.eval.vocab" "$tmp/err"
lm_model "$tmp/lm_split.yaml" ""
expect_rc 0 "val_fraction on data.train without data.eval" "$baton" check "$tmp/lm_split.yaml" data.train.val_fraction=0.2
expect_rc 0 "data.eval without the training keys" "$baton" check "$tmp/lm.yaml"

# 2. --init of a tied model: the file's head.weight must equal wte.weight, bit for bit
if expect_rc 0 "tied: a checkpoint to start from" "$baton" run "$tmp/lm.yaml" --steps 2 --checkpoint-dir "$tmp/ck"; then
  python3 - "$tmp" <<'PY'
import json, struct, sys
t = sys.argv[1]
b = open(t + "/ck/checkpoint.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
def raw(name):
    o = h[name]["data_offsets"]; return data[o[0]:o[1]]
def write(path, tensors):
    hdr, blob = {}, b""
    for name, (shape, r) in tensors.items():
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(r)]}
        blob += r
    j = json.dumps(hdr).encode(); j += b" " * ((8 - len(j) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(j)) + j + blob)
w, p = raw("wte.weight"), raw("wpe.weight")
d = bytearray(w); d[5] ^= 1  # one bit of one element
write(t + "/same.safetensors", {"wte.weight": ([15, 16], w), "wpe.weight": ([8, 16], p), "head.weight": ([15, 16], w)})
write(t + "/differ.safetensors", {"wte.weight": ([15, 16], w), "wpe.weight": ([8, 16], p), "head.weight": ([15, 16], bytes(d))})
write(t + "/copy_only.safetensors", {"wpe.weight": ([8, 16], p), "head.weight": ([15, 16], w)})
PY
  expect_rc 0 "tied: --init with an equal head.weight" "$baton" run "$tmp/lm.yaml" --steps 1 --init "$tmp/same.safetensors"
  for how in --init --init-partial; do
    expect_rc 2 "tied: $how with a different head.weight" "$baton" run "$tmp/lm.yaml" --steps 1 $how "$tmp/differ.safetensors" &&
      has "tied $how: names both" "differ.safetensors: tensor 'head.weight' differs from 'wte.weight', to which the model ties it" "$tmp/err"
  done
  expect_rc 2 "tied: predict --weights with a different head.weight" "$baton" predict "$tmp/lm.yaml" \
    --weights "$tmp/differ.safetensors" --data eval &&
    has "tied predict: names both" "tensor 'head.weight' differs from 'wte.weight'" "$tmp/err"
  if expect_rc 0 "tied: --init-partial with the copy alone" "$baton" run "$tmp/lm.yaml" --steps 1 \
       --init-partial "$tmp/copy_only.safetensors"; then
    has "tied partial: the copy is reported, not loaded" "skipped head.weight: tied to wte.weight, which the file lacks" "$tmp/out"
  fi
fi

# 3. check --recompute shows the activations the run holds (the memory model's, both commands)
for rec in none stage; do
  expect_rc 0 "check --recompute $rec" "$baton" check "$mlp" --recompute "$rec" --json && cp "$tmp/out" "$tmp/check_$rec.json"
  expect_rc 0 "run --recompute $rec" "$baton" run "$mlp" --recompute "$rec" --steps 2 --log-format jsonl &&
    grep '"summary": true' "$tmp/out" >"$tmp/run_$rec.json"
  check "check and run: the same activation bytes per stage (--recompute $rec)" python3 - "$tmp/check_$rec.json" "$tmp/run_$rec.json" <<'PY'
import json, sys
c = [s["activation_bytes"] for s in json.load(open(sys.argv[1]))["plan"]["stages"]]
r = [s["activation_peak_bytes"] for s in json.load(open(sys.argv[2]))["stages"]]
print("check %s, run %s" % (c, r))
sys.exit(0 if c == r else 1)
PY
done
check "check: recomputation holds fewer activation bytes on stage 0" python3 - "$tmp/check_none.json" "$tmp/check_stage.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["plan"]["stages"][0]["activation_bytes"] for p in sys.argv[1:])
sys.exit(0 if b < a else 1)
PY

# 4. --plugin in predict, profile and generate, as in run
if [ -f "$plugin" ]; then
  sed -e 's/- {name: fc2, op: linear, args: {out: 32}, act: relu}/&\n  - {name: twice, op: myops.scale2}/' \
      -e 's/^name: mlp$/name: plug/' "$mlp" >"$tmp/plug.yaml"
  if expect_rc 0 "run --plugin (weights)" "$baton" run "$tmp/plug.yaml" --steps 2 --plugin "$plugin" \
       --checkpoint-dir "$tmp/plug.ck"; then
    expect_rc 2 "predict without the plugin" "$baton" predict "$tmp/plug.yaml" --weights "$tmp/plug.ck" --data train &&
      has "predict without it: unknown op" "unknown op 'myops.scale2'" "$tmp/err"
    expect_rc 0 "predict --plugin" "$baton" predict "$tmp/plug.yaml" --weights "$tmp/plug.ck" --data train --plugin "$plugin" &&
      has "predict --plugin: predicted" "^predicted 4096 samples" "$tmp/out"
  fi
  expect_rc 0 "profile --plugin" "$baton" profile "$tmp/plug.yaml" --plugin "$plugin" --repeats 1 --warmup 0 \
    -o "$tmp/plug.profile.json" && has "profile --plugin: measures the custom layer" " twice  *myops.scale2 " "$tmp/out"
  expect_rc 2 "profile --plugin of a missing library" "$baton" profile "$tmp/plug.yaml" --plugin "$tmp/nope.so" &&
    has "profile: names the library" "^baton profile: --plugin $tmp/nope.so: cannot load it" "$tmp/err"
  sed -e 's/- {name: wpe, op: pos_embedding, args: {num: 8}}/&\n  - {name: twice, op: myops.scale2}/' \
      -e '/^  eval: /d' "$tmp/lm.yaml" >"$tmp/plug_lm.yaml"
  if expect_rc 0 "text run --plugin" "$baton" run "$tmp/plug_lm.yaml" --steps 2 --plugin "$plugin" \
       --checkpoint-dir "$tmp/plug_lm.ck"; then
    expect_rc 2 "generate without the plugin" "$baton" generate "$tmp/plug_lm.yaml" --weights "$tmp/plug_lm.ck" --tokens 4 &&
      has "generate without it: unknown op" "unknown op 'myops.scale2'" "$tmp/err"
    expect_rc 0 "generate --plugin" "$baton" generate "$tmp/plug_lm.yaml" --weights "$tmp/plug_lm.ck" --tokens 4 --prompt the \
      --plugin "$plugin" && has "generate --plugin: tokens per second" "tokens/s" "$tmp/out"
  fi
else
  echo "note: no $plugin (a static-only build): --plugin not tested"
fi

echo "cli_ignored: $tests tests, $failed failed"
[ "$failed" -eq 0 ]
