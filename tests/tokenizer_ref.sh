#!/bin/sh
# tests/tokenizer_ref.sh: `baton tokenize` against the Hugging Face `tokenizers` library. Makes a
# virtual environment for Debian's python3 in the build tree (tokvenv/, or BT_TOK_VENV) with
# PyPI's tokenizers 0.19.1 (once; later runs reuse it), then runs tests/tokenizer_ref.py: it trains
# GPT-2, Llama 3, Qwen2, Llama 2 and Mistral style tokenizers on data/shakespeare.txt and compares
# baton's ids and decodings with the library's on Shakespeare, tests/tok_unicode.txt and special
# tokens. This test fails, and never skips, when the environment cannot be made or the text is
# missing: the comparison is what shows the tokenizers right.
set -u
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
venv=${BT_TOK_VENV:-$builddir/tokvenv}
py=/usr/bin/python3
if [ ! -r "$srcdir/data/shakespeare.txt" ]; then
  echo "FAIL: $srcdir/data/shakespeare.txt is missing (scripts/fetch-shakespeare.sh fetches it)"
  echo "tokenizer_ref: 1 tests, 1 failed"; exit 1
fi
if ! "$venv/bin/python" -c 'import tokenizers, sys; sys.exit(tokenizers.__version__ != "0.19.1")' 2>/dev/null; then
  rm -rf "$venv"
  if ! { "$py" -m venv --system-site-packages "$venv" &&
         "$venv/bin/python" -m pip install --quiet --disable-pip-version-check tokenizers==0.19.1; }; then
    echo "FAIL: cannot make $venv with tokenizers 0.19.1 (python3-venv, and PyPI, are needed)"
    echo "tokenizer_ref: 1 tests, 1 failed"; exit 1
  fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
TOKENIZERS_PARALLELISM=false "$venv/bin/python" "$srcdir/tests/tokenizer_ref.py" "$builddir/baton" "$srcdir" "$work"
