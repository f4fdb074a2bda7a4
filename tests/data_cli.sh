#!/bin/sh
# tests/data_cli.sh: the baton command on data for any input signature, and `baton predict`. No
# silent substitution: a model without data: and without --synthetic is refused (exit 2) instead of
# training on made-up inputs; asked for synthetic data, a token model honours --epochs,
# --eval-every, --checkpoint-dir and --init; an inference model honours --init and data:, and
# refuses --checkpoint-dir and a training schedule; an npy run without data.eval says its eval
# reads the training set. Token ids with labels train from npy files and resume exactly; predict
# on a checkpoint reproduces the run's final eval accuracy and loss to the printed digit (the
# classic npy pair, and Fashion-MNIST's IDX eval set when installed); data that does not fit is
# refused naming the file and the shape. Prints "data_cli: N tests, N failed".
. "$(dirname "$0")/cli_lib.sh"

check() { # description grep-pattern file
  tests=$((tests + 1))
  grep -q -- "$2" "$3" || { fail "$1: no '$2' in: $(head -c 600 "$3")"; return 1; }
}
# the JSON value of key in the last record of file that has it

if ! command -v python3 >/dev/null 2>&1; then
  echo "data_cli: python3 is needed to write npy files; skipping"
  exit 77
fi

# npy files from plain Python (no numpy needed)
BT_TESTS_DIR="$srcdir/tests" python3 - "$tmp" <<'PY'
import os, random, struct, sys
sys.path.insert(0, os.environ["BT_TESTS_DIR"])
from npy_write import npy
r = random.Random(7)
t = sys.argv[1]
toks = [r.randrange(50) for _ in range(96 * 6)]
npy(t + "/tok.npy", "<i8", (96, 6), "q", toks)
npy(t + "/tlab.npy", "<i4", (96,), "i", [(toks[i * 6] + toks[i * 6 + 1]) % 5 for i in range(96)])
x = [r.randrange(-512, 512) / 256 for _ in range(80 * 16)]   # exact in f32
npy(t + "/x.npy", "<f4", (80, 16), "f", x)
npy(t + "/x64.npy", "<f8", (80, 16), "d", [v + 0.1 for v in x])
npy(t + "/y.npy", "<i4", (80,), "i", [int(x[i * 16] > 0) + 2 * int(x[i * 16 + 1] > 0) for i in range(80)])
npy(t + "/target.npy", "<f4", (80, 2), "f", [v for i in range(80) for v in (x[i * 16] - x[i * 16 + 2], x[i * 16 + 3])])
npy(t + "/ex.npy", "<f4", (40, 16), "f", x[:40 * 16])
npy(t + "/ey.npy", "<i4", (40,), "i", [int(x[i * 16] > 0) + 2 * int(x[i * 16 + 1] > 0) for i in range(40)])
PY

tokens_model "$tmp/tokens.yaml"

# 1. no data: and no --synthetic: refused, naming data.train (it used to train on made-up data)
if expect_rc 2 "token model without data" "$baton" run "$tmp/tokens.yaml" --steps 3; then
  check "no data" "has no data.train: .*--synthetic" "$tmp/err"
fi
# 2. synthetic when asked, for a token signature: --epochs, --eval-every, --checkpoint-dir honoured
if expect_rc 0 "token model, synthetic data" "$baton" run "$tmp/tokens.yaml" 'data={train: {type: synthetic, samples: 64}}' \
     --epochs 2 --eval-every 8 --checkpoint-dir "$tmp/tck"; then
  tests=$((tests + 1))
  [ "$(grep -c '^step ' "$tmp/out")" = 16 ] || fail "--epochs 2 of 8 batches: $(grep -c '^step ' "$tmp/out") steps"
  check "--eval-every" "^eval  step 8: accuracy" "$tmp/out"
  tests=$((tests + 1))
  [ -f "$tmp/tck/checkpoint.safetensors" ] || fail "--checkpoint-dir: no checkpoint written"
fi
expect_rc 2 "token model --init of a missing file" "$baton" run "$tmp/tokens.yaml" --synthetic --steps 1 --init "$tmp/nope.safetensors"

# 3. token ids and labels from npy files; an exact resume; the eval says it read the training set
data="data={train: {type: npy, inputs: {tokens: $tmp/tok.npy, label: $tmp/tlab.npy}}}"
expect_rc 0 "tokens from npy, 10 steps" "$baton" run "$tmp/tokens.yaml" "$data" --steps 10 --checkpoint-dir "$tmp/t10"
check "eval on the training set" "^eval  step 10 (on the training set: the model has no data.eval)" "$tmp/out"
expect_rc 0 "tokens from npy, 4 steps" "$baton" run "$tmp/tokens.yaml" "$data" --steps 4 --checkpoint-dir "$tmp/t4"
expect_rc 0 "tokens from npy, resumed to 10" "$baton" run "$tmp/tokens.yaml" "$data" --steps 10 --resume "$tmp/t4" \
  --checkpoint-dir "$tmp/t4" --devices cpu:0 --stages 1
tests=$((tests + 1))
cmp -s "$tmp/t10/checkpoint.safetensors" "$tmp/t4/checkpoint.safetensors" ||
  fail "token resume: the checkpoints of the straight and the resumed run differ"
if expect_rc 0 "predict tokens" "$baton" predict "$tmp/tokens.yaml" --weights "$tmp/t10" --input "tokens=$tmp/tok.npy" \
     --labels "$tmp/tlab.npy" --output "$tmp/logits.npy"; then
  check "predict output" "outputs of 'head' (\[5\] per sample) -> " "$tmp/out"
  check "predict throughput" "^predicted 96 samples in 12 batches: .* samples/s, latency p50 .* ms, p99 .* ms" "$tmp/out"
fi

# 4. a classic model from an npy pair with an eval set: predict reproduces the eval exactly
cat >"$tmp/clf.yaml" <<YAML
format: 1
name: clf
inputs:
  x: {shape: [16]}
  label: {shape: [], dtype: i32}
layers:
  - {name: fc, op: linear, args: {out: 32}, act: relu}
  - {name: head, op: linear, args: {out: 4}}
  - {name: loss, op: cross_entropy, from: [head, label]}
parallel: {devices: [cpu:0, cpu:1], pipeline: {microbatches: 2}}
train: {batch: 16, optimizer: {type: adamw, lr: 1.0e-2}}
data:
  train: {type: npy, images: $tmp/x.npy, labels: $tmp/y.npy}
  eval: {type: npy, images: $tmp/ex.npy, labels: $tmp/ey.npy}
YAML
if expect_rc 0 "classifier on npy" "$baton" run "$tmp/clf.yaml" --steps 12 --checkpoint-dir "$tmp/clf" --log-format jsonl; then
  acc=$(json_field "$tmp/out" accuracy); loss=$(grep '"eval": true' "$tmp/out" | tail -n 1 | sed -E 's/.*"loss": ([^,]*).*/\1/')
  if expect_rc 0 "predict the eval set" "$baton" predict "$tmp/clf.yaml" --weights "$tmp/clf" --input "$tmp/ex.npy" \
       --labels "$tmp/ey.npy" --log-format jsonl; then
    tests=$((tests + 1))
    [ "$(json_field "$tmp/out" accuracy)" = "$acc" ] && [ "$(json_field "$tmp/out" loss)" = "$loss" ] ||
      fail "predict: accuracy/loss $(json_field "$tmp/out" accuracy)/$(json_field "$tmp/out" loss), the run's eval $acc/$loss"
  fi
fi
# the same under train.precision=bf16: predict computes at the model's precision, as the run
# evaluated, so it reproduces the bf16 eval exactly and says which precision
if expect_rc 0 "classifier on npy, bf16" "$baton" run "$tmp/clf.yaml" train.precision=bf16 --steps 12 \
     --checkpoint-dir "$tmp/clf16" --log-format jsonl; then
  acc=$(json_field "$tmp/out" accuracy); loss=$(grep '"eval": true' "$tmp/out" | tail -n 1 | sed -E 's/.*"loss": ([^,]*).*/\1/')
  if expect_rc 0 "predict the eval set, bf16" "$baton" predict "$tmp/clf.yaml" train.precision=bf16 --weights "$tmp/clf16" \
       --input "$tmp/ex.npy" --labels "$tmp/ey.npy" --log-format jsonl; then
    tests=$((tests + 1))
    [ "$(json_field "$tmp/out" accuracy)" = "$acc" ] && [ "$(json_field "$tmp/out" loss)" = "$loss" ] ||
      fail "predict bf16: accuracy/loss $(json_field "$tmp/out" accuracy)/$(json_field "$tmp/out" loss), the run's eval $acc/$loss"
  fi
  if expect_rc 0 "predict the eval set, bf16, text" "$baton" predict "$tmp/clf.yaml" train.precision=bf16 --weights "$tmp/clf16" \
       --input "$tmp/ex.npy" --labels "$tmp/ey.npy"; then
    check "predict names its precision" "precision bf16" "$tmp/out"
  fi
fi
# the classic pair without data.eval: the eval reads the training set and says so (it used not to)
sed '/^  eval: /d' "$tmp/clf.yaml" >"$tmp/clf-noeval.yaml"
if expect_rc 0 "classifier without data.eval" "$baton" run "$tmp/clf-noeval.yaml" --steps 2; then
  check "classic pair, no eval" "^eval  step 2 (on the training set: the model has no data.eval): accuracy" "$tmp/out"
  check "classic pair, no eval, final" "^final (on the training set): accuracy" "$tmp/out"
fi
# data that does not fit: the file and the shape are named; inexact float64 is refused
if expect_rc 2 "predict on a wrong shape" "$baton" predict "$tmp/clf.yaml" --weights "$tmp/clf" --input "$tmp/target.npy"; then
  check "wrong shape" "target.npy: shape (80, 2) does not fit input 'x' (per sample \[16\]): expected (N, 16)" "$tmp/err"
fi
if expect_rc 2 "predict on inexact float64" "$baton" predict "$tmp/clf.yaml" --weights "$tmp/clf" --input "$tmp/x64.npy"; then
  check "inexact f64" "x64.npy: sample 0, element 0 is .*which float32 cannot hold exactly" "$tmp/err"
fi
expect_rc 2 "predict without weights" "$baton" predict "$tmp/clf.yaml" --input "$tmp/ex.npy"
expect_rc 2 "predict on a missing file" "$baton" predict "$tmp/clf.yaml" --weights "$tmp/clf" --input "$tmp/nope.npy"
# dtype: f64 end to end: the same model in float64 trains, checkpoints and predicts from float64 data
if expect_rc 0 "f64 classifier" "$baton" run "$tmp/clf.yaml" dtype=f64 --steps 4 --checkpoint-dir "$tmp/clf64"; then
  tests=$((tests + 1))
  grep -q '"dtype":"F64"' "$tmp/clf64/checkpoint.safetensors" || fail "dtype: f64: the checkpoint holds no F64 tensor"
  expect_rc 0 "f64 predict on float64 data" "$baton" predict "$tmp/clf.yaml" dtype=f64 --weights "$tmp/clf64" --input "$tmp/x64.npy"
fi

# 5. a regression model on float targets: predict reproduces the final loss
cat >"$tmp/reg.yaml" <<YAML
format: 1
name: reg
inputs:
  x: {shape: [16]}
  target: {shape: [2]}
layers:
  - {name: fc, op: linear, args: {out: 16}, act: tanh}
  - {name: head, op: linear, args: {out: 2}}
  - {name: loss, op: mse, from: [head, target]}
train: {batch: 16, optimizer: {type: adamw, lr: 1.0e-2}}
data:
  train: {type: npy, inputs: {x: $tmp/x.npy, target: $tmp/target.npy}}
YAML
if expect_rc 0 "regression" "$baton" run "$tmp/reg.yaml" --steps 15 --checkpoint-dir "$tmp/reg" --log-format jsonl; then
  loss=$(grep '"eval": true' "$tmp/out" | tail -n 1 | sed -E 's/.*"loss": ([^,]*).*/\1/')
  check "regression eval on the training set" '"on_train": true' "$tmp/out"
  if expect_rc 0 "predict regression" "$baton" predict "$tmp/reg.yaml" --weights "$tmp/reg" --input "x=$tmp/x.npy" \
       --labels "$tmp/target.npy" --log-format jsonl; then
    tests=$((tests + 1))
    [ "$(json_field "$tmp/out" loss)" = "$loss" ] || fail "predict regression: loss $(json_field "$tmp/out" loss), the run's $loss"
  fi
fi

# 6. inference models: data: and --init honoured; training-only flags and schedules refused
infer="$srcdir/models/mlp-infer.yaml"
if expect_rc 2 "inference without data" "$baton" run "$infer" --steps 2; then
  check "inference without data" "has no data: to stream: .*--synthetic" "$tmp/err"
fi
if expect_rc 2 "inference --schedule 1f1b" "$baton" run "$infer" --synthetic --schedule 1f1b; then
  check "inference 1f1b" "--schedule 1f1b trains, but .* has no train: section" "$tmp/err"
fi
if expect_rc 2 "inference --checkpoint-dir" "$baton" run "$infer" --synthetic --checkpoint-dir "$tmp/ick"; then
  check "inference --checkpoint-dir" "^baton run: --checkpoint-dir: .* runs forward only" "$tmp/err"
fi
expect_rc 2 "inference --resume" "$baton" run "$infer" --synthetic --resume "$tmp/clf"
expect_rc 2 "inference --init of a missing file" "$baton" run "$infer" --synthetic --steps 1 --init "$tmp/nope.safetensors"
BT_TESTS_DIR="$srcdir/tests" python3 - "$tmp" <<'PY'
import os, sys
sys.path.insert(0, os.environ["BT_TESTS_DIR"])
from npy_write import npy
npy(sys.argv[1] + "/xi.npy", "<f4", (100, 64), "f", [0.25] * 6400)
PY
if expect_rc 0 "inference on data:" "$baton" run "$infer" "data={eval: {type: npy, inputs: {x: $tmp/xi.npy}}}"; then
  tests=$((tests + 1))
  [ "$(grep -c '^batch ' "$tmp/out")" = 4 ] || fail "inference on 100 samples of batch 32: $(grep -c '^batch ' "$tmp/out") batches"
  check "inference percentiles" "^100 samples in 4 batches: latency p50" "$tmp/out"
fi
# --init is loaded: weights of the wrong shape are refused
expect_rc 1 "inference --init of other weights" "$baton" run "$infer" --synthetic --steps 1 --init "$tmp/clf"

# 7. the main job: predict on Fashion-MNIST's eval set reproduces the run's eval exactly. The model
# says parallel: auto, which measures and may choose differently for each command; the mean loss's
# summation order follows the micro-batches, so both are given the same layout (its former one)
fm=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
fm_layout="--stages 2 --microbatches 8"
if [ -f "$fm" ]; then
  # shellcheck disable=SC2086
  if expect_rc 0 "fashion-mlp" "$baton" run "$srcdir/models/fashion-mlp.yaml" --steps 8 --checkpoint-dir "$tmp/fm" \
       $fm_layout --log-format jsonl; then
    acc=$(json_field "$tmp/out" accuracy); loss=$(grep '"eval": true' "$tmp/out" | tail -n 1 | sed -E 's/.*"loss": ([^,]*).*/\1/')
    # shellcheck disable=SC2086
    if expect_rc 0 "predict fashion-mlp" "$baton" predict "$srcdir/models/fashion-mlp.yaml" --weights "$tmp/fm" \
         $fm_layout --data eval --log-format jsonl; then
      tests=$((tests + 1))
      [ "$(json_field "$tmp/out" accuracy)" = "$acc" ] && [ "$(json_field "$tmp/out" loss)" = "$loss" ] ||
        fail "fashion predict: $(json_field "$tmp/out" accuracy)/$(json_field "$tmp/out" loss), the run's $acc/$loss"
    fi
  fi
fi

echo "data_cli: $tests tests, $failed failed"
[ "$failed" = 0 ]
