# cli_lib.sh: what the shell tests of the baton command share; each sources it first
# (`. "$(dirname "$0")/cli_lib.sh"`). It sets builddir, srcdir and baton (BT_BUILDDIR and BT_SRCDIR
# override them), the counters tests and failed, a temporary directory tmp removed on exit, and:
#   fail MESSAGE                    counts a failure and prints it
#   json_field FILE KEY, tokens_model FILE (below); Python blocks import tests/npy_write.py
#   expect_rc RC WHAT COMMAND...    runs COMMAND with stdout in $tmp/out and stderr in $tmp/err,
#                                   counts a test, and fails (printing the error's head) unless it
#                                   exited RC; returns 0 when it did
# Each script ends by printing its counts and exiting non-zero when anything failed.
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

# json_field FILE KEY: the last value of "KEY" in FILE's JSON records, as written
json_field() { grep "\"$2\": " "$1" | tail -n 1 | sed -E "s/.*\"$2\": ([^,}]*).*/\\1/"; }

# tokens_model FILE: a small model with token-id inputs (tokens [6] i32, label i32) on two stages
tokens_model() {
  cat >"$1" <<'YAML'
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
}
