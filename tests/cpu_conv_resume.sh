#!/bin/sh
# tests/cpu_conv_resume.sh: conv2d's per-layer path choices kept with the checkpoint, so that
# `baton run --resume` under BATON_CPU_CONV=auto continues bit for bit (cli/run_conv_record.c).
#   - the CNN (models/fashion-cnn.yaml, synthetic data, batch 32, 2 stages) trained 4 steps with a
#     checkpoint every 2, its timed choices all replaced by onednn (BATON_CPU_CONV_TEST_PICK, a test
#     knob), writes DIR/conv-paths.json listing both layers on onednn;
#   - resumed from its step-2 checkpoint in a process whose own choices would all be im2col, it
#     takes the record's paths (the listing says so) and ends with the uninterrupted run's final
#     checkpoint, bit for bit;
#   - the control: the same resume from a copy of the step-2 checkpoint without the record times
#     again (saying so), chooses im2col, and ends with other bits (so the comparison above can fail);
#   - BATON_CPU_CONV=im2col wins over the record and says so in one line;
#   - a malformed record, an unknown path, an unknown key: exit 2 naming the file (and the field);
#   - in a build without oneDNN: a record of onednn is exit 2 naming the file, the shape and the path;
#   - under mpirun (2 data-parallel replicas of one stage, where MPI is built): each rank writes
#     conv-paths.rank<N>.json, and the job resumed from step 2 with the other pick ends with the
#     uninterrupted job's final shard, bit for bit.
set -eu
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
model="$srcdir/models/fashion-cnn.yaml"
run() { "$builddir/baton" run "$model" --synthetic --steps 4 --batch 32 "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# expect2 NAME ARGS...: exit 2; stderr in $tmp/err
expect2() {
  name=$1; shift
  code=0; "$@" >"$tmp/out" 2>"$tmp/err" || code=$?
  [ "$code" = 2 ] || { cat "$tmp/out" "$tmp/err"; fail "$name: exit $code, expected 2"; }
  echo "$name: exit 2: $(tail -1 "$tmp/err")"
}

code=0; BATON_CPU_CONV_TEST_PICK=bogus run >/dev/null 2>"$tmp/err" || code=$?
[ "$code" = 2 ] && grep -q BATON_CPU_CONV_TEST_PICK "$tmp/err" || fail "BATON_CPU_CONV_TEST_PICK=bogus: exit $code"

if ! grep -q '^#define BATON_HAVE_DNNL 1' "$builddir/config.h" 2>/dev/null; then
  run --checkpoint-every 2 --keep-last 0 --checkpoint-dir "$tmp/a" >"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; fail "the first run"; }
  grep -q '"path": "im2col"' "$tmp/a/conv-paths.json" || fail "no record of im2col: $(cat "$tmp/a/conv-paths.json")"
  sed 's/"path": "im2col"/"path": "onednn"/' "$tmp/a/conv-paths.json" >"$tmp/x" && mv "$tmp/x" "$tmp/a/conv-paths.json"
  expect2 "a record of onednn without oneDNN" run --resume "$tmp/a/checkpoint-00000002.safetensors"
  grep -q "conv-paths.json: the conv2d of shape \[1, 28, 28\] -> \[32, 28, 28\] k3x3.* recorded on the path onednn" "$tmp/err" ||
    fail "the refusal does not name the file, the shape and the path: $(cat "$tmp/err")"
  echo "no oneDNN in this build: nothing else to compare"
  exit 0
fi

echo "== the uninterrupted run (every choice picked onednn)"
BATON_CPU_CONV_TEST_PICK=onednn run --checkpoint-every 2 --keep-last 0 --checkpoint-dir "$tmp/a" >"$tmp/a.log" 2>&1 ||
  { cat "$tmp/a.log"; fail "the first run"; }
for layer in conv1 conv2; do
  grep -Eq "^  $layer .*: onednn \([0-9.]+ ms; im2col [0-9.]+ ms; picked by BATON_CPU_CONV_TEST_PICK\)" "$tmp/a.log" ||
    { cat "$tmp/a.log"; fail "$layer was not timed and picked onednn"; }
done
rec="$tmp/a/conv-paths.json"
[ -f "$rec" ] || fail "no conv-paths.json beside the checkpoints: $(ls "$tmp/a")"
[ "$(grep -c '"path": "onednn"' "$rec")" -ge 4 ] || fail "the record does not list 4 choices on onednn: $(cat "$rec")"
/usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$rec" 2>/dev/null || fail "not JSON: $(cat "$rec")"

echo "== resumed from step 2 in a process that would pick im2col"
BATON_CPU_CONV_TEST_PICK=im2col run --resume "$tmp/a/checkpoint-00000002.safetensors" --checkpoint-dir "$tmp/b" >"$tmp/b.log" 2>&1 ||
  { cat "$tmp/b.log"; fail "the resumed run"; }
grep -q "conv2d: 4 path choices recorded in $tmp/a .* taken as recorded" "$tmp/b.log" || { cat "$tmp/b.log"; fail "the resume does not say it took the record"; }
for layer in conv1 conv2; do
  grep -Eq "^  $layer .*: onednn \(from the checkpoint's record, not timed\)" "$tmp/b.log" ||
    { cat "$tmp/b.log"; fail "$layer is not listed as taken from the record"; }
done
cmp -s "$tmp/a/checkpoint.safetensors" "$tmp/b/checkpoint.safetensors" ||
  fail "resumed from step 2 with the record != uninterrupted (the final checkpoints differ)"
echo "resumed = uninterrupted, bit for bit"

echo "== the control: the same resume without the record"
mkdir "$tmp/c0"
cp "$tmp/a/checkpoint-00000002.safetensors" "$tmp/c0/"
BATON_CPU_CONV_TEST_PICK=im2col run --resume "$tmp/c0/checkpoint-00000002.safetensors" --checkpoint-dir "$tmp/c" >"$tmp/c.log" 2>&1 ||
  { cat "$tmp/c.log"; fail "the resume without a record"; }
grep -q "has no record of the conv2d paths its run chose" "$tmp/c.log" || { cat "$tmp/c.log"; fail "the resume without a record does not say so"; }
grep -Eq "^  conv1 .*forward: im2col" "$tmp/c.log" || { cat "$tmp/c.log"; fail "the control did not choose im2col"; }
if cmp -s "$tmp/a/checkpoint.safetensors" "$tmp/c/checkpoint.safetensors"; then
  fail "without the record the resumed run still equals the uninterrupted one: the comparison above proves nothing"
fi
echo "without the record: other bits (as expected)"

echo "== BATON_CPU_CONV=im2col over the record"
BATON_CPU_CONV=im2col run --resume "$tmp/a/checkpoint-00000002.safetensors" >"$tmp/f.log" 2>"$tmp/f.err" ||
  { cat "$tmp/f.log" "$tmp/f.err"; fail "the forced resume"; }
[ "$(grep -c 'BATON_CPU_CONV=im2col overrides the 4 conv2d path choices recorded in' "$tmp/f.err")" = 1 ] ||
  fail "the forced resume does not say once that it overrides the record: $(cat "$tmp/f.err")"
grep -Eq "^  conv1 .*forward: im2col \(forced\)" "$tmp/f.log" || { cat "$tmp/f.log"; fail "the forced path was not taken"; }
echo "forced: $(cat "$tmp/f.err")"

echo "== bad records"
mkdir "$tmp/d"
cp "$tmp/a/checkpoint-00000002.safetensors" "$tmp/d/"
printf '{"format": 1, "choices": [\n {"input": [1, 28, 28],\n' >"$tmp/d/conv-paths.json"
expect2 "a truncated record" run --resume "$tmp/d"
grep -q "$tmp/d/conv-paths.json:3:" "$tmp/err" || fail "the refusal does not name the file and line: $(cat "$tmp/err")"
sed '0,/"path": "onednn"/s//"path": "gpu"/' "$rec" >"$tmp/d/conv-paths.json"
expect2 "an unknown path" run --resume "$tmp/d"
grep -q "$tmp/d/conv-paths.json: choices\[0\].path: expected \"onednn\" or \"im2col\"" "$tmp/err" ||
  fail "the refusal does not name the file and the field: $(cat "$tmp/err")"
rm "$tmp/d/conv-paths.json"
sed 's/"bias": true/"bias": true, "dilation": [1, 1]/' "$rec" >"$tmp/d/conv-paths.rank1.json"
expect2 "an unknown key in a rank's record" run --resume "$tmp/d"
grep -q "$tmp/d/conv-paths.rank1.json: choices\[0\].dilation: unknown key" "$tmp/err" ||
  fail "the refusal does not name the file and the key: $(cat "$tmp/err")"

if [ "${BT_HAVE_MPI:-1}" != 1 ] || ! command -v "${BT_MPIRUN:-mpirun}" >/dev/null 2>&1; then
  echo "no MPI in this build: the per-rank records are not tested here"
  exit 0
fi
echo "== under mpirun: a record per rank"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
if [ -n "${ASAN_OPTIONS:-}" ]; then export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"; fi # as dist.sh
job() { timeout "${MPI_TIMEOUT:-120}" "${BT_MPIRUN:-mpirun}" --oversubscribe -np 2 "$builddir/baton" run "$model" \
          --synthetic --steps 4 --batch 32 --stages 1 --dp 2 parallel.pipeline.partition=uniform "$@"; }
BATON_CPU_CONV_TEST_PICK=onednn job --checkpoint-every 2 --keep-last 0 --checkpoint-dir "$tmp/m" >"$tmp/m.log" 2>&1 ||
  { cat "$tmp/m.log"; fail "the job"; }
for r in 0 1; do
  [ "$(grep -c '"path": "onednn"' "$tmp/m/conv-paths.rank$r.json" 2>/dev/null)" -ge 4 ] ||
    fail "rank $r has no record of its 4 choices: $(ls "$tmp/m")"
done
[ ! -e "$tmp/m/conv-paths.json" ] || fail "a job wrote conv-paths.json besides the ranks' records"
BATON_CPU_CONV_TEST_PICK=im2col job --resume "$tmp/m/checkpoint-00000002.safetensors.index.json" --checkpoint-dir "$tmp/n" \
  >"$tmp/n.log" 2>&1 || { cat "$tmp/n.log"; fail "the resumed job"; }
[ "$(grep -c 'conv2d: 4 path choices recorded in .*2 files) taken as recorded' "$tmp/n.log")" = 1 ] ||
  { cat "$tmp/n.log"; fail "the resumed job does not say once that it took the records"; }
cmp -s "$tmp/m/checkpoint-00000004-00001-of-00001.safetensors" "$tmp/n/checkpoint-00000004-00001-of-00001.safetensors" ||
  fail "the job resumed from step 2 with the records != the uninterrupted job"
echo "the job resumed = uninterrupted, bit for bit"
