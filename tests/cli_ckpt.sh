#!/bin/sh
# tests/cli_ckpt.sh: checkpoints and signals as `baton run` users meet them (issue 11). The
# checkpoint directory is created like mkdir -p and refused before step 1 when it cannot be
# used; numbered checkpoints beyond --keep-last are removed and checkpoint.safetensors is the
# newest; --checkpoint-shards writes shards and an index that --resume and predict read; --checkpoint-every without a directory, --resume with --init, a resume with another
# batch size and missing files exit 2; --epochs beats train.steps; --init-partial lists what it
# skipped; SIGINT mid-epoch finishes the step, writes a checkpoint, prints the summary and exits
# 130, and resuming from it ends bit-identical to an uninterrupted run; SIGTERM exits 143; a
# second SIGINT stops at once; JSON records survive strange paths, --log-file and --log-every
# work, the progress bar fits the terminal; --plugin loads a library of custom ops (tests/plugin_myops.c) and
# names the library when it cannot. Prints "cli_ckpt: N tests, N failed" like the CUnit programs.
. "$(dirname "$0")/cli_lib.sh"
mlp="$srcdir/models/mlp.yaml"   # 4096 synthetic samples, batch 64: 64 steps an epoch; train.steps 200

check() { # description test...
  what=$1; shift
  tests=$((tests + 1))
  "$@" || fail "$what"
}
no_steps() { ! grep -q '"step"\|^step ' "$tmp/out"; }

# --checkpoint-shards in one process: a shard per stage and the index (the latest), resumed by --resume
# and read by predict; without a directory it is refused (docs/checkpoints.md; tests/test_ckpt_shards)
if expect_rc 0 "--checkpoint-shards" "$baton" run "$mlp" --steps 3 --checkpoint-dir "$tmp/sh" --checkpoint-shards; then
  check "--checkpoint-shards writes 2 shards and the index: $(ls "$tmp/sh")" \
    test "$(cd "$tmp/sh" && ls checkpoint* | tr '\n' ' ')" = \
         "checkpoint-00000003-00001-of-00002.safetensors checkpoint-00000003-00002-of-00002.safetensors checkpoint-00000003.safetensors.index.json checkpoint.safetensors.index.json "
  expect_rc 0 "--resume a sharded checkpoint" "$baton" run "$mlp" --steps 4 --resume "$tmp/sh"
  expect_rc 0 "predict --weights a sharded checkpoint" "$baton" predict "$mlp" --weights "$tmp/sh" --data train
fi
expect_rc 2 "--checkpoint-shards without a directory" "$baton" run "$mlp" --steps 1 --checkpoint-shards &&
  check "--checkpoint-shards without a directory names it" grep -q "sharded checkpoints were asked for" "$tmp/err"

# the README's own example: a directory whose parents do not exist yet
if expect_rc 0 "nested checkpoint dir" "$baton" run "$mlp" --steps 5 --checkpoint-dir "$tmp/runs/a/b" \
     --checkpoint-every 1 --keep-last 2; then
  check "keep-last 2 keeps steps 4 and 5: $(ls "$tmp/runs/a/b")" \
    test "$(cd "$tmp/runs/a/b" && ls checkpoint-*.safetensors | tr '\n' ' ')" = \
         "checkpoint-00000004.safetensors checkpoint-00000005.safetensors "
  check "checkpoint.safetensors is the newest" \
    test "$(stat -c %i "$tmp/runs/a/b/checkpoint.safetensors")" = "$(stat -c %i "$tmp/runs/a/b/checkpoint-00000005.safetensors")"
fi
expect_rc 0 "keep all" "$baton" run "$mlp" --steps 3 --checkpoint-dir "$tmp/all" --checkpoint-every 1 \
  train.checkpoint_keep_last=0 &&
  check "train.checkpoint_keep_last=0 keeps every checkpoint: $(ls "$tmp/all")" \
    test "$(ls "$tmp/all" | grep -c '^checkpoint-')" = 3
expect_rc 0 "default keep" "$baton" run "$mlp" --steps 3 --checkpoint-dir "$tmp/one" --checkpoint-every 1 &&
  check "by default one numbered checkpoint is kept: $(ls "$tmp/one")" \
    test "$(ls "$tmp/one" | tr '\n' ' ')" = "checkpoint-00000003.safetensors checkpoint.safetensors "

# a directory that cannot be made or written is refused before step 1 (exit 2)
: >"$tmp/plainfile"
if expect_rc 2 "checkpoint dir under a file" "$baton" run "$mlp" --steps 3 --log-format jsonl \
     --checkpoint-dir "$tmp/plainfile/ck"; then
  check "under a file: refused before step 1: $(cat "$tmp/out")" no_steps
  check "under a file: names the directory: $(cat "$tmp/err")" grep -q "plainfile/ck: cannot create the checkpoint directory" "$tmp/err"
fi
if [ "$(id -u)" != 0 ]; then   # root writes into read-only directories
  mkdir "$tmp/ro"; chmod 555 "$tmp/ro"
  if expect_rc 2 "read-only checkpoint dir" "$baton" run "$mlp" --steps 3 --log-format jsonl --checkpoint-dir "$tmp/ro"; then
    check "read-only: refused before step 1" no_steps
    check "read-only: says so: $(cat "$tmp/err")" grep -q "is not writable" "$tmp/err"
  fi
fi
if expect_rc 2 "checkpoint dir in /proc" "$baton" run "$mlp" --steps 3 --log-format jsonl --checkpoint-dir /proc/version/ck; then
  check "/proc: refused before step 1" no_steps
fi

# nothing is ignored silently
if expect_rc 2 "--checkpoint-every without a directory" "$baton" run "$mlp" --steps 3 --checkpoint-every 1; then
  check "--checkpoint-every alone: says why: $(cat "$tmp/err")" grep -q "no checkpoint directory was given" "$tmp/err"
fi
expect_rc 2 "train.checkpoint_every without a directory" "$baton" run "$mlp" --steps 3 train.checkpoint_every=1
expect_rc 0 "a checkpoint to start from" "$baton" run "$mlp" --steps 4 --checkpoint-dir "$tmp/base"
if expect_rc 2 "--resume with --init" "$baton" run "$mlp" --steps 6 --resume "$tmp/base" --init "$tmp/base"; then
  check "--resume with --init: says why: $(cat "$tmp/err")" grep -q "give one of them" "$tmp/err"
fi
if expect_rc 2 "resume with another batch size" "$baton" run "$mlp" --steps 6 --resume "$tmp/base" --batch 32; then
  check "batch size: names both: $(cat "$tmp/err")" grep -q "saved by a run of batch 64, but this run has batch 32" "$tmp/err"
fi
expect_rc 2 "--resume of a missing directory" "$baton" run "$mlp" --steps 3 --resume "$tmp/nothing-here"
expect_rc 2 "--init of a missing file" "$baton" run "$mlp" --steps 3 --init "$tmp/nothing.safetensors"
if expect_rc 2 "a missing data file" "$baton" run "$mlp" --steps 1 "data.train={type: npy, images: $tmp/x.npy, labels: $tmp/y.npy}"; then
  check "missing data file: names the key: $(cat "$tmp/err")" grep -q "data.train.images: $tmp/x.npy: No such file" "$tmp/err"
fi
expect_rc 0 "--init from a checkpoint directory" "$baton" run "$mlp" --steps 2 --init "$tmp/base"

# where no trainer runs (an inference model; a token model on generic synthetic inputs), the
# checkpoint flags are refused, naming the flag
if expect_rc 2 "inference with --checkpoint-dir" "$baton" run "$srcdir/models/mlp-infer.yaml" --steps 1 --checkpoint-dir "$tmp/inf"; then
  check "inference: names the flag: $(cat "$tmp/err")" grep -q "^baton run: --checkpoint-dir: .* has no train: section" "$tmp/err"
fi
tokens_model "$tmp/tokens.yaml"
expect_rc 2 "inference with --keep-last" "$baton" run "$srcdir/models/mlp-infer.yaml" --synthetic --steps 1 --keep-last 2
expect_rc 2 "inference with --init-partial" "$baton" run "$srcdir/models/mlp-infer.yaml" --synthetic --steps 1 --init-partial "$tmp/base"
# a token model trains through the trainer now: its checkpoint resumes (its data is synthetic)
expect_rc 0 "a token model with a checkpoint" "$baton" run "$tmp/tokens.yaml" --synthetic --steps 2 --checkpoint-dir "$tmp/tok"
expect_rc 0 "a token model resumed" "$baton" run "$tmp/tokens.yaml" --synthetic --steps 4 --resume "$tmp/tok"

# flags beat the file: --epochs 1 replaces train.steps 200 (64 batches an epoch)
if expect_rc 0 "--epochs beats train.steps" "$baton" run "$mlp" --epochs 1 --log-format jsonl; then
  check "--epochs 1: $(head -n 1 "$tmp/out")" grep -q '"steps": 64,' "$tmp/out"
fi

# --init-partial: a model with a wider head and an extra layer takes what fits and says what not
sed -e 's/name: head, op: linear, args: {out: 4}/name: head, op: linear, args: {out: 4}}\n  - {name: extra, op: linear, args: {out: 4}/' \
    -e 's/from: \[head, y\]/from: [extra, y]/' -e 's/^name: mlp$/name: mlp2/' "$mlp" >"$tmp/mlp2.yaml"
sed -i 's/name: fc2, op: linear, args: {out: 32}/name: fc2, op: linear, args: {out: 48}/' "$tmp/mlp2.yaml"
if expect_rc 0 "--init-partial" "$baton" run "$tmp/mlp2.yaml" --steps 1 --init-partial "$tmp/base"; then
  check "--init-partial: counts: $(head -n 3 "$tmp/out")" grep -q "loaded 3 parameters, skipped 3 tensors, 5 parameters keep" "$tmp/out"
  check "--init-partial: names the shape: $(cat "$tmp/out")" grep -q "skipped fc2.weight: shape \[32, 32\], the model's is \[48, 32\]" "$tmp/out"
  check "--init-partial: names the missing: $(cat "$tmp/out")" grep -q "not in the file: extra.weight" "$tmp/out"
fi
expect_rc 1 "--init of a file that does not fit" "$baton" run "$tmp/mlp2.yaml" --steps 1 --init "$tmp/base"

# SIGINT mid-epoch: the step finishes, a checkpoint is written, the summary printed, exit 130;
# resuming from that checkpoint ends bit-identical to an uninterrupted run of the same length.
# (A script's background job starts with SIGINT ignored; env --default-signal gives it back.)
fm="$srcdir/models/fashion-mlp.yaml"
# fashion-mlp says parallel: auto, which measures and may choose another layout in each run; a
# bit-for-bit comparison needs one layout in both (its former one)
run_fm() { "$baton" run "$fm" --synthetic --batch 64 --steps 40 --stages 2 --microbatches 8 --log-format jsonl "$@"; }
bg_fm() { exec env --default-signal=INT "$baton" run "$fm" --synthetic --batch 64 --steps 40 --stages 2 --microbatches 8 --log-format jsonl "$@"; }
wait_step() { # file step
  i=0
  while ! grep -q "\"step\": $2," "$1" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
}
bg_fm --checkpoint-dir "$tmp/int" >"$tmp/int.out" 2>"$tmp/int.err" &
bg=$!
wait_step "$tmp/int.out" 3
kill -INT $bg; wait $bg; rc=$?
check "SIGINT: exit $rc, expected 130: $(cat "$tmp/int.err")" test "$rc" = 130
check "SIGINT: interrupted record: $(tail -n 3 "$tmp/int.out" | cut -c1-200)" grep -q '"interrupted": "SIGINT"' "$tmp/int.out"
check "SIGINT: summary printed" grep -q '"summary": true' "$tmp/int.out"
stopped=$(sed -n 's/.*"interrupted": "SIGINT", "step": \([0-9]*\),.*/\1/p' "$tmp/int.out")
check "SIGINT: stopped mid-run (step '$stopped')" test -n "$stopped" -a "${stopped:-0}" -lt 40
check "SIGINT: checkpoint of the step it stopped at" test -f "$tmp/int/checkpoint-$(printf %08d "${stopped:-0}").safetensors"
check "SIGINT: no evaluation after the signal" sh -c "! grep -q '\"eval\"' '$tmp/int.out'"
if expect_rc 0 "resume after SIGINT" run_fm --resume "$tmp/int" --checkpoint-dir "$tmp/int" &&
   expect_rc 0 "uninterrupted run" run_fm --checkpoint-dir "$tmp/whole"; then
  check "resumed after SIGINT = uninterrupted, bit for bit" cmp -s "$tmp/int/checkpoint.safetensors" "$tmp/whole/checkpoint.safetensors"
fi
# SIGTERM: the same, exit 143
bg_fm --checkpoint-dir "$tmp/term" >"$tmp/term.out" 2>"$tmp/term.err" &
bg=$!
wait_step "$tmp/term.out" 2
kill -TERM $bg; wait $bg; rc=$?
check "SIGTERM: exit $rc, expected 143" test "$rc" = 143
check "SIGTERM: interrupted record" grep -q '"interrupted": "SIGTERM"' "$tmp/term.out"
# a second SIGINT stops at once: sent while the step the first one waits for runs (steps of about
# half a second here), it ends the process without a summary
env --default-signal=INT "$baton" run "$fm" --synthetic --batch 2048 --steps 100000 --stages 2 --microbatches 8 \
  --log-format jsonl \
  >"$tmp/twice.out" 2>"$tmp/twice.err" &
bg=$!
wait_step "$tmp/twice.out" 1
kill -INT $bg
i=0
while ! grep -q "stopping after this step" "$tmp/twice.err" && [ $i -lt 200 ]; do sleep 0.01; i=$((i + 1)); done
kill -INT $bg; wait $bg; rc=$?
check "second SIGINT: exit $rc, expected 130" test "$rc" = 130
check "second SIGINT: stopped at once, no summary: $(cat "$tmp/twice.err")" sh -c "! grep -q '\"summary\"' '$tmp/twice.out'"
check "second SIGINT: says so" grep -q "stopping now" "$tmp/twice.err"

# JSON records come from a JSON library: a checkpoint path with '"' and '\' stays one valid record
weird="$tmp/we\"ird\\dir"
if expect_rc 0 "jsonl with a strange checkpoint path" "$baton" run "$mlp" --steps 2 --log-format jsonl --checkpoint-dir "$weird"; then
  if command -v python3 >/dev/null 2>&1; then
    check "strange path: every record is JSON, the path intact" python3 -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
paths = [r["checkpoint"] for r in recs if "checkpoint" in r]
assert paths == [sys.argv[2] + "/checkpoint-00000002.safetensors"], paths' "$tmp/out" "$weird"
  fi
fi
# --log-file: JSON records in the file while the terminal gets text; --log-every thins both
if expect_rc 0 "--log-file with --log-every" "$baton" run "$mlp" --steps 30 --log-every 10 --log-file "$tmp/run.jsonl"; then
  check "--log-every 10: text lines of steps 1, 10, 20, 30: $(grep '^step' "$tmp/out" | cut -c1-12 | tr '\n' ' ')" \
    test "$(grep '^step' "$tmp/out" | cut -d' ' -f2 | tr '\n' ' ')" = "1/30 10/30 20/30 30/30 "
  check "--log-file: step records 1, 10, 20, 30" \
    test "$(grep -o '^{"step": [0-9]*' "$tmp/run.jsonl" | cut -d' ' -f2 | tr '\n' ' ')" = "1 10 20 30 "
  check "--log-file: config, eval and summary records" grep -q '"summary": true' "$tmp/run.jsonl"
  check "--log-file: the terminal has no JSON" sh -c "! grep -q '^{' '$tmp/out'"
fi
expect_rc 2 "--log-file in a missing directory" "$baton" run "$mlp" --steps 1 --log-file "$tmp/no/such/dir/x.jsonl"
# the progress bar fits the terminal (60 columns here) and shows elapsed<ETA
if command -v script >/dev/null 2>&1; then
  script -qec "stty cols 60 rows 20; '$baton' run '$mlp' --steps 40" /dev/null >"$tmp/tty.out" 2>&1
  check "progress bar: drawn with elapsed<ETA: $(tr '\r' '\n' <"$tmp/tty.out" | grep -m1 '^\[')" \
    grep -q '\[#*-*\] .*40/40 .*[0-9]:[0-9][0-9]<0:00' "$tmp/tty.out"
  check "progress bar: no line wider than 59 columns" sh -c "tr '\r' '\n' <'$tmp/tty.out' | sed 's/\x1b\[K//g' | grep '^\[' | awk 'length > 59 {bad=1} END {exit bad}'"
fi

# --plugin: a library's baton_plugin_register registers ops the model file can name
plugin="$builddir/tests/.libs/libmyops.so"
sed -e 's/- {name: fc2, op: linear, args: {out: 32}, act: relu}/&\n  - {name: twice, op: myops.scale2}/' \
    -e 's/^name: mlp$/name: plug/' "$mlp" >"$tmp/plug.yaml"
if [ -f "$plugin" ]; then
  expect_rc 2 "custom op without its plugin" "$baton" check "$tmp/plug.yaml" &&
    check "no plugin: unknown op" grep -q "unknown op 'myops.scale2'" "$tmp/err"
  expect_rc 0 "check --plugin" "$baton" check "$tmp/plug.yaml" --plugin "$plugin"
  expect_rc 0 "run --plugin" "$baton" run "$tmp/plug.yaml" --steps 3 --plugin "$plugin"
  expect_rc 2 "--plugin of a missing library" "$baton" run "$tmp/plug.yaml" --plugin "$tmp/nope.so" &&
    check "missing plugin: names it: $(cat "$tmp/err")" grep -q "^baton run: --plugin $tmp/nope.so: cannot load it" "$tmp/err"
  # a library without the function (libm, by its bare name: looked up on the library path)
  expect_rc 2 "--plugin without the function" "$baton" plan "$tmp/plug.yaml" --plugin libm.so.6 &&
    check "no function: says which: $(cat "$tmp/err")" grep -q "^baton plan: --plugin libm.so.6: the library has no function baton_plugin_register" "$tmp/err"
else
  echo "note: no $plugin (a static-only build): --plugin not tested"
fi

echo "cli_ckpt: $tests tests, $failed failed"
[ "$failed" -eq 0 ]
