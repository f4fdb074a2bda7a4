#!/bin/sh
# tests/hf_ops.sh: Hugging Face decoder layers (Llama 3 with llama3 rope scaling and grouped-query
# heads, Qwen2 with q/k/v biases and one kv head, Mistral with a sliding window, a head_dim apart
# from hidden / heads, GPT-2 with gelu_new) built from baton's ops in a model file and run by
# `baton predict`, against the layers' formulas written in PyTorch (tests/hf_ops_ref.py: f64 within
# 1e-10, f32 within 1e-5). Needs a Python with torch and numpy (/usr/bin/python3 on Debian's
# python3-torch); skips, saying so, where there is none. Prints "hf_ops: N tests, N failed".
. "$(dirname "$0")/cli_lib.sh"

py=
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import torch, numpy' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]; then
  # a minute of PyTorch under a sanitizer build's baton: the ops' kernels run under the sanitizers in
  # test_ops and test_gpt, and this comparison runs in the tests job
  echo "hf_ops: a sanitizer build: the PyTorch comparison runs in the tests job; skipping"
  exit 77
fi
if [ -z "$py" ]; then
  echo "hf_ops: no python3 with torch and numpy (tried /usr/bin/python3 and python3 on PATH); skipping"
  exit 77
fi
OMP_NUM_THREADS=1 "$py" "$srcdir/tests/hf_ops_ref.py" "$baton" "$tmp"
