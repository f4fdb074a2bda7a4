#!/bin/sh
# tests/chat_template_ref.sh: chat templates (src/tok/chat_template.c) against jinja2. Makes a
# virtual environment for Debian's python3 in the build tree (chatvenv/, or BT_CHAT_VENV) with
# PyPI's jinja2 3.1.4 (once; later runs reuse it), then runs tests/chat_template_ref.py: the
# templates of tests/chat_templates/ (Llama 3 and 3.1, Qwen2/ChatML, Mistral, Llama 2, Zephyr and
# an edge-case one) rendered with many message lists by tests/chat_template_drv and by jinja2 as
# transformers 4.40.2 renders them, compared byte for byte. This test fails, and never skips, when
# the environment cannot be made: the comparison is what shows the evaluator right.
set -u
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
venv=${BT_CHAT_VENV:-$builddir/chatvenv}
py=/usr/bin/python3
if ! "$venv/bin/python" -c 'import jinja2, sys; sys.exit(jinja2.__version__ != "3.1.4")' 2>/dev/null; then
  rm -rf "$venv"
  if ! { "$py" -m venv --system-site-packages "$venv" &&
         "$venv/bin/python" -m pip install --quiet --disable-pip-version-check jinja2==3.1.4; }; then
    echo "FAIL: cannot make $venv with jinja2 3.1.4 (python3-venv, and PyPI, are needed)"
    echo "chat_template_ref: 1 tests, 1 failed"; exit 1
  fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" "$srcdir/tests/chat_template_ref.py" "$builddir/tests/chat_template_drv" "$srcdir" "$work"
