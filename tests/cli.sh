#!/bin/sh
# tests/cli.sh: the baton command as a user meets it. Every file in models/invalid/ fails
# `baton check` with exit 2 and "baton check: <file>:<line>:<col>: ..." (or "<file>: ...")
# containing the file's "# expect:" text; every shipped model passes `baton check`; `baton run`
# prints well-formed JSON records with --log-format jsonl (non-finite numbers as null); usage
# errors exit 2 and runtime failures exit 1; non-finite data is refused and a diverged run fails;
# a checkpoint directory takes one run at a time (a second exits 2 naming the first's pid), a
# SIGTERM'd run leaves no temporary file behind, stale temporaries are removed, and resuming with
# fewer steps than the checkpoint holds changes nothing. Prints "cli: N tests, N failed" like the
# CUnit programs.
. "$(dirname "$0")/cli_lib.sh"


for f in "$srcdir"/models/invalid/*.yaml; do
  expect=$(sed -n '1s/^# expect: //p' "$f")
  expect_rc 2 "check $(basename "$f")" "$baton" check "$f" || continue
  msg=$(head -n 1 "$tmp/err")
  case "$msg" in
    "baton check: $f:"[0-9]*:[0-9]*": "*|"baton check: $f: "*) ;;
    *) fail "$(basename "$f"): message does not start with the file's position: $msg"; continue ;;
  esac
  case "$msg" in
    *"$expect"*) ;;
    *) fail "$(basename "$f"): message lacks '$expect': $msg" ;;
  esac
done

for f in "$srcdir"/models/*.yaml; do
  expect_rc 0 "check $(basename "$f")" "$baton" check "$f"
done

if expect_rc 0 "run jsonl" "$baton" run "$srcdir/models/mlp.yaml" --steps 3 --log-format jsonl; then
  tests=$((tests + 1))
  steps=$(grep -c '^{"step": [0-9]*, .*"loss": .*"lr": .*"step_ms": .*"samples_per_s": .*"bubble": ' "$tmp/out")
  [ "$steps" = 3 ] || fail "run jsonl: expected 3 step records, got $steps: $(head -3 "$tmp/out")"
  if command -v python3 >/dev/null 2>&1; then
    tests=$((tests + 1))
    python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$tmp/out" 2>"$tmp/perr" ||
      fail "run jsonl: not JSON: $(cat "$tmp/perr")"
  fi
fi
# a model fed token ids (no float input): trained on synthetic inputs shaped like its declaration
# when asked (--synthetic; without data: and without it, tests/data_cli.sh: exit 2)
tokens_model "$tmp/tokens.yaml"
if expect_rc 0 "run a token model" "$baton" run "$tmp/tokens.yaml" --steps 3 --synthetic; then
  tests=$((tests + 1))
  [ "$(grep -c '^step ' "$tmp/out")" = 3 ] || fail "token model: expected 3 step lines: $(cat "$tmp/out")"
fi
# precision bf16 keeps CPU stages' activations as bf16 (BATON_BF16_STASH, docs/cli.md): the
# summary names the stages with their f32 figure; =0 keeps f32 (no line); another value: exit 2
bf16_run="run $srcdir/models/mlp.yaml --steps 2 --stages 2 --microbatches 4 --schedule gpipe train.precision=bf16"
if expect_rc 0 "run bf16 activations" "$baton" $bf16_run; then
  tests=$((tests + 1))
  grep -q '^  activations kept as bf16 .*: stage 0 .* (f32 .*) stage 1 ' "$tmp/out" ||
    fail "bf16 activations: no summary line: $(tail -6 "$tmp/out")"
fi
if expect_rc 0 "run bf16 activations off" env BATON_BF16_STASH=0 "$baton" $bf16_run; then
  tests=$((tests + 1))
  ! grep -q 'activations kept as bf16' "$tmp/out" || fail "BATON_BF16_STASH=0: $(grep 'kept as bf16' "$tmp/out")"
fi
if expect_rc 2 "BATON_BF16_STASH=yes" env BATON_BF16_STASH=yes "$baton" $bf16_run; then
  tests=$((tests + 1))
  grep -q 'BATON_BF16_STASH=yes' "$tmp/err" "$tmp/out" || fail "BATON_BF16_STASH=yes: not named: $(cat "$tmp/err")"
fi
if expect_rc 0 "run inference" "$baton" run "$srcdir/models/mlp-infer.yaml" --steps 2 --synthetic; then
  tests=$((tests + 1))
  [ "$(grep -c '^batch .*latency .*samples/s' "$tmp/out")" = 2 ] || fail "inference: expected 2 batch lines: $(cat "$tmp/out")"
fi
expect_rc 0 "help" "$baton" --help
expect_rc 0 "run --help" "$baton" run --help
expect_rc 2 "no command" "$baton"
expect_rc 2 "unknown command" "$baton" frobnicate
expect_rc 2 "check without a model" "$baton" check
expect_rc 2 "bad flag value" "$baton" run "$srcdir/models/mlp.yaml" --steps zero
expect_rc 2 "bad override" "$baton" run "$srcdir/models/mlp.yaml" train.batch=abc
expect_rc 2 "missing model file" "$baton" check "$tmp/nope.yaml"
expect_rc 2 "missing init weights" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --init "$tmp/nope.safetensors"
if expect_rc 1 "plan too big for --memory" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --memory 4K; then
  tests=$((tests + 1))
  grep -q "the plan does not fit in memory: stage [0-9] (cpu:[0-9]) needs" "$tmp/err" ||
    fail "--memory: message does not name the stage: $(cat "$tmp/err")"
fi
expect_rc 0 "schedule grid" "$baton" schedule --stages 3 --microbatches 4 --validate
# zb-h1 prints W cells; interleaved one row per device with the logical stage in each cell
if expect_rc 0 "schedule grid zb-h1" "$baton" schedule --stages 2 --microbatches 4 --schedule zb-h1 --validate; then
  tests=$((tests + 1))
  grep -q '^stage 1 .* 1W3 ' "$tmp/out" || fail "zb-h1 grid lacks 1W3: $(cat "$tmp/out")"
fi
if expect_rc 0 "schedule grid interleaved" "$baton" schedule --stages 4 --virtual 2 --microbatches 4 \
     --schedule interleaved-1f1b; then
  tests=$((tests + 1))
  grep -q '^device 0 .* 2F3 ' "$tmp/out" || fail "interleaved grid: device 0 lacks stage 2's 2F3: $(cat "$tmp/out")"
fi
expect_rc 2 "interleaved: micro-batches not in groups of the devices" "$baton" schedule --stages 4 --virtual 2 \
  --microbatches 3 --schedule interleaved-1f1b
expect_rc 2 "--virtual without interleaved" "$baton" schedule --stages 4 --virtual 2 --microbatches 4
# (fashion-mlp says parallel: auto: layout flags replace it, so the micro-batches are given too)
expect_rc 0 "run interleaved-1f1b" "$baton" run "$srcdir/models/fashion-mlp.yaml" --synthetic --steps 2 \
  --devices cpu:0,cpu:1 --stages 4 --virtual 2 --schedule interleaved-1f1b --microbatches 8
expect_rc 0 "run zb-h1" "$baton" run "$srcdir/models/fashion-mlp.yaml" --synthetic --steps 2 --stages 2 --schedule zb-h1
# zbv: one row per device, device 0 holding the first and the last stage (3W3 of P = 2)
if expect_rc 0 "schedule grid zbv" "$baton" schedule --stages 4 --microbatches 4 --schedule zbv --validate; then
  tests=$((tests + 1))
  grep -q '^device 0 .* 3W3' "$tmp/out" && grep -q '^device 1 .* 2W3' "$tmp/out" ||
    fail "zbv grid: device 0 lacks stage 3's 3W3 or device 1 stage 2's 2W3: $(cat "$tmp/out")"
fi
expect_rc 2 "zbv takes virtual 2 only" "$baton" schedule --stages 6 --virtual 3 --microbatches 4 --schedule zbv
expect_rc 0 "run zbv" "$baton" run "$srcdir/models/mlp.yaml" --steps 2 --stages 4 --schedule zbv --microbatches 4
expect_rc 0 "run zbv with recomputation" "$baton" run "$srcdir/models/mlp.yaml" --steps 2 --stages 4 --schedule zbv \
  --microbatches 4 --recompute stage
expect_rc 0 "plan --schedule zbv" "$baton" plan "$srcdir/models/mlp.yaml" --schedule zbv --microbatches 4 --repeats 1 &&
  { tests=$((tests + 1)); grep -q "^    schedule: zbv$" "$tmp/out" && grep -q "^    virtual: 2$" "$tmp/out" &&
    grep -q "^    stages: 4$" "$tmp/out" || fail "plan --schedule zbv: no zbv/virtual/stages in the YAML: $(tail -8 "$tmp/out")"; }

# transfers: the summary names each boundary's path; --transfer forces one
if expect_rc 0 "run, local transfers" "$baton" run "$srcdir/models/mlp.yaml" --steps 2; then
  tests=$((tests + 1))
  grep -q '^  0 -> 1 *activations *local ' "$tmp/out" || fail "summary lacks the local boundary: $(cat "$tmp/out")"
fi
if expect_rc 0 "run --transfer staged" "$baton" run "$srcdir/models/mlp.yaml" --steps 2 --transfer staged; then
  tests=$((tests + 1))
  grep -q '^  1 -> 0 *gradients *staged .*GB/s' "$tmp/out" || fail "summary lacks the staged boundary: $(cat "$tmp/out")"
fi
expect_rc 2 "bad --transfer" "$baton" run "$srcdir/models/mlp.yaml" --transfer teleport

# mixed precision: f16 with a loss scale far too big skips steps and says so, then trains on
if expect_rc 0 "f16 with an overflowing loss scale" "$baton" run "$srcdir/models/mlp.yaml" --steps 40 \
     train.precision=f16 train.loss_scale=1e10; then
  tests=$((tests + 1))
  grep -q '^step 1 skipped: gradients overflowed at loss scale 10000000000; scale now 5000000000' "$tmp/out" ||
    fail "f16: no skip message: $(head -5 "$tmp/out")"
  tests=$((tests + 1))
  [ "$(grep -c 'skipped' "$tmp/out")" -lt 40 ] || fail "f16: every step was skipped"
fi
if expect_rc 2 "loss_scale without f16" "$baton" check "$srcdir/models/mlp.yaml" train.loss_scale=1024; then
  tests=$((tests + 1))
  grep -q 'train.loss_scale only applies to precision: f16' "$tmp/err" || fail "loss_scale: $(cat "$tmp/err")"
fi
expect_rc 0 "bf16 run" "$baton" run "$srcdir/models/mlp.yaml" --steps 3 train.precision=bf16
# the watchdog: a value no deadline can hold is a usage error naming it (inf used to hang the run)
for w in inf nan 1e19 1.5e9 -1 0 "" 5s; do
  if expect_rc 2 "--watchdog '$w'" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --watchdog "$w"; then
    tests=$((tests + 1))
    case "$w" in ''|*[!0-9-]*) shown="'$w'" ;; *) shown=$w ;; esac
    grep -q -- "--watchdog: must be seconds above 0 and at most 1e+09, got $shown$" "$tmp/err" ||
      fail "--watchdog '$w': $(cat "$tmp/err")"
  fi
done
expect_rc 0 "--watchdog 1e9" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --watchdog 1e9

# hostile inputs (issue 16)
# every integer option of every command: overflow, wrap-around, negative, trailing garbage and
# spaces exit 2 naming the option and the value
# (4294967298 wraps to 2 in 32 bits: refused by the options narrower than 64 bits)
wide_opts=" run:--seed run:--eval-every run:--checkpoint-every "
int_opts="run:--stages run:--microbatches run:--steps run:--seed run:--threads run:--batch run:--epochs
  run:--eval-every run:--checkpoint-every check:--stages check:--microbatches schedule:--stages
  schedule:--microbatches profile:--batch profile:--microbatches profile:--repeats profile:--warmup
  profile:--threads plan:--microbatches plan:--repeats"
for co in $int_opts; do
  cmd=${co%%:*}; opt=${co#*:}
  for v in 99999999999999999999 4294967298 -1 3x " 3" 0x10 ""; do
    case "$wide_opts:$v" in *" $co "*:4294967298) continue ;; esac
    model="$srcdir/models/mlp.yaml"; [ "$cmd" = schedule ] && model=--validate
    if expect_rc 2 "$cmd $opt '$v'" "$baton" "$cmd" "$model" "$opt" "$v"; then
      tests=$((tests + 1))
      case "$v" in ''|*[!0-9-]*) shown="'$v'" ;; *) shown=$v ;; esac   # digits unquoted: "got 0"
      grep -q "^baton $cmd: $opt: must be .*, got $shown$" "$tmp/err" && grep -q "^(baton $cmd --help lists" "$tmp/err" ||
        fail "$cmd $opt '$v': message does not name the option and value: $(cat "$tmp/err")"
    fi
  done
done
expect_rc 0 "--seed at 2^64-1" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --seed 18446744073709551615

# invalid UTF-8 is reported at its line and column
if expect_rc 2 "bad UTF-8" "$baton" check "$srcdir/models/invalid/bad-utf8.yaml"; then
  tests=$((tests + 1))
  grep -q "^baton check: $srcdir/models/invalid/bad-utf8.yaml:7:14: invalid text" "$tmp/err" ||
    fail "bad UTF-8: no line and column: $(cat "$tmp/err")"
fi

# a model named ../../x must not make `baton profile` write outside the working directory
mkdir -p "$tmp/wd/a/b"
sed 's|^name: .*|name: ../../escaped|' "$srcdir/models/mlp.yaml" >"$tmp/wd/a/b/m.yaml"
if (cd "$tmp/wd/a/b" && expect_rc 2 "profile a traversal name" "$baton" profile m.yaml --repeats 1 --warmup 0); then
  tests=$((tests + 1))
  grep -q "is not a plain file name.*give --output FILE" "$tmp/err" || grep -q "give --output FILE" "$tmp/err" ||
    fail "traversal name: message does not say what to do: $(cat "$tmp/err")"
fi
tests=$((tests + 1))
[ ! -e "$tmp/wd/escaped.profile.json" ] || fail "traversal name: profile written outside the working directory"
(cd "$tmp/wd/a/b" && expect_rc 0 "profile a traversal name with --output" "$baton" profile m.yaml --repeats 1 \
   --warmup 0 -o here.json) && { tests=$((tests + 1)); [ -f "$tmp/wd/a/b/here.json" ] || fail "--output not written"; }

# `baton profile` measures at the model's train.precision (an override honoured, named in the header
# and the file); `baton plan --profile` refuses a profile of another precision (exit 2, naming the
# file and both precisions) and takes one of its own
if expect_rc 0 "profile at bf16" "$baton" profile "$srcdir/models/mlp.yaml" train.precision=bf16 --repeats 1 \
     --warmup 0 -o "$tmp/bf16.profile.json"; then
  tests=$((tests + 1))
  grep -q '^profile of .*, training, precision bf16, ' "$tmp/out" ||
    fail "profile at bf16: the header does not name the precision: $(head -1 "$tmp/out")"
  tests=$((tests + 1))
  grep -q '"precision": "bf16"' "$tmp/bf16.profile.json" || fail "profile at bf16: the file does not record it"
  if expect_rc 2 "plan an f32 model with a bf16 profile" "$baton" plan "$srcdir/models/mlp.yaml" \
       --profile "$tmp/bf16.profile.json"; then
    tests=$((tests + 1))
    grep -q "$tmp/bf16.profile.json was measured at precision bf16 but the model computes at f32" "$tmp/err" ||
      fail "precision mismatch: message does not name the file and both precisions: $(cat "$tmp/err")"
  fi
  expect_rc 0 "plan a bf16 model with a bf16 profile" "$baton" plan "$srcdir/models/mlp.yaml" \
    train.precision=bf16 --profile "$tmp/bf16.profile.json"
fi

# control characters from a model file or a path never reach the terminal raw
esc=$(printf '\033')
printf 'format: 1\nname: "x\\e]0;owned\\a"\n' >"$tmp/esc.yaml"
if expect_rc 2 "control characters in a name" "$baton" check "$tmp/esc.yaml"; then
  tests=$((tests + 1))
  grep -q "$tmp/esc.yaml:2:7: name contains the control character 0x1b" "$tmp/err" ||
    fail "control characters: $(cat "$tmp/err")"
fi
expect_rc 2 "control characters in a path" "$baton" check "$tmp/no${esc}[31mpe.yaml"
tests=$((tests + 1))
if grep -q "$esc" "$tmp/err"; then fail "a raw escape reached the terminal: $(od -c "$tmp/err" | head -3)"; fi
grep -q 'no\\x1b\[31mpe.yaml' "$tmp/err" || fail "path not shown escaped: $(cat "$tmp/err")"

# an 80 KB override costs linear memory and time (it took 6.5 GB): 1 GB of address space is plenty
long_list=$(awk 'BEGIN { s = "["; for (i = 0; i < 40000; i++) s = s "1,"; print s "1]" }')
long_key=$(awk 'BEGIN { s = "train"; for (i = 0; i < 40000; i++) s = s ".a"; print s "=1" }')
# (a sanitizer build reserves terabytes of shadow address space, so there the cap is left out and
# the 20 s limit alone catches the quadratic cost)
memcap='ulimit -v 1000000;'
case " ${BT_CC:-} ${BT_LDFLAGS:-} " in *-fsanitize=*) memcap= ;; esac
if expect_rc 2 "an 80 KB override value" sh -c "$memcap"' exec timeout 20 "$@"' sh "$baton" check \
     "$srcdir/models/mlp.yaml" "train.batch=$long_list"; then
  tests=$((tests + 1))
  grep -q "expected an integer for train.batch, got a sequence" "$tmp/err" || fail "long override: $(cut -c1-300 "$tmp/err")"
fi
if expect_rc 2 "an 80 KB override key" sh -c "$memcap"' exec timeout 20 "$@"' sh "$baton" check \
     "$srcdir/models/mlp.yaml" "$long_key"; then
  tests=$((tests + 1))
  grep -q "the key has 40001 parts; at most 64" "$tmp/err" || fail "long override key: $(cut -c1-300 "$tmp/err")"
fi

# checkpoint directories: one run at a time; the first, killed by SIGTERM, dies of it cleanly
ck="$tmp/ck"
mkdir -p "$ck"
: >"$ck/checkpoint.safetensors.tmp.Ab12Cd"   # a stale temporary of a killed run: removed
: >"$ck/checkpoint.safetensors.tmp.keep"     # not baton's name pattern: kept
"$baton" run "$srcdir/models/mlp.yaml" --steps 100000000 --checkpoint-dir "$ck" >/dev/null 2>&1 &
bg=$!
i=0
while ! grep -q "^pid $bg " "$ck/.lock" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
if expect_rc 2 "second run on a busy checkpoint directory" "$baton" run "$srcdir/models/mlp.yaml" --steps 2 \
     --checkpoint-dir "$ck"; then
  tests=$((tests + 1))
  grep -q "the checkpoint directory is in use by another run (pid $bg on host " "$tmp/err" ||
    fail "busy directory: message does not name pid $bg: $(cat "$tmp/err")"
fi
tests=$((tests + 1))
[ ! -e "$ck/checkpoint.safetensors.tmp.Ab12Cd" ] && [ -e "$ck/checkpoint.safetensors.tmp.keep" ] ||
  fail "stale temporaries: $(ls -a "$ck")"
kill -TERM $bg; { wait $bg; } 2>/dev/null; rc=$?
tests=$((tests + 1))
[ "$rc" = 143 ] || fail "SIGTERM'd run: exit $rc, expected 143 (killed by SIGTERM)"
rm -f "$ck/checkpoint.safetensors.tmp.keep"
expect_rc 0 "run after the first ended" "$baton" run "$srcdir/models/mlp.yaml" --steps 4 --checkpoint-dir "$ck"
before=$(cksum <"$ck/checkpoint.safetensors"; stat -c '%i %Y' "$ck/checkpoint.safetensors")
if expect_rc 0 "resume with fewer steps" "$baton" run "$srcdir/models/mlp.yaml" --steps 2 --resume "$ck" \
     --checkpoint-dir "$ck"; then
  tests=$((tests + 1))
  grep -q "nothing to do: $ck is at step 4 and this run has 2 steps; the checkpoint is left as it is" "$tmp/err" ||
    fail "resume with fewer steps: $(cat "$tmp/err")"
  tests=$((tests + 1))
  [ "$before" = "$(cksum <"$ck/checkpoint.safetensors"; stat -c '%i %Y' "$ck/checkpoint.safetensors")" ] ||
    fail "resume with fewer steps changed the checkpoint"
fi
tests=$((tests + 1))
[ -z "$(find "$ck" -name '*.tmp.*')" ] || fail "temporaries left: $(ls -a "$ck")"


# non-finite numbers never pass silently: NaN in npy data is refused at load (exit 2, naming the
# file, sample and element); a run whose update diverges fails (exit 1) on its non-finite eval
# loss; JSON records write such numbers as null (strict JSON: no NaN, no Infinity)
if command -v python3 >/dev/null 2>&1; then
  BT_TESTS_DIR="$srcdir/tests" python3 - "$tmp" <<'PY'
import os, struct, sys
sys.path.insert(0, os.environ["BT_TESTS_DIR"])
from npy_write import npy
x = [0.5] * 32
x[3 * 4 + 1] = float("nan")
npy(sys.argv[1] + "/x.npy", "<f4", (8, 4), "f", x)
npy(sys.argv[1] + "/y.npy", "<i4", (8,), "i", [i % 2 for i in range(8)])
PY
  cat >"$tmp/nan.yaml" <<YAML
format: 1
name: nan-data
inputs:
  x: {shape: [4]}
  label: {shape: [], dtype: i32}
layers:
  - {name: fc, op: linear, args: {out: 8}, act: relu}
  - {name: head, op: linear, args: {out: 2}}
  - {name: loss, op: cross_entropy, from: [head, label]}
train: {batch: 4}
data:
  train: {type: npy, images: $tmp/x.npy, labels: $tmp/y.npy}
YAML
  if expect_rc 2 "NaN in npy data" "$baton" run "$tmp/nan.yaml" --steps 1; then
    tests=$((tests + 1))
    grep -q "x.npy: sample 3, element 1 is NaN" "$tmp/err" || fail "NaN data: $(cat "$tmp/err")"
  fi
  if expect_rc 1 "a diverged run fails" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --log-format jsonl \
       train.optimizer.lr=1e39; then
    tests=$((tests + 1))
    grep -q "step 1: the eval loss is .*: the weights have diverged" "$tmp/err" || fail "diverged: $(cat "$tmp/err")"
    tests=$((tests + 1))
    grep -q '^{"eval": true, "step": 1, "loss": null, ' "$tmp/out" || fail "diverged: no null loss: $(cat "$tmp/out")"
    tests=$((tests + 1))
    python3 -c 'import json,sys
def bad(c): raise ValueError("non-finite number " + c)
[json.loads(l, parse_constant=bad) for l in open(sys.argv[1])]' "$tmp/out" 2>"$tmp/perr" ||
      fail "diverged: not strict JSON: $(tail -1 "$tmp/perr")"
  fi
fi

# a language model on text: train, checkpoint with vocab.txt, generate; what is refused
for i in $(seq 60); do echo "to be, or not to be: that is the question"; done >"$tmp/t.txt"
# (16 tokens: exactly the characters of the text, so no sampled token falls outside vocab.txt)
cat >"$tmp/lm.yaml" <<YAML
format: 1
inputs:
  idx: {shape: [8], dtype: i32}
  label: {shape: [8], dtype: i32}
layers:
  - {name: wte, op: embedding, args: {num: 16, dim: 8, std: 0.1}, from: idx}
  - {name: wpe, op: pos_embedding, args: {std: 0.1}}
  - name: h
    repeat: 2
    layers:
      - {name: ln, op: layernorm}
      - {name: qkv, op: linear, args: {out: 24}}
      - {name: attn, op: attention, args: {heads: 2}}
      - {name: res, op: add, from: [-1, -4]}
  - {name: lm_head, op: linear, args: {out: 16, bias: false}, tie: wte}
  - {name: loss, op: cross_entropy, from: [lm_head, label]}
parallel: {pipeline: {stages: 2, microbatches: 2}}
train: {batch: 4, steps: 3}
data:
  train: {type: text, path: $tmp/t.txt}
YAML
if expect_rc 0 "train on text" "$baton" run "$tmp/lm.yaml" --checkpoint-dir "$tmp/lm"; then
  tests=$((tests + 1))
  grep -q "^final: validation loss [0-9.]*, 3 steps" "$tmp/out" || fail "train on text: no final line: $(tail -3 "$tmp/out")"
  tests=$((tests + 1))
  [ -f "$tmp/lm/vocab.txt" ] && [ -f "$tmp/lm/checkpoint.safetensors" ] || fail "train on text: no checkpoint or vocab.txt"
  if expect_rc 0 "generate" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/lm" --prompt "to be" --tokens 12 --top-k 3; then
    tests=$((tests + 1))
    head -c 5 "$tmp/out" | grep -q "^to be" || fail "generate: output does not start with the prompt: $(head -2 "$tmp/out")"
    tests=$((tests + 1))
    grep -q "^12 tokens in .* tokens/s (KV cache" "$tmp/out" || fail "generate: no rate line: $(tail -2 "$tmp/out")"
  fi
  expect_rc 0 "generate without the KV cache" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/lm" --tokens 5 --no-kv-cache
  # through 1, 2 and 3 stages, three prompts in flight: the same texts; prompt 2 = prompt 2 alone
  # with seed + 1; the same from --prompts FILE
  printf 'be\nquestion\n' >"$tmp/prompts.txt"
  for s in 1 2 3; do
    if expect_rc 0 "generate, 3 prompts on $s stages" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/lm" --stages $s \
        --prompt "to be" --prompts "$tmp/prompts.txt" --tokens 20 --top-k 4 --seed 3; then
      sed '/^[0-9]* tokens in /,$d' "$tmp/out" >"$tmp/gen$s"
      tests=$((tests + 1))
      grep -q "^60 tokens in .* tokens/s overall (KV cache, $s stages\{0,1\}, 3 prompts in flight, stages busy" "$tmp/out" &&
        grep -q "^  prompt 3: 20 tokens in" "$tmp/out" || fail "generate 3 prompts: no rate lines: $(tail -5 "$tmp/out")"
    fi
  done
  tests=$((tests + 1))
  cmp -s "$tmp/gen1" "$tmp/gen2" && cmp -s "$tmp/gen1" "$tmp/gen3" ||
    fail "generate: 1, 2 and 3 stages differ: $(diff "$tmp/gen1" "$tmp/gen3" | head -5)"
  if expect_rc 0 "generate prompt 2 alone" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/lm" --stages 2 \
      --prompt be --tokens 20 --top-k 4 --seed 4; then
    tests=$((tests + 1))
    sed '/^20 tokens in /,$d' "$tmp/out" >"$tmp/alone"
    awk '/^--- prompt 2 of 3 ---$/ {f = 1; next} /^--- prompt 3 of 3 ---$/ {f = 0} f' "$tmp/gen1" >"$tmp/second"
    [ -s "$tmp/alone" ] && cmp -s "$tmp/alone" "$tmp/second" ||
      fail "generate: prompt 2 alone (seed 4) differs from prompt 2 of 3 (seed 3): $(head -2 "$tmp/alone")"
  fi
  printf 'be\n\nquestion\n' >"$tmp/prompts2.txt"
  if expect_rc 2 "generate: an empty line in --prompts" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/lm" \
      --prompts "$tmp/prompts2.txt"; then
    tests=$((tests + 1))
    grep -q "prompts2.txt: line 2 is empty" "$tmp/err" || fail "generate --prompts empty line: $(cat "$tmp/err")"
  fi
  if expect_rc 2 "generate --score with --prompt" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/lm" --score 2 --prompt be; then
    tests=$((tests + 1))
    grep -q "score scores validation windows; it takes no --prompt" "$tmp/err" || fail "generate --score --prompt: $(cat "$tmp/err")"
  fi
  if expect_rc 0 "generate --score" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/lm" --score 3; then
    tests=$((tests + 1))
    grep -q "^3 validation windows of 8 tokens: mean loss \([0-9.]*\) by the KV-cache decoder, \1 by the engine" "$tmp/out" ||
      fail "generate --score: decoder and forward differ: $(cat "$tmp/out")"
  fi
  # in the model's precision: bf16 decoder and bf16 forward agree to rounding, and say so
  if expect_rc 0 "generate --score in bf16" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/lm" --score 3 \
      train.precision=bf16; then
    tests=$((tests + 1))
    sed -n 's/^3 validation windows of 8 tokens: mean loss \([0-9.]*\) by the KV-cache decoder, \([0-9.]*\) by the engine.s forward (precision bf16)$/\1 \2/p' \
      "$tmp/out" | awk '{ok = $1 - $2 < 0.002 && $2 - $1 < 0.002} END {exit !(NR == 1 && ok)}' ||
      fail "generate --score bf16: $(cat "$tmp/out")"
  fi
  if expect_rc 2 "generate: prompt outside the vocabulary" "$baton" generate "$tmp/lm.yaml" --weights "$tmp/lm" --prompt "Zed"; then
    tests=$((tests + 1))
    grep -q "byte 0x5a at 0 is not in the model's vocabulary" "$tmp/err" || fail "generate vocabulary: $(cat "$tmp/err")"
  fi
  expect_rc 2 "generate without --weights" "$baton" generate "$tmp/lm.yaml"
fi
# text data resumes exactly (tests/lm_cli.sh), but not under another seed: its windows would change
if expect_rc 2 "text data --resume with another seed" "$baton" run "$tmp/lm.yaml" --resume "$tmp/lm" --steps 4 --seed 9; then
  tests=$((tests + 1))
  grep -q "saved with seed 0 but this run uses seed 9" "$tmp/err" || fail "text --resume: $(cat "$tmp/err")"
fi
if expect_rc 2 "text data file missing" "$baton" run "$tmp/lm.yaml" data.train.path="$tmp/none.txt"; then
  tests=$((tests + 1))
  grep -q "none.txt: cannot open" "$tmp/err" || fail "text data file missing: $(cat "$tmp/err")"
fi
if expect_rc 2 "vocabulary larger than the model" "$baton" run "$tmp/lm.yaml" layers.0.args.num=5 layers.3.args.out=5; then
  tests=$((tests + 1))
  grep -q "distinct tokens but 'wte' takes 5" "$tmp/err" || fail "vocabulary size: $(cat "$tmp/err")"
fi

# activation recomputation and parallel: auto (docs/recompute.md, docs/planner.md)
expect_rc 0 "--recompute stage" "$baton" run "$srcdir/models/mlp.yaml" --steps 2 --stages 2 --microbatches 4 --recompute stage
expect_rc 2 "--recompute of no layer" "$baton" run "$srcdir/models/mlp.yaml" --steps 1 --recompute fc9 &&
  { tests=$((tests + 1)); grep -q "'fc9', which is no layer" "$tmp/err" || fail "--recompute fc9: $(cat "$tmp/err")"; }
expect_rc 2 "--recompute without train:" "$baton" run "$srcdir/models/mlp-infer.yaml" --steps 1 --recompute stage
expect_rc 0 "--recompute with zb-h1 (W recomputes too)" "$baton" run "$srcdir/models/mlp.yaml" --steps 2 \
  --stages 2 --microbatches 4 --schedule zb-h1 --recompute stage
# baton plan with interleaved's virtual chunks by hand, and the refusals (docs/planner.md)
expect_rc 0 "plan --virtual 2" "$baton" plan "$srcdir/models/mlp.yaml" --schedule interleaved-1f1b --virtual 2 \
  --microbatches 4 --repeats 1 &&
  { tests=$((tests + 1)); grep -q "^    virtual: 2$" "$tmp/out" && grep -q "^    stages: 4$" "$tmp/out" ||
    fail "plan --virtual 2: no virtual/stages in the YAML: $(tail -8 "$tmp/out")"; }
expect_rc 2 "plan --virtual with 1f1b" "$baton" plan "$srcdir/models/mlp.yaml" --schedule 1f1b --virtual 2 --repeats 1 &&
  { tests=$((tests + 1)); grep -q "applies to interleaved-1f1b only" "$tmp/err" || fail "plan --virtual 1f1b: $(cat "$tmp/err")"; }
expect_rc 2 "plan --virtual with --schedule auto" "$baton" plan "$srcdir/models/mlp.yaml" --schedule auto --virtual 2
sed 's/^parallel:.*/parallel: auto/; /^  devices:/d; /^  pipeline:/d; /^    [a-z]*:/d' "$srcdir/models/mlp.yaml" >"$tmp/auto.yaml"
if grep -q '^parallel: auto$' "$tmp/auto.yaml"; then
  expect_rc 0 "parallel: auto" "$baton" run "$tmp/auto.yaml" --steps 2 &&
    { tests=$((tests + 1)); grep -q "^best: .* predicted .* ms per step" "$tmp/out" || fail "parallel: auto: no choice printed: $(head -5 "$tmp/out")"; }
  expect_rc 0 "plan --schedule auto" "$baton" plan "$tmp/auto.yaml" --repeats 1 &&
    { tests=$((tests + 1)); grep -Eq "^(one stage is fastest|pipelining pays|one stage: )" "$tmp/out" || fail "plan auto: no comparison: $(cat "$tmp/out")"; }
  expect_rc 0 "layout flags replace parallel: auto" "$baton" run "$tmp/auto.yaml" --steps 1 --stages 2 &&
    { tests=$((tests + 1)); ! grep -q "^best:" "$tmp/out" || fail "flags did not replace auto"; }
  # the layout an auto run chose is recorded beside its checkpoints and a resume takes it, so the
  # continuation is bit for bit (src/cli/auto_record.c)
  if expect_rc 0 "parallel: auto with a checkpoint dir" "$baton" run "$tmp/auto.yaml" --steps 6 --checkpoint-every 3 \
    --keep-last 0 --checkpoint-dir "$tmp/auto-a"; then
    tests=$((tests + 1))
    grep -q '^microbatches [0-9]' "$tmp/auto-a/auto-layout.txt" || fail "no auto-layout.txt: $(ls "$tmp/auto-a")"
    if expect_rc 0 "parallel: auto resumed" "$baton" run "$tmp/auto.yaml" --steps 6 \
      --resume "$tmp/auto-a/checkpoint-00000003.safetensors" --checkpoint-dir "$tmp/auto-b"; then
      tests=$((tests + 2))
      grep -q "^parallel: auto: resuming with the layout recorded in $tmp/auto-a/auto-layout.txt" "$tmp/out" ||
        fail "auto resume did not take the record: $(head -3 "$tmp/out")"
      cmp -s "$tmp/auto-a/checkpoint-00000006.safetensors" "$tmp/auto-b/checkpoint.safetensors" ||
        fail "auto resume: not bit for bit"
    fi
    # a record of a layout no search would give (3 stages on 2 cores) is what the resume runs
    mkdir -p "$tmp/auto-c" && cp "$tmp/auto-a/checkpoint-00000003.safetensors" "$tmp/auto-c/checkpoint.safetensors"
    printf 'stages 3\nmicrobatches 4\nschedule gpipe\nthreads 1\nrecompute 0\ndevices cpu:0,cpu:1,cpu:0\nlayout fc1|fc2|head,loss\n' \
      >"$tmp/auto-c/auto-layout.txt"
    expect_rc 0 "parallel: auto resumed on a recorded 3-stage layout" "$baton" run "$tmp/auto.yaml" --steps 6 \
      --resume "$tmp/auto-c" && { tests=$((tests + 1)); grep -Eq '^  2 +cpu:0 ' "$tmp/out" || fail "recorded layout not run: $(cat "$tmp/out")"; }
    echo "stages three" >"$tmp/auto-c/auto-layout.txt"
    expect_rc 2 "parallel: auto: a damaged layout record" "$baton" run "$tmp/auto.yaml" --steps 6 --resume "$tmp/auto-c" &&
      { tests=$((tests + 1)); grep -q "not a layout record baton wrote" "$tmp/err" || fail "damaged record: $(cat "$tmp/err")"; }
    rm "$tmp/auto-c/auto-layout.txt"
    expect_rc 0 "parallel: auto: resume without a record" "$baton" run "$tmp/auto.yaml" --steps 6 --resume "$tmp/auto-c" &&
      { tests=$((tests + 1)); grep -q "has no record of the layout its run chose; choosing again" "$tmp/err" || fail "no-record warning: $(cat "$tmp/err")"; }
  fi
else
  fail "could not make a parallel: auto copy of mlp.yaml"
fi

echo "cli: $tests tests, $failed failed"
[ "$failed" = 0 ]
