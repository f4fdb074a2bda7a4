#!/bin/sh
# tests/cli_messages.sh: every message says what happened, in the documented exit code (issue 29,
# rule B). A message that quotes the thread's own message is not garbled (bt_error's arguments may
# alias its buffer); a custom op (tests/plugin_myops.c) that fails without a message, or whose
# registration does, is named, and NaN it writes is blamed on it and its layer, not the data; npy
# files baton cannot read (big-endian, Fortran order, f16, truncated) exit 2; --tensorboard FILE
# exits 2 before the configuration table; more than 16 devices in a training profile are refused
# before anything is measured; --memory figures keep a readable unit; --batch and --microbatches on
# the command line are checked against each other; a checkpoint lost to a full disk (a small
# tmpfs, where this user may mount one) names the step lost and the step kept; generate's option
# errors are baton's own. Prints "cli_messages: N tests, N failed".
. "$(dirname "$0")/cli_lib.sh"
mlp="$srcdir/models/mlp.yaml"
plugin="$builddir/tests/.libs/libmyops.so"

check() { what=$1; shift; tests=$((tests + 1)); "$@" || fail "$what"; }
has() { # description pattern file
  tests=$((tests + 1))
  grep -q -- "$2" "$3" || fail "$1: no '$2' in: $(head -c 600 "$3")"
}
lacks() { # description pattern file
  tests=$((tests + 1))
  ! grep -q -- "$2" "$3" || fail "$1: '$2' in: $(head -c 600 "$3")"
}
if ! command -v python3 >/dev/null 2>&1; then
  echo "cli_messages: python3 is needed (npy and text files); skipping"
  exit 77
fi

# 1. a message quoting the current one (bt_error(st, "%s: %s", path, bt_last_error())) reads whole
python3 - "$tmp" <<'PY'
import random, sys
r = random.Random(3)
words = ["the", "king", "shall", "come", "to", "rome"]
open(sys.argv[1] + "/tr.txt", "w").write(" ".join(r.choice(words) for _ in range(2000)))
open(sys.argv[1] + "/ev.txt", "w").write(" ".join(r.choice(words) for _ in range(300)) + " Zebra")
PY
cat >"$tmp/lm.yaml" <<YAML
format: 1
name: textlm
inputs:
  idx: {shape: [8], dtype: i32}
  label: {shape: [8], dtype: i32}
layers:
  - {name: wte, op: embedding, args: {num: 40, dim: 16}}
  - {name: head, op: linear, args: {out: 40}}
  - {name: loss, op: cross_entropy, from: [head, label]}
train: {batch: 4}
data:
  train: {type: text, path: $tmp/tr.txt}
  eval: {type: text, path: $tmp/ev.txt}
YAML
expect_rc 2 "an eval byte outside the vocabulary" "$baton" run "$tmp/lm.yaml" --steps 1 &&
  has "the eval byte: one path, then the whole message" \
    "^baton run: $tmp/ev.txt: text: byte 0x5a at offset [0-9]* is not in the vocabulary of 15$" "$tmp/err"
printf '{"step": "x", "loss": 1}\n' >"$tmp/bad.jsonl"
expect_rc 2 "plot of a bad record" "$baton" plot "$tmp/bad.jsonl" -o "$tmp/bad.svg" &&
  has "plot: file:line, then the whole message" "^baton plot: $tmp/bad.jsonl:1: a step record's step is not a number$" "$tmp/err"

# 2. custom ops that fail without a message, or write NaN
custom_model() { # file op
  cat >"$1" <<YAML
format: 1
name: custom
inputs:
  x: {shape: [16], dtype: f32}
  y: {shape: [], dtype: i32}
layers:
  - {name: fc1, op: linear, args: {out: 8}}
  - {name: bad, op: $2}
  - {name: head, op: linear, args: {out: 4}}
  - {name: loss, op: cross_entropy, from: [head, y]}
parallel: {devices: [cpu:0, cpu:1], pipeline: {microbatches: 2}}
train: {batch: 8}
data: synthetic
YAML
}
if [ -f "$plugin" ]; then
  custom_model "$tmp/fail.yaml" myops.fail
  expect_rc 1 "a custom op failing without a message" "$baton" run "$tmp/fail.yaml" --steps 1 --plugin "$plugin" &&
    has "silent failure: the op and the layer" \
      "forward of layer 'bad' (micro-batch 0): op 'myops.fail' failed (backend error) without saying why" "$tmp/err"
  expect_rc 2 "a registration failing without a message" env BATON_TEST_MYOPS_REFUSE=1 "$baton" check "$tmp/fail.yaml" \
    --plugin "$plugin" &&
    has "silent registration: the status" "baton_plugin_register failed: it returned 'internal error' without a message$" "$tmp/err"
  custom_model "$tmp/nan.yaml" myops.nan
  expect_rc 1 "a custom op writing NaN" "$baton" run "$tmp/nan.yaml" --steps 1 --plugin "$plugin" &&
    has "NaN forward: the op and the layer" \
      "stage 1, forward of layer 'bad' (micro-batch 0): op 'myops.nan' (a custom op) wrote NaN or infinity into its output from finite inputs at step 1" "$tmp/err"
  lacks "NaN forward: not the data" "in the data" "$tmp/err"
  custom_model "$tmp/nangrad.yaml" myops.nangrad
  expect_rc 1 "a custom op writing a NaN gradient" "$baton" run "$tmp/nangrad.yaml" --steps 1 --plugin "$plugin" &&
    has "NaN gradient: the op and the layer" \
      "backward of layer 'bad' (micro-batch [01]): op 'myops.nangrad' (a custom op) wrote NaN or infinity into the gradient of its input 0" "$tmp/err"
  lacks "NaN gradient: not the data" "in the data" "$tmp/err"
else
  echo "note: no $plugin (a static-only build): custom ops not tested"
fi

# 3. npy files the reader does not take are bad data files: exit 2, naming the file and why
BT_TESTS_DIR="$srcdir/tests" python3 - "$tmp" <<'PY'
import os, struct, sys
sys.path.insert(0, os.environ["BT_TESTS_DIR"])
from npy_write import npy
t, n = sys.argv[1], 16
def raw(name, descr, data, fortran=False):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': (%d, 4), }" % (descr, fortran, n)
    h = d + " " * ((64 - (10 + len(d) + 1) % 64) % 64) + "\n"
    open("%s/%s.npy" % (t, name), "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data)
npy(t + "/x.npy", "<f4", (n, 4), "f", [0.5] * (n * 4))
npy(t + "/y.npy", "<i4", (n,), "i", [i % 3 for i in range(n)])
raw("big_endian", ">f4", struct.pack(">%df" % (n * 4), *[0.5] * (n * 4)))
raw("fortran", "<f4", struct.pack("<%df" % (n * 4), *[0.5] * (n * 4)), True)
raw("half", "<f2", b"\0\0" * (n * 4))
raw("truncated", "<f4", struct.pack("<%df" % (n * 2), *[0.5] * (n * 2)))
PY
npy_model() { # file x-file [classic]
  { printf 'format: 1\nname: np\ninputs:\n  x: {shape: [4], dtype: f32}\n  y: {shape: [], dtype: i32}\n'
    printf 'layers:\n  - {name: head, op: linear, args: {out: 3}}\n  - {name: loss, op: cross_entropy, from: [head, y]}\n'
    printf 'train: {batch: 8}\ndata:\n'
    if [ -n "${3:-}" ]; then printf '  train: {type: npy, images: %s, labels: %s/y.npy}\n' "$2" "$tmp"
    else printf '  train: {type: npy, inputs: {x: %s, y: %s/y.npy}}\n' "$2" "$tmp"; fi
  } >"$1"
}
for bad in big_endian:"dtype '>f4' is not supported" fortran:"fortran_order is True" half:"dtype '<f2' is not supported" \
           truncated:"truncated: shape needs 256 data bytes, the file has 128"; do
  name=${bad%%:*}; why=${bad#*:}
  npy_model "$tmp/np_$name.yaml" "$tmp/$name.npy"
  expect_rc 2 "npy $name (inputs:)" "$baton" run "$tmp/np_$name.yaml" --steps 1 &&
    has "npy $name: names the file and why" "$tmp/$name.npy: $why" "$tmp/err"
  npy_model "$tmp/np_pair_$name.yaml" "$tmp/$name.npy" classic
  expect_rc 2 "npy $name (images: and labels:)" "$baton" run "$tmp/np_pair_$name.yaml" --steps 1 &&
    has "npy pair $name: names the file" "$tmp/$name.npy" "$tmp/err"
done
npy_model "$tmp/np.yaml" "$tmp/x.npy"
if expect_rc 0 "npy: a good file trains" "$baton" run "$tmp/np.yaml" --steps 1 --checkpoint-dir "$tmp/np.ck"; then
  expect_rc 2 "predict --input of a big-endian file" "$baton" predict "$tmp/np.yaml" --weights "$tmp/np.ck" \
    --input "x=$tmp/big_endian.npy" &&
    has "predict big-endian: names the file" "$tmp/big_endian.npy: dtype '>f4' is not supported" "$tmp/err"
fi

# 4. --tensorboard FILE: exit 2 before the configuration table, as --checkpoint-dir FILE
: >"$tmp/a_file"
for dir in "$tmp/a_file" "$tmp/a_file/sub"; do
  for flag in --tensorboard --checkpoint-dir; do
    expect_rc 2 "$flag $dir" "$baton" run "$mlp" --steps 1 $flag "$dir" &&
      check "$flag $dir: nothing printed before the refusal: $(head -c 200 "$tmp/out")" test ! -s "$tmp/out"
  done
done
expect_rc 2 "--tensorboard FILE: says so" "$baton" run "$mlp" --steps 1 --tensorboard "$tmp/a_file" &&
  has "--tensorboard FILE: names it" "^baton run: --tensorboard $tmp/a_file: not a directory" "$tmp/err"
expect_rc 2 "--tensorboard FILE/sub: says which part" "$baton" run "$mlp" --steps 1 --tensorboard "$tmp/a_file/sub" &&
  has "--tensorboard FILE/sub: names the file" "^baton run: --tensorboard $tmp/a_file/sub: $tmp/a_file is not a directory" "$tmp/err"

# 5. more than 16 devices in a training profile: refused before anything is measured
expect_rc 2 "profile on 17 devices" "$baton" profile "$mlp" --devices 'cpu*17' -o "$tmp/p17.json" &&
  has "17 devices: names the limit" "17 devices (cpu:0,.*,cpu:16): a training profile measures at most 16" "$tmp/err"
lacks "17 devices: nothing measured first" "layers on" "$tmp/out"

# 6. --memory: figures in a unit that keeps them readable
expect_rc 1 "--memory 1K" "$baton" run "$mlp" --steps 1 --memory 1K &&
  has "--memory 1K: the limit as given" "the limit given for each device (--memory; bt_engine_params.device_memory) is 1.0 KiB$" "$tmp/err"
lacks "--memory 1K: no 0.0 figure" " 0\.0 " "$tmp/err"
has "--memory 1K: the stage's need in KiB" "needs [0-9.]* KiB (weights [0-9.]* KiB" "$tmp/err"

# 7. --batch and --microbatches from the command line are checked against each other
if expect_rc 0 "--batch 96 --microbatches 3 (the file: batch 64, 4 micro-batches)" "$baton" run "$mlp" \
     --batch 96 --microbatches 3 --steps 1 --log-format jsonl; then
  has "--batch 96 --microbatches 3: runs them" '"microbatches": 3, .*"batch": 96' "$tmp/out"
fi
expect_rc 2 "--batch 96 --microbatches 5" "$baton" run "$mlp" --batch 96 --microbatches 5 --steps 1 &&
  has "--batch 96 --microbatches 5: says why" "96 is not divisible by parallel.pipeline.microbatches 5" "$tmp/err"
expect_rc 2 "--microbatches 3 against the file's batch 64" "$baton" run "$mlp" --microbatches 3 --steps 1

# 8. a checkpoint lost to a full disk names the step lost and the step kept
mkdir "$tmp/full"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=256k tmpfs "$tmp/full" 2>/dev/null; then
  trap 'umount "$tmp/full" 2>/dev/null; rm -rf "$tmp"' EXIT
  cat >"$tmp/ck.yaml" <<'YAML'
format: 1
name: ck
inputs:
  x: {shape: [64], dtype: f32}
  y: {shape: [], dtype: i32}
layers:
  - {name: fc1, op: linear, args: {out: 24}, act: relu}
  - {name: head, op: linear, args: {out: 4}}
  - {name: loss, op: cross_entropy, from: [head, y]}
train: {batch: 8}
data: synthetic
YAML
  if expect_rc 1 "a checkpoint on a full disk" "$baton" run "$tmp/ck.yaml" --steps 40 --checkpoint-every 1 --keep-last 0 \
       --checkpoint-dir "$tmp/full/ck"; then
    lost=$(sed -n 's/^baton run: step \([0-9]*\): the checkpoint of step \1 was not written .*/\1/p' "$tmp/err")
    check "full disk: the step lost: $(cat "$tmp/err")" test -n "$lost"
    if [ -n "$lost" ]; then
      kept=$((lost - 1))
      has "full disk: the cause, naming the checkpoint file" \
        "(.*/full/ck/checkpoint-0*$lost.safetensors: write: No space left on device)" "$tmp/err"
      has "full disk: the step kept" "; $tmp/full/ck keeps step $kept, the last good checkpoint$" "$tmp/err"
      check "full disk: the kept step is there" test -f "$tmp/full/ck/checkpoint-$(printf %08d "$kept").safetensors"
    fi
    lacks "full disk: no temporary named" "safetensors\.tmp\." "$tmp/err"
  fi
  umount "$tmp/full"
else
  echo "note: no tmpfs could be mounted (not root?): the full-disk checkpoint is not tested"
fi

# 9. generate's option errors in the form of every command's
expect_rc 2 "generate --bogus" "$baton" generate "$mlp" --bogus &&
  has "generate --bogus: baton's message" "^baton generate: unknown option '--bogus'$" "$tmp/err" &&
  has "generate --bogus: the hint" "^(baton generate --help lists the options" "$tmp/err"
expect_rc 2 "generate --weights without a value" "$baton" generate "$mlp" --weights &&
  has "generate --weights: needs a value" "^baton generate: --weights needs a value$" "$tmp/err"

echo "cli_messages: $tests tests, $failed failed"
[ "$failed" -eq 0 ]
