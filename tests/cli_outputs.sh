#!/bin/sh
# tests/cli_outputs.sh: outputs are written as the user named them (issue 29). The atomic writer
# (io/atomic_file.h): an output that is a FIFO (with a reader), /dev/stdout on a pipe or /dev/null
# is written through and stays what it was; a symbolic link (to an existing file in another
# directory, or dangling) stays a link and its target gets the contents, with no temporary file
# left beside either. Prints "cli_outputs: N tests, N failed".
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
