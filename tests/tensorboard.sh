#!/bin/sh
# tests/tensorboard.sh: `baton run --tensorboard DIR` read back with TensorBoard's own reader (the
# PyPI `tensorboard` package, installed here with pip into $builddir/pydeps for Debian's python3;
# the test skips with 77 only when pip cannot install it). Trains models/mlp.yaml for 6 steps with
# evaluations and a checkpoint, resumes it to step 10 into the same DIR (a second event file), and
# checks with tests/tensorboard_check.py that every scalar TensorBoard finds equals the JSON record
# of the same step (the loss as float32), that steps 1..10 are complete and in order, that the
# configuration is a text summary, and that an event file cut mid-record (a killed run) reads up to
# its last whole record. In a build without protobuf-c it checks instead that --tensorboard and
# train.tensorboard are refused with exit 2 naming protobuf-c, then skips.
set -u
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
baton="$builddir/baton"
tests=0; failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
model="$srcdir/models/mlp.yaml"

if [ "${BT_HAVE_PROTOBUF_C:-1}" != 1 ]; then
  for how in "--tensorboard $tmp/runs/x" "train.tensorboard=$tmp/runs/x"; do
    tests=$((tests + 1))
    # shellcheck disable=SC2086
    "$baton" run "$model" --steps 1 $how >"$tmp/out" 2>"$tmp/err"; rc=$?
    [ "$rc" = 2 ] && grep -q 'protobuf-c' "$tmp/err" ||
      fail "without protobuf-c, $how: exit $rc, expected 2 naming protobuf-c: $(cat "$tmp/err")"
    [ ! -e "$tmp/runs/x" ] || fail "without protobuf-c, $how created the directory"
  done
  echo "tensorboard: $tests tests, $failed failed"
  [ "$failed" = 0 ] || exit 1
  echo "SKIP: this baton was built without protobuf-c: no event files to read"; exit 77
fi

# Debian's python3 (the one install-deps.sh gives pip), not whatever python3 is first on PATH
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
pydeps="$builddir/pydeps"
if ! PYTHONPATH="$pydeps" "$py" -c 'import tensorboard, numpy' 2>/dev/null; then
  "$py" -m pip install --quiet --disable-pip-version-check --target "$pydeps" tensorboard >"$tmp/pip" 2>&1 ||
    { cat "$tmp/pip"; echo "SKIP: pip cannot install tensorboard for $py"; exit 77; }
fi
check() { PYTHONPATH="$pydeps" "$py" "$srcdir/tests/tensorboard_check.py" "$@"; }

# run 1: steps 1..6, evaluations at 3 and 6, a checkpoint at 6; the directory does not exist yet
tests=$((tests + 1))
"$baton" run "$model" --steps 6 --eval-every 3 --checkpoint-dir "$tmp/ck" --log-format jsonl \
  --tensorboard "$tmp/runs/mlp" >"$tmp/a.jsonl" 2>"$tmp/err" || fail "run 1: $(cat "$tmp/err")"
tests=$((tests + 1))
check run "$tmp/runs/mlp" "$tmp/a.jsonl" 1 6 || fail "run 1: event file does not match its records"

# run 2: resumed to step 10 into the same directory, through the model file's key this time
tests=$((tests + 1))
"$baton" run "$model" --steps 10 --eval-every 3 --resume "$tmp/ck" --log-format jsonl \
  "train.tensorboard=$tmp/runs/mlp" >"$tmp/b.jsonl" 2>"$tmp/err" || fail "run 2: $(cat "$tmp/err")"
tests=$((tests + 1))
n=$(ls "$tmp/runs/mlp" | grep -c '^events\.out\.tfevents\.')
[ "$n" = 2 ] || fail "resumed run: $n event files in the run directory, expected 2"
tests=$((tests + 1))
cat "$tmp/a.jsonl" "$tmp/b.jsonl" >"$tmp/ab.jsonl"
check run "$tmp/runs/mlp" "$tmp/ab.jsonl" 1 10 || fail "resumed run: steps 1..10 do not match the records"

# a killed run: its file cut inside a record (header, data and footer) reads up to the record before
tests=$((tests + 1))
first=$(ls "$tmp/runs/mlp"/events.out.tfevents.* | head -n 1)
check truncated "$first" "$tmp/cut" || fail "truncated event file"

# a directory that cannot be created (a parent is a file): exit 2 before the configuration table,
# as --checkpoint-dir, the path named, nothing trained silently
tests=$((tests + 1))
: >"$tmp/file"
"$baton" run "$model" --steps 1 --tensorboard "$tmp/file/x" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "$tmp/file is not a directory" "$tmp/err" && [ ! -s "$tmp/out" ] ||
  fail "unwritable directory: exit $rc: $(cat "$tmp/err")"

echo "tensorboard: $tests tests, $failed failed"
[ "$failed" = 0 ]
