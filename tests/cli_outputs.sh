#!/bin/sh
# tests/cli_outputs.sh: no output may destroy an input, and outputs are written as the user named
# them (issue 29). Every command that writes files (run, predict, profile, plot) is given each of
# its outputs (--log-file, --trace, --timeline, --checkpoint-dir, --output, -o, the default profile
# name) naming each kind of input it reads (the model file and a symbolic link to it, npy data of
# the model's data: section, the text of a language model, a checkpoint under either of its hard-
# linked names, a shard of a sharded checkpoint, --input, --labels, --weights, a run file): each
# must exit 2 with a message naming both paths, and the input must be byte for byte unchanged.
# Then the atomic writer (io/atomic_file.h): an output that is a FIFO (with a reader), /dev/stdout
# on a pipe or /dev/null is written through and stays what it was; a symbolic link (to an existing
# file in another directory, or dangling) stays a link and its target gets the contents, with no
# temporary file left beside either. Prints "cli_outputs: N tests, N failed".
. "$(dirname "$0")/cli_lib.sh"

if ! command -v python3 >/dev/null 2>&1; then
  echo "cli_outputs: python3 is needed to write npy files; skipping"
  exit 77
fi
check() { # description grep-pattern file
  tests=$((tests + 1))
  grep -q -- "$2" "$3" || { fail "$1: no '$2' in: $(head -c 600 "$3")"; return 1; }
}
cd "$tmp" || exit 1   # short relative names in the messages

BT_TESTS_DIR="$srcdir/tests" python3 - <<'PY'
import os, random, sys
sys.path.insert(0, os.environ["BT_TESTS_DIR"])
from npy_write import npy
r = random.Random(29)
x = [r.randrange(-512, 512) / 256 for _ in range(64 * 16)]
npy("x.npy", "<f4", (64, 16), "f", x)
npy("y.npy", "<i4", (64,), "i", [int(x[i * 16] > 0) + 2 * int(x[i * 16 + 1] > 0) for i in range(64)])
npy("ex.npy", "<f4", (32, 16), "f", x[:32 * 16])
npy("ey.npy", "<i4", (32,), "i", [int(x[i * 16] > 0) + 2 * int(x[i * 16 + 1] > 0) for i in range(32)])
with open("text.txt", "w") as f:
    f.write(" ".join(r.choice(["to", "be", "or", "not", "ROMEO:"]) for _ in range(400)))
PY
cat >m.yaml <<'YAML'
format: 1
name: outs
inputs:
  x: {shape: [16], dtype: f32}
  y: {shape: [], dtype: i32}
layers:
  - {name: fc1, op: linear, args: {out: 16}, act: relu}
  - {name: head, op: linear, args: {out: 4}}
  - {name: loss, op: cross_entropy, from: [head, y]}
parallel: {devices: [cpu:0, cpu:1], pipeline: {stages: 2, microbatches: 2}}
train: {batch: 16, optimizer: {type: sgd, lr: 0.05}}
data:
  train: {type: npy, images: x.npy, labels: y.npy}
  eval: {type: npy, images: ex.npy, labels: ey.npy}
YAML
cat >lm.yaml <<'YAML'
format: 1
name: lm
inputs:
  idx: {shape: [8], dtype: i32}
  label: {shape: [8], dtype: i32}
layers:
  - {name: wte, op: embedding, args: {num: 40, dim: 8}}
  - {name: head, op: linear, args: {out: 40}}
  - {name: loss, op: cross_entropy, from: [head, label]}
parallel: {devices: [cpu:0], pipeline: {stages: 1}}
train: {batch: 4}
data:
  train: {type: text, path: text.txt}
YAML
ln -s m.yaml link.yaml

# checkpoints to read: a plain one (checkpoint.safetensors a hard link to the numbered file) and
# a sharded one; a run file for plot
expect_rc 0 "a run writing a checkpoint" "$baton" run m.yaml --steps 2 --checkpoint-dir ck --log-format jsonl ||
  exit 1
cp "$tmp/out" r.jsonl
expect_rc 0 "a run writing a sharded checkpoint" "$baton" run m.yaml --steps 2 --checkpoint-dir sh --checkpoint-shards ||
  exit 1
shard=$(ls sh | grep -- '-of-.*\.safetensors$' | head -n 1)
mkdir keep
for f in m.yaml x.npy y.npy ex.npy ey.npy text.txt ck/checkpoint.safetensors ck/checkpoint-00000002.safetensors \
         link.yaml "sh/$shard" r.jsonl; do
  cp "$f" "keep/$(echo "$f" | tr / _)"
done

# refused OUTPUT-OPTION OUTPUT INPUT WHAT COMMAND...: exit 2, the message names the option, the
# output and the input (and says which input it is), and INPUT keeps its bytes
refused() {
  r_opt=$1; r_out=$2; r_in=$3; r_what=$4; shift 4
  if expect_rc 2 "$r_opt $r_out over $r_in ($r_what)" "$@"; then
    check "$r_opt $r_out over $r_in: the message" "$r_opt $r_out is the same file as the input $r_in ($r_what)" "$tmp/err"
  fi
  tests=$((tests + 1))
  cmp -s "$r_in" "keep/$(echo "$r_in" | tr / _)" || fail "$r_opt $r_out changed the input $r_in"
}

# 1. baton run
refused --log-file m.yaml m.yaml "the model file" "$baton" run m.yaml --steps 1 --log-file m.yaml
refused --trace m.yaml m.yaml "the model file" "$baton" run m.yaml --steps 1 --trace m.yaml
refused --timeline link.yaml m.yaml "the model file" "$baton" run m.yaml --steps 1 --timeline link.yaml
refused --log-file link.yaml link.yaml "the model file" "$baton" run link.yaml --steps 1 --log-file link.yaml
refused --log-file x.npy x.npy "data.train.images" "$baton" run m.yaml --steps 1 --log-file x.npy
refused --trace y.npy y.npy "data.train.labels" "$baton" run m.yaml --steps 1 --trace y.npy
refused --timeline ey.npy ey.npy "data.eval.labels" "$baton" run m.yaml --steps 1 --timeline ey.npy
refused --log-file text.txt text.txt "data.train.path" "$baton" run lm.yaml --steps 1 --log-file text.txt
plugin="$builddir/tests/.libs/libmyops.so"   # tests/plugin_myops.c, built by make check
if [ -f "$plugin" ]; then
  cp "$plugin" libmyops.so && cp libmyops.so keep/._libmyops.so
  refused --trace ./libmyops.so ./libmyops.so "--plugin" "$baton" run m.yaml --steps 1 --plugin ./libmyops.so --trace ./libmyops.so
fi
# the checkpoint being resumed, under its numbered name (the hard link) and its pointer name
refused --log-file ck/checkpoint-00000002.safetensors ck/checkpoint.safetensors "--resume ck" \
  "$baton" run m.yaml --steps 3 --resume ck --log-file ck/checkpoint-00000002.safetensors
tests=$((tests + 1))
cmp -s ck/checkpoint-00000002.safetensors keep/ck_checkpoint-00000002.safetensors ||
  fail "--log-file over the resumed checkpoint: its numbered name changed"
refused --trace ck/checkpoint.safetensors ck/checkpoint-00000002.safetensors "--resume ck/checkpoint-00000002.safetensors" \
  "$baton" run m.yaml --steps 3 --resume ck/checkpoint-00000002.safetensors --trace ck/checkpoint.safetensors
refused --log-file "sh/$shard" "sh/$shard" "--resume sh" "$baton" run m.yaml --steps 3 --resume sh --log-file "sh/$shard"
refused --timeline ck/checkpoint.safetensors ck/checkpoint.safetensors "--init ck" \
  "$baton" run m.yaml --steps 1 --init ck --timeline ck/checkpoint.safetensors
# a checkpoint directory replaces and prunes checkpoint files and writes vocab.txt: never over an
# input (--init from the directory itself, the training text as DIR/vocab.txt)
if expect_rc 2 "--checkpoint-dir holding the --init checkpoint" "$baton" run m.yaml --steps 1 --init ck --checkpoint-dir ck
then
  check "--checkpoint-dir over --init: the message" \
    "--checkpoint-dir ck: the run replaces or removes ck/checkpoint.*safetensors there, which is the same file as the input ck/checkpoint.safetensors (--init ck)" "$tmp/err"
fi
tests=$((tests + 1))
cmp -s ck/checkpoint.safetensors keep/ck_checkpoint.safetensors || fail "--checkpoint-dir over --init changed it"
mkdir lmck && ln text.txt lmck/vocab.txt
if expect_rc 2 "train.checkpoint_dir holding the training text as vocab.txt" "$baton" run lm.yaml --steps 1 \
     train.checkpoint_dir=lmck; then
  check "checkpoint dir over the text: the message" \
    "train.checkpoint_dir lmck: the run replaces or removes lmck/vocab.txt there, which is the same file as the input text.txt (data.train.path)" "$tmp/err"
fi
tests=$((tests + 1))
cmp -s text.txt keep/text.txt || fail "the checkpoint directory changed the training text"
# what still works: resuming into the directory it continues; a log and a trace beside the inputs
expect_rc 0 "--resume ck --checkpoint-dir ck (the run continues it)" "$baton" run m.yaml --steps 3 --resume ck \
  --checkpoint-dir ck --log-file ck/log.jsonl --trace t.json
check "the resumed run's log" '"step": 3' ck/log.jsonl
cp ck/checkpoint.safetensors keep/ck_checkpoint.safetensors

# 2. baton predict
refused --output x.npy x.npy "--input" "$baton" predict m.yaml --weights ck --input x.npy --output x.npy
refused --output y.npy y.npy "--labels" "$baton" predict m.yaml --weights ck --input x.npy --labels y.npy --output y.npy
refused --output ck/checkpoint-00000003.safetensors ck/checkpoint.safetensors "--weights ck" \
  "$baton" predict m.yaml --weights ck --input x.npy --output ck/checkpoint-00000003.safetensors
refused --output link.yaml m.yaml "the model file" "$baton" predict m.yaml --weights ck --input x.npy --output link.yaml
refused --output ex.npy ex.npy "data.eval.images" "$baton" predict m.yaml --weights ck --data eval --output ex.npy

# 3. baton profile: --output, and the default name <name>.profile.json
refused --output m.yaml m.yaml "the model file" "$baton" profile m.yaml --repeats 1 --warmup 0 --output m.yaml
cp m.yaml outs.profile.json && cp m.yaml keep/outs.profile.json
refused "the profile file" outs.profile.json outs.profile.json "the model file" \
  "$baton" profile outs.profile.json --repeats 1 --warmup 0

# 4. baton plot
refused -o r.jsonl r.jsonl "a run to draw" "$baton" plot r.jsonl -o r.jsonl
ln -s r.jsonl r-link.svg
refused -o r-link.svg r.jsonl "a run to draw" "$baton" plot r.jsonl -o r-link.svg

# 5. the atomic writer: FIFOs and devices are written through, symbolic links followed. The
# machine's own /dev/stdout (a link) and /dev/null come last, and only when the FIFO and the links
# in $tmp were handled right: a writer that replaced those would replace these too (as root).
safe=1
mkfifo fifo
timeout 60 cat fifo >from-fifo &   # bounded: a writer that never opens it must not hang the test
reader=$!
expect_rc 0 "plot -o a FIFO" "$baton" plot r.jsonl -o fifo || safe=0
wait $reader
check "plot -o FIFO: the reader got the SVG" "<svg" from-fifo || safe=0
tests=$((tests + 1))
[ -p fifo ] || { safe=0; fail "plot -o FIFO: the FIFO was replaced"; }
mkdir outdir links
echo old >outdir/report.svg
ln -s ../outdir/report.svg links/report.svg
ln -s ../outdir/new.json links/new.json   # dangling: its target does not exist yet
expect_rc 0 "plot -o a symbolic link" "$baton" plot r.jsonl -o links/report.svg || safe=0
tests=$((tests + 1))
[ -L links/report.svg ] && [ "$(readlink links/report.svg)" = ../outdir/report.svg ] ||
  { safe=0; fail "plot -o a symbolic link: the link was replaced"; }
check "plot -o a symbolic link: its target has the SVG" "<svg" outdir/report.svg || safe=0
expect_rc 0 "profile -o a dangling symbolic link" "$baton" profile m.yaml --repeats 1 --warmup 0 -o links/new.json ||
  safe=0
tests=$((tests + 1))
[ -L links/new.json ] && [ -f outdir/new.json ] ||
  { safe=0; fail "profile -o a dangling link: the link or its new target is missing"; }
check "profile -o a dangling link: the target holds the profile" '"layers"' outdir/new.json
tests=$((tests + 1))
[ -z "$(ls links outdir | grep '\.tmp\.')" ] || fail "temporary files left: $(ls links outdir)"
system_stays() { # what: /dev/stdout and /dev/null are still what they were
  tests=$((tests + 1))
  [ -c /dev/null ] || fail "$1: /dev/null is no longer a device (restore it: rm /dev/null; mknod -m 666 /dev/null c 1 3)"
  [ $stdout_link = 0 ] || [ -L /dev/stdout ] ||
    fail "$1: /dev/stdout is no longer a link (restore it: rm /dev/stdout; ln -s /proc/self/fd/1 /dev/stdout)"
}
stdout_link=0; [ -L /dev/stdout ] && stdout_link=1
if [ $safe = 1 ]; then
  tests=$((tests + 1))
  "$baton" plot r.jsonl -o /dev/stdout 2>"$tmp/err" | cat >piped.svg
  grep -q "<svg" piped.svg || fail "plot -o /dev/stdout through a pipe: no SVG: $(head -c 300 "$tmp/err")"
  system_stays "plot -o /dev/stdout"
  expect_rc 0 "plot -o /dev/null" "$baton" plot r.jsonl -o /dev/null
  system_stays "plot -o /dev/null"
  expect_rc 0 "profile -o /dev/null" "$baton" profile m.yaml --repeats 1 --warmup 0 -o /dev/null
  system_stays "profile -o /dev/null"
  expect_rc 0 "predict --output /dev/null" "$baton" predict m.yaml --weights ck --input x.npy --output /dev/null
  system_stays "predict --output /dev/null"
else
  fail "/dev/stdout and /dev/null not tried: the FIFO or the links above were replaced"
fi

echo "cli_outputs: $tests tests, $failed failed"
[ "$failed" = 0 ]
