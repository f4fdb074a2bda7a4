#!/bin/sh
# tests/hf_logits.sh: Hugging Face checkpoints served by baton give transformers' logits. The
# fixtures in tests/hf/models/ were written by transformers 4.40.2 (tests/hf_logits.py): a tiny
# random Llama (GQA, untied head), Qwen2 (q/k/v biases, one kv head, tied head) and Mistral
# (sliding window 5 over 16 positions) directory each, a batch of token ids, and the model's f32
# logits for them (eager attention). For each, `baton predict DIR --weights DIR --input ids.npy`
# (the directory's model.safetensors read by its HF names) must give those logits within 1e-4 of
# their scale (max |difference| / max |logit|), on 1 stage, on 2 stages, and under mpirun -np 2
# (a rank per stage) where the build has MPI.
set -u
. "${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/dist/common.sh"
within() { # baton.npy reference.npy -> prints the relative error; exit 0 when <= 1e-4 (Debian's numpy)
  /usr/bin/python3 -c '
import sys, numpy as np
a, r = np.load(sys.argv[1]), np.load(sys.argv[2])
if a.shape != r.shape:
    print("shape", a.shape, "against", r.shape); sys.exit(1)
e = float(np.abs(a - r).max() / np.abs(r).max())
print("%.2g" % e); sys.exit(e > 1e-4)' "$1" "$2"
}
ctx="inputs.input_ids.shape=[16] inputs.labels.shape=[16]" # the fixtures' 16 positions
for name in llama qwen2 mistral; do
  dir=$src/tests/hf/models/$name
  for layout in "1 stage:--stages 1" "2 stages:--stages 2 --devices cpu:0,cpu:1 --microbatches 3"; do
    what=${layout%%:*}; flags=${layout#*:}
    # shellcheck disable=SC2086 # the layout's flags
    if "$b" predict "$dir" --weights "$dir" --input "$dir.ids.npy" --output "$tmp/$name.npy" --threads 1 --batch 3 $ctx \
        $flags >"$tmp/out" 2>&1 && e=$(within "$tmp/$name.npy" "$dir.logits.npy"); then
      ok "$name, $what: logits within $e of transformers' scale"
    else bad "$name, $what: $(tail -3 "$tmp/out") ${e:-}"; fi
  done
done
if [ "${BT_HAVE_MPI:-1}" = 1 ] && command -v "$mpirun" >/dev/null 2>&1; then
  mpi_env
  dir=$src/tests/hf/models/llama
  if mpi -np 2 "$b" predict "$dir" --weights "$dir" --input "$dir.ids.npy" --output "$tmp/mpi.npy" --batch 3 $ctx \
      --stages 2 --threads 1 --microbatches 3 >"$tmp/out" 2>&1 && e=$(within "$tmp/mpi.npy" "$dir.logits.npy"); then
    ok "llama under mpirun -np 2 (a rank per stage): logits within $e of transformers' scale"
  else bad "llama under mpirun -np 2: $(tail -3 "$tmp/out") ${e:-}"; fi
fi
finish
