#!/bin/sh
# tests/cli.sh: the baton command as a user meets it. Every file in models/invalid/ fails
# `baton check` with exit 2 and "baton check: <file>:<line>:<col>: ..." (or "<file>: ...")
# containing the file's "# expect:" text; every shipped model passes `baton check`; `baton run`
# prints well-formed JSON records with --log-format jsonl; usage errors exit 2 and runtime
# failures exit 1. Prints "cli: N tests, N failed" like the CUnit programs.
set -u
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
baton="$builddir/baton"
tests=0; failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
expect_rc() { # expected-rc description command...
  want=$1; what=$2; shift 2
  tests=$((tests + 1))
  "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ "$rc" = "$want" ] || { fail "$what: exit $rc, expected $want"; sed 's/^/    /' "$tmp/err" | head -5; return 1; }
  return 0
}

for f in "$srcdir"/models/invalid/*.yaml; do
  expect=$(sed -n '1s/^# expect: //p' "$f")
  expect_rc 2 "check $(basename "$f")" "$baton" check "$f" || continue
  msg=$(head -n 1 "$tmp/err")
  case "$msg" in
    "baton check: $f:"[0-9]*:[0-9]*": "*|"baton check: $f: "*) ;;
    *) fail "$(basename "$f"): message does not start with the file's position: $msg"; continue ;;
  esac
  case "$msg" in
    *"$expect"*) ;;
    *) fail "$(basename "$f"): message lacks '$expect': $msg" ;;
  esac
done

for f in "$srcdir"/models/*.yaml; do
  expect_rc 0 "check $(basename "$f")" "$baton" check "$f"
done

if expect_rc 0 "run jsonl" "$baton" run "$srcdir/models/mlp.yaml" --steps 3 --log-format jsonl; then
  tests=$((tests + 1))
  steps=$(grep -c '^{"step": [0-9]*, .*"loss": .*"lr": .*"step_ms": .*"samples_per_s": .*"bubble": ' "$tmp/out")
  [ "$steps" = 3 ] || fail "run jsonl: expected 3 step records, got $steps: $(head -3 "$tmp/out")"
  if command -v python3 >/dev/null 2>&1; then
    tests=$((tests + 1))
    python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$tmp/out" 2>"$tmp/perr" ||
      fail "run jsonl: not JSON: $(cat "$tmp/perr")"
  fi
fi
# a model fed token ids (no float input): trained on generic synthetic inputs
cat >"$tmp/tokens.yaml" <<'YAML'
format: 1
name: tokens
inputs:
  tokens: {shape: [6], dtype: i32}
  label: {shape: [], dtype: i32}
layers:
  - {name: emb, op: embedding, args: {num: 50, dim: 8}}
  - {name: flat, op: flatten}
  - {name: head, op: linear, args: {out: 5}}
  - {name: loss, op: cross_entropy, from: [head, label]}
parallel: {devices: [cpu:0, cpu:1], pipeline: {microbatches: 2}}
train: {batch: 8}
YAML
if expect_rc 0 "run a token model" "$baton" run "$tmp/tokens.yaml" --steps 3; then
  tests=$((tests + 1))
  [ "$(grep -c '^step ' "$tmp/out")" = 3 ] || fail "token model: expected 3 step lines: $(cat "$tmp/out")"
fi
if expect_rc 0 "run inference" "$baton" run "$srcdir/models/mlp-infer.yaml" --steps 2; then
  tests=$((tests + 1))
  [ "$(grep -c '^batch .*latency .*samples/s' "$tmp/out")" = 2 ] || fail "inference: expected 2 batch lines: $(cat "$tmp/out")"
fi
expect_rc 0 "help" "$baton" --help
expect_rc 0 "run --help" "$baton" run --help
expect_rc 2 "no command" "$baton"
expect_rc 2 "unknown command" "$baton" frobnicate
expect_rc 2 "check without a model" "$baton" check
expect_rc 2 "bad flag value" "$baton" run "$srcdir/models/mlp.yaml" --steps zero
expect_rc 2 "bad override" "$baton" run "$srcdir/models/mlp.yaml" train.batch=abc
expect_rc 2 "missing model file" "$baton" check "$tmp/nope.yaml"
expect_rc 1 "missing init weights" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --init "$tmp/nope.safetensors"
if expect_rc 1 "plan too big for --memory" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --memory 4K; then
  tests=$((tests + 1))
  grep -q "the plan does not fit in memory: stage [0-9] (cpu:[0-9]) needs" "$tmp/err" ||
    fail "--memory: message does not name the stage: $(cat "$tmp/err")"
fi
expect_rc 0 "schedule grid" "$baton" schedule --stages 3 --microbatches 4 --validate

# transfers: the summary names each boundary's path; --transfer forces one
if expect_rc 0 "run, local transfers" "$baton" run "$srcdir/models/mlp.yaml" --steps 2; then
  tests=$((tests + 1))
  grep -q '^  0 -> 1 *activations *local ' "$tmp/out" || fail "summary lacks the local boundary: $(cat "$tmp/out")"
fi
if expect_rc 0 "run --transfer staged" "$baton" run "$srcdir/models/mlp.yaml" --steps 2 --transfer staged; then
  tests=$((tests + 1))
  grep -q '^  1 -> 0 *gradients *staged .*GB/s' "$tmp/out" || fail "summary lacks the staged boundary: $(cat "$tmp/out")"
fi
expect_rc 2 "bad --transfer" "$baton" run "$srcdir/models/mlp.yaml" --transfer teleport

# mixed precision: f16 with a loss scale far too big skips steps and says so, then trains on
if expect_rc 0 "f16 with an overflowing loss scale" "$baton" run "$srcdir/models/mlp.yaml" --steps 40 \
     train.precision=f16 train.loss_scale=1e10; then
  tests=$((tests + 1))
  grep -q '^step 1 skipped: gradients overflowed at loss scale 10000000000; scale now 5000000000' "$tmp/out" ||
    fail "f16: no skip message: $(head -5 "$tmp/out")"
  tests=$((tests + 1))
  [ "$(grep -c 'skipped' "$tmp/out")" -lt 40 ] || fail "f16: every step was skipped"
fi
if expect_rc 2 "loss_scale without f16" "$baton" check "$srcdir/models/mlp.yaml" train.loss_scale=1024; then
  tests=$((tests + 1))
  grep -q 'train.loss_scale only applies to precision: f16' "$tmp/err" || fail "loss_scale: $(cat "$tmp/err")"
fi
expect_rc 0 "bf16 run" "$baton" run "$srcdir/models/mlp.yaml" --steps 3 train.precision=bf16
# the watchdog: a value no deadline can hold is a usage error naming it (inf used to hang the run)
for w in inf nan 1e19 1.5e9 -1 0 "" 5s; do
  if expect_rc 2 "--watchdog '$w'" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --watchdog "$w"; then
    tests=$((tests + 1))
    grep -q -- "--watchdog must be seconds above 0 and at most 1e+09, not '$w'" "$tmp/err" ||
      fail "--watchdog '$w': $(cat "$tmp/err")"
  fi
done
expect_rc 0 "--watchdog 1e9" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --watchdog 1e9

echo "cli: $tests tests, $failed failed"
[ "$failed" = 0 ]
