#!/bin/sh
# tests/plot.sh: `baton plot` as a user meets it. Two runs of models/mlp.yaml (GPipe and 1F1B, JSON
# records) are drawn into one SVG, which a real renderer (rsvg-convert, Debian's librsvg2-bin)
# turns into a PNG that must not be blank (non-white pixels counted with Debian's python3-pil);
# the SVG must name both files in its legend and hold one loss curve per run, a throughput and a
# bubble curve per run, and stage-share bars per run. Bad input: a text log is refused with exit 2
# naming the file and line; no file at all is a usage error.
set -u
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
baton="$builddir/baton"
tests=0; failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
command -v rsvg-convert >/dev/null 2>&1 || { echo "SKIP: rsvg-convert (librsvg2-bin) is not installed"; exit 77; }
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
"$py" -c 'import PIL' 2>/dev/null || { echo "SKIP: python3-pil is not installed"; exit 77; }

model="$srcdir/models/mlp.yaml"
tests=$((tests + 1))
"$baton" run "$model" --steps 12 --eval-every 4 --schedule gpipe --log-format jsonl >"$tmp/gpipe.jsonl" 2>"$tmp/err" &&
  "$baton" run "$model" --steps 12 --eval-every 4 --schedule 1f1b --microbatches 8 --log-format jsonl \
    >"$tmp/one-f-one-b.jsonl" 2>>"$tmp/err" || fail "runs: $(cat "$tmp/err")"

tests=$((tests + 1))
"$baton" plot "$tmp/gpipe.jsonl" "$tmp/one-f-one-b.jsonl" -o "$tmp/report.svg" >"$tmp/out" 2>"$tmp/err" ||
  fail "plot: $(cat "$tmp/err")"
tests=$((tests + 1))
rsvg-convert "$tmp/report.svg" -o "$tmp/report.png" 2>"$tmp/err" || fail "rsvg-convert: $(cat "$tmp/err")"
tests=$((tests + 1))
"$py" - "$tmp/report.png" <<'PY' || fail "the rendered report is blank or too small"
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
w, h = im.size
ink = sum(1 for p in im.getdata() if p != (255, 255, 255))
coloured = sum(1 for r, g, b in im.getdata() if max(r, g, b) - min(r, g, b) > 60)
print("report.png: %dx%d, %d non-white pixels, %d coloured" % (w, h, ink, coloured))
sys.exit(0 if w >= 800 and h >= 800 and ink > 0.02 * w * h and coloured > 2000 else 1)
PY
tests=$((tests + 1))
for f in gpipe.jsonl one-f-one-b.jsonl; do
  grep -q "<text class=\"legend run[01]\"[^>]*>run [12]: $f (mlp," "$tmp/report.svg" || fail "legend lacks $f"
done
tests=$((tests + 1))
for what in loss loss-eval throughput bubble; do
  for r in 0 1; do
    n=$(grep -c "<polyline class=\"$what run$r\"" "$tmp/report.svg")
    [ "$n" = 1 ] || fail "$n '$what' curves for run $r, expected 1"
  done
done
tests=$((tests + 1))
for r in 0 1; do
  n=$(grep -c "class=\"share busy run$r\"" "$tmp/report.svg")
  [ "$n" = 2 ] || fail "$n busy bars for run $r, expected 2 (one per stage)"
done

tests=$((tests + 1))
"$baton" run "$model" --steps 2 >"$tmp/text.log" 2>&1
"$baton" plot "$tmp/text.log" -o "$tmp/x.svg" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "$tmp/text.log:1: not a JSON record" "$tmp/err" || fail "text log: exit $rc: $(cat "$tmp/err")"
[ ! -e "$tmp/x.svg" ] || fail "text log: an SVG was written"
tests=$((tests + 1))
"$baton" plot >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] || fail "no file: exit $rc, expected 2"

echo "plot: $tests tests, $failed failed"
[ "$failed" = 0 ]
