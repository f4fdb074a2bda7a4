#!/bin/sh
# tests/cpu_conv_paths.sh: conv2d's paths on the CPU through `baton run` (cpu/conv_onednn.h).
#   - BATON_CPU_CONV with an unknown value, or onednn in a build without oneDNN, fails with exit 2
#     naming it, never runs anyway;
#   - the CNN (models/fashion-cnn.yaml, synthetic data, batch 32, 2 stages) trained 3 steps with
#     BATON_CPU_CONV=onednn and =im2col: every step's loss within 1e-4 relative in f32 (the paths
#     sum in different orders; AdamW's first steps move every weight by about lr whatever the
#     gradient's size, so the runs stay close) and within 2e-2 under precision bf16;
#   - a forced path gives the same losses in two processes, to the last printed digit, and the
#     run lists both conv layers with the forced path; under auto each layer's forward line has
#     the times of both paths;
#   - tests/test_fused (fused relu = unfused, bit for bit) passes on the oneDNN path too.
set -eu
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
model="$srcdir/models/fashion-cnn.yaml"
run() { "$builddir/baton" run "$model" --synthetic --steps 3 --batch 32 "$@"; }

out=$(BATON_CPU_CONV=bogus run 2>&1) && { echo "BATON_CPU_CONV=bogus was accepted:"; echo "$out"; exit 1; }
code=0; BATON_CPU_CONV=bogus run >/dev/null 2>&1 || code=$?
[ "$code" = 2 ] || { echo "BATON_CPU_CONV=bogus: exit $code, expected 2"; exit 1; }
echo "$out" | grep -q 'BATON_CPU_CONV=bogus' || { echo "the refusal does not name BATON_CPU_CONV:"; echo "$out"; exit 1; }
echo "BATON_CPU_CONV=bogus refused (exit 2): $(echo "$out" | tail -1)"

if ! grep -q '^#define BATON_HAVE_DNNL 1' "$builddir/config.h" 2>/dev/null; then
  code=0; BATON_CPU_CONV=onednn run >/dev/null 2>&1 || code=$?
  [ "$code" = 2 ] || { echo "BATON_CPU_CONV=onednn without oneDNN: exit $code, expected 2"; exit 1; }
  echo "no oneDNN in this build: BATON_CPU_CONV=onednn refused (exit 2); nothing else to compare"
  exit 0
fi

losses() { grep '^{"step"' | grep -o '"loss": *[-0-9.e+]*' | sed 's/.*: *//'; }
# compare FILE_A FILE_B TOL: every line's values within TOL relative
compare() {
  paste "$1" "$2" | awk -v tol="$3" '
    { d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; if (s < 1e-30) s = 1e-30
      r = d / s; if (r > worst) worst = r; n++ }
    END { printf "  %d losses, worst relative difference %.2e (tolerance %s)\n", n, worst, tol
          exit !(n == 3 && worst <= tol) }'
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for prec in f32 bf16; do
  for path in onednn im2col; do
    BATON_CPU_CONV=$path run train.precision=$prec --log-format jsonl >"$tmp/$path.$prec.jsonl" 2>&1 ||
      { echo "BATON_CPU_CONV=$path $prec failed:"; cat "$tmp/$path.$prec.jsonl"; exit 1; }
    losses <"$tmp/$path.$prec.jsonl" >"$tmp/$path.$prec"
    for layer in conv1 conv2; do
      grep '"conv_choice"' "$tmp/$path.$prec.jsonl" | grep "\"$layer\"" | grep -q "\"path\": *\"$path\"" ||
        { echo "BATON_CPU_CONV=$path: $layer is not listed on $path:"; grep conv_choice "$tmp/$path.$prec.jsonl"; exit 1; }
    done
  done
  tol=1e-4; [ $prec = bf16 ] && tol=2e-2
  echo "== $prec: onednn against im2col"
  compare "$tmp/onednn.$prec" "$tmp/im2col.$prec" $tol || { echo "the paths disagree"; exit 1; }
done

BATON_CPU_CONV=onednn run --log-format jsonl 2>&1 | losses >"$tmp/again"
cmp -s "$tmp/again" "$tmp/onednn.f32" || { echo "BATON_CPU_CONV=onednn: two processes differ"; exit 1; }
echo "== BATON_CPU_CONV=onednn: the same losses in two processes"

out=$(run 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -q 'conv on cpu .*faster per layer' || { echo "baton run does not say how conv2d is chosen:"; echo "$out"; exit 1; }
for layer in conv1 conv2; do
  echo "$out" | grep -E "^  $layer .*, forward: (onednn|im2col) \([0-9.]+ ms; (onednn|im2col) [0-9.]+ ms\)" ||
    { echo "auto: no timed choice listed for $layer:"; echo "$out"; exit 1; }
done

echo "== tests/test_fused on oneDNN"
BATON_CPU_CONV=onednn "$builddir/tests/test_fused" >"$tmp/fused" 2>&1 || { cat "$tmp/fused"; exit 1; }
tail -1 "$tmp/fused"
