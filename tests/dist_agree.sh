#!/bin/sh
# tests/dist_agree.sh: the ranks of one job agree, or the job refuses at start-up (cli/agree.h,
# dist/agree.c, exec/engine_agree.c). Each case starts two ranks that differ in one thing (an MPMD
# line: mpirun -np 1 baton ... : -np 1 baton ...) and expects exit 2 within MPI_TIMEOUT seconds
# (a hang fails it), with one message, rank 0's, naming the field: `run` given another lr,
# optimizer, clipping, lr schedule, steps, batch, number of synthetic samples, npy data file (of
# another size), --init weights, and an --init file only rank 0 has; `generate` another
# temperature, seed, token count or prompt; `predict` other weights or inputs; `profile` another
# repeat count; and two commands in one job. Per-rank settings (--threads, --watchdog) may differ
# and the job runs. `predict` across ranks writes the one-process run's output file, bit for bit,
# at (D, P) = (1, 2) and (2, 2): rank 0 alone writes it.
# Open MPI's settings for one machine (as root, oversubscribed): tests/dist/common.sh.
set -u
. "${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/dist/common.sh"

if [ "${BT_HAVE_MPI:-1}" != 1 ]; then
  echo "dist_agree: no MPI in this build"
  exit 77
fi
mpi_env
MPI_TIMEOUT=${MPI_TIMEOUT:-30}

# refused NAME FIELD MPIRUN-ARGS...: exit 2, one "ranks disagree on FIELD" line, no MPI error
refused() {
  name=$1 field=$2
  shift 2
  start=$(date +%s)
  mpi "$@" >"$tmp/o" 2>"$tmp/e"; rc=$?
  took=$(($(date +%s) - start))
  n=$(grep -c "ranks disagree on " "$tmp/e")
  if [ $rc = 2 ] && [ "$n" = 1 ] && grep -qF "ranks disagree on $field: rank 0 has " "$tmp/e" &&
     ! grep -q "MPI_ERR" "$tmp/e"; then
    ok "$name: exit 2 after ${took} s: $(grep -o "ranks disagree on .*" "$tmp/e" | cut -c 1-160)"
  else
    bad "$name: exit $rc after ${took} s, $n messages: $(head -c 1200 "$tmp/e")"
  fi
}

# fixtures, in one process: two checkpoints of skip-mlp (steps 1 and 2), npy data of two sizes, a
# tiny language model on text with its checkpoint and vocabulary
"$b" run "$model" --stages 1 --threads 1 --steps 2 --checkpoint-every 1 --keep-last 0 --checkpoint-dir "$tmp/ck" \
  >"$tmp/ck.out" 2>&1 || bad "skip-mlp checkpoints: $(tail -c 600 "$tmp/ck.out")"
ck1=$tmp/ck/checkpoint-00000001.safetensors ck2=$tmp/ck/checkpoint-00000002.safetensors
python3 - "$src/tests" "$tmp" <<'EOF'
import random, sys
sys.path.insert(0, sys.argv[1])
from npy_write import npy
t = sys.argv[2]
r = random.Random(5)
for name, n in (("x64", 64), ("x96", 96)):
    npy("%s/%s.npy" % (t, name), "<f4", (n, 24), "f", [r.uniform(-1, 1) for _ in range(n * 24)])
    npy("%s/y%d.npy" % (t, n), "<i4", (n,), "i", [r.randrange(6) for _ in range(n)])
w = ["the", "king", "shall", "come", "to"]
open("%s/text.txt" % t, "w").write(" ".join(r.choice(w) for _ in range(400)))
EOF
for n in 64 96; do
  sed "s|train: {type: synthetic, samples: 512}|train: {type: npy, inputs: {x: $tmp/x$n.npy, y: $tmp/y$n.npy}}|" \
    "$model" >"$tmp/npy$n.yaml"
done
cat >"$tmp/lm.yaml" <<YAML
format: 1
name: tiny-lm
inputs:
  idx: {shape: [8], dtype: i32}
  label: {shape: [8], dtype: i32}
layers:
  - {name: wte, op: embedding, args: {num: 14, dim: 8}}
  - {name: head, op: linear, args: {out: 14}}
  - {name: loss, op: cross_entropy, from: [head, label]}
parallel: {pipeline: {stages: 2, microbatches: 1}}
train: {batch: 2, steps: 1}
data:
  train: {type: text, path: $tmp/text.txt, val_fraction: 0.1}
YAML
"$b" run "$tmp/lm.yaml" --threads 1 --checkpoint-dir "$tmp/lmck" >"$tmp/lm.out" 2>&1 ||
  bad "tiny language model: $(tail -c 600 "$tmp/lm.out")"

# run: the train: section, the steps, the data, the weights
R="$b run $model --stages 2 --threads 1"
refused "run: lr" "train.optimizer.lr" -np 1 $R train.optimizer.lr=1e-3 : -np 1 $R train.optimizer.lr=3e-4
grep -qF "rank 0 has 0.001, rank 1 has 0.0003" "$tmp/e" || bad "run: lr: the values as written: $(cat "$tmp/e")"
refused "run: optimizer" "train.optimizer.type" -np 1 $R train.optimizer.type=sgd : -np 1 $R
refused "run: clipping" "train.clip_grad_norm" -np 1 $R : -np 1 $R train.clip_grad_norm=1
refused "run: lr schedule" "train.lr_schedule.type" -np 1 $R train.lr_schedule=cosine : -np 1 $R
refused "run: steps" "train.steps (--steps; 0: by epochs)" -np 1 $R --steps 2 : -np 1 $R --steps 3
refused "run: batch" "train.batch (--batch)" -np 1 $R --batch 16 : -np 1 $R
refused "run: synthetic data size" "data.train.samples" -np 1 $R data.train.samples=256 : -np 1 $R
refused "run: npy data of another size" "data.train.inputs.x" -np 1 "$b" run "$tmp/npy64.yaml" --stages 2 \
  --threads 1 : -np 1 "$b" run "$tmp/npy96.yaml" --stages 2 --threads 1
refused "run: --init weights" "--init" -np 1 $R --init "$ck1" : -np 1 $R --init "$ck2"
refused "run: an --init file only rank 0 has" "--init" -np 1 $R --init "$ck1" : -np 1 $R --init "$tmp/elsewhere"
grep -q "rank 1 has (cannot be read" "$tmp/e" || bad "run: --init missing on rank 1 is named: $(cat "$tmp/e")"
# the same weights under two names (a directory's latest, its file) agree; per-rank settings may differ
mpi -np 1 $R --init "$tmp/ck" --watchdog 30 : -np 1 $R --init "$ck2" --threads 2 >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 0 ]; then ok "run: the same weights by another path, other --threads and --watchdog: runs"
else bad "run: per-rank settings: exit $rc: $(head -c 800 "$tmp/e")"; fi

# generate: the sampling options and the prompts
G="$b generate $tmp/lm.yaml --weights $tmp/lmck --tokens 4 --prompt the"
refused "generate: temperature" "--temperature" -np 1 $G --temperature 0.8 : -np 1 $G --temperature 0.9
refused "generate: seed" "--seed (sampling)" -np 1 $G --seed 1 : -np 1 $G --seed 2
refused "generate: tokens" "--tokens" -np 1 $G : -np 1 $G --tokens 5
refused "generate: prompt" "prompt 1" -np 1 $G : -np 1 "$b" generate "$tmp/lm.yaml" --weights "$tmp/lmck" \
  --tokens 4 --prompt king

# predict: distributed like run's inference, rank 0 writing the one output file
P="$b predict $model --stages 2 --threads 1 --input x=$tmp/x64.npy"
refused "predict: weights" "--weights" -np 1 $P --weights "$ck1" : -np 1 $P --weights "$ck2"
refused "predict: inputs" "--input 1" -np 1 $P --weights "$ck1" : -np 1 "$b" predict "$model" --stages 2 \
  --threads 1 --weights "$ck1" --input "x=$tmp/x96.npy"
for np in 2 4; do
  # the one-process reference at the micro-batches' own size: D = np / 2 replicas each run the
  # model's 4 micro-batches of their share, so one process runs 4 D (a GEMM's bits may depend on
  # its row count: oneDNN's AVX2 kernels, run under BATON_CPU_ISA=avx2, differed at twice the size)
  "$b" predict "$model" --stages 2 --threads 1 --weights "$ck2" --input "x=$tmp/x64.npy" --labels "$tmp/y64.npy" \
    --microbatches $((4 * np / 2)) --output "$tmp/one.npy" >"$tmp/one.out" 2>&1 || bad "predict in one process: $(cat "$tmp/one.out")"
  rm -f "$tmp/many.npy"
  mpi -np $np $P --weights "$ck2" --labels "$tmp/y64.npy" --output "$tmp/many.npy" >"$tmp/many.out" 2>"$tmp/e"; rc=$?
  acc1=$(grep -o "accuracy [0-9.]*%  loss [0-9.]*" "$tmp/one.out") accn=$(grep -o "accuracy [0-9.]*%  loss [0-9.]*" "$tmp/many.out")
  lines=$(grep -c "^predicted" "$tmp/many.out")
  if [ $rc = 0 ] && cmp -s "$tmp/one.npy" "$tmp/many.npy" && [ -n "$acc1" ] && [ "$acc1" = "$accn" ] && [ "$lines" = 1 ]; then
    ok "predict on $np ranks: the one-process outputs bit for bit, $accn, one report"
  else
    bad "predict on $np ranks: exit $rc, $lines reports, '$acc1' vs '$accn': $(head -c 800 "$tmp/e") $(head -c 400 "$tmp/many.out")"
  fi
done

# profile, and two commands in one job
refused "profile: repeats" "--repeats" -np 1 "$b" profile "$model" --repeats 1 -o "$tmp/p.json" : \
  -np 1 "$b" profile "$model" --repeats 2 -o "$tmp/p.json"
refused "run and generate in one job" "command" -np 1 $R : -np 1 $G
finish
