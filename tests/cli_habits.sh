#!/bin/sh
# tests/cli_habits.sh: the baton command as people's habits expect it (issue 11): `baton devices`
# says "no CUDA device" where there is none and takes --json; check, plan and devices print valid
# JSON with --json; device shorthands (cpu*3, cpu:0-1, cpu:0*2) expand; --devices cpu:0 alone runs
# a two-stage model file as one stage; --memory means bytes per device in run as in plan (a limit
# between the largest stage and the sum of the stages is accepted by both); option errors name the
# option and range with a one-line hint. Prints "cli_habits: N tests, N failed".
. "$(dirname "$0")/cli_lib.sh"
mlp="$srcdir/models/mlp.yaml"
fm="$srcdir/models/fashion-mlp.yaml"

check() { what=$1; shift; tests=$((tests + 1)); "$@" || fail "$what"; }
have_python=0; command -v python3 >/dev/null 2>&1 && have_python=1
json_get() { # file python-expression-on-d
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# devices
if expect_rc 0 "devices" "$baton" devices; then
  if ! grep -q '^cuda:[0-9]' "$tmp/out"; then   # no GPU listed: it must say so plainly
    check "devices without a GPU: $(cat "$tmp/out")" grep -q '^cuda  *no CUDA device' "$tmp/out"
    check "devices without a GPU: not the driver's words" sh -c "! grep -qi 'driver' '$tmp/out'"
  fi
fi
if expect_rc 0 "devices --json" "$baton" devices --json && [ $have_python = 1 ]; then
  check "devices --json: cpu cores" test "$(json_get "$tmp/out" 'd["cpu"]["cores"] > 0')" = True
  check "devices --json: gpus and cuda" test "$(json_get "$tmp/out" 'type(d["gpus"]).__name__ + str("available" in d["cuda"])')" = listTrue
fi
expect_rc 2 "devices --bogus" "$baton" devices --bogus

# check --json, device shorthands, one stage per device
if expect_rc 0 "check --json" "$baton" check "$mlp" --json && [ $have_python = 1 ]; then
  check "check --json: layers" test "$(json_get "$tmp/out" '[l["name"] for l in d["layers"]]')" = "['fc1', 'fc2', 'head', 'loss']"
  check "check --json: two stages" test "$(json_get "$tmp/out" 'd["plan"]["n_stages"], len(d["plan"]["stages"])')" = "(2, 2)"
fi
if expect_rc 0 "check cpu*3" "$baton" check "$mlp" --json --devices 'cpu*3' && [ $have_python = 1 ]; then
  check "cpu*3: cpu:0..2" test "$(json_get "$tmp/out" '[s["device"] for s in d["plan"]["stages"]]')" = "['cpu:0', 'cpu:1', 'cpu:2']"
fi
if expect_rc 0 "check cpu:0*2" "$baton" check "$mlp" --json --devices 'cpu:0*2' && [ $have_python = 1 ]; then
  check "cpu:0*2: cpu:0 twice" test "$(json_get "$tmp/out" '[s["device"] for s in d["plan"]["stages"]]')" = "['cpu:0', 'cpu:0']"
fi
if expect_rc 0 "check cpu:1-2" "$baton" check "$mlp" --json --devices 'cpu:1-2' && [ $have_python = 1 ]; then
  check "cpu:1-2: cpu:1, cpu:2" test "$(json_get "$tmp/out" '[s["device"] for s in d["plan"]["stages"]]')" = "['cpu:1', 'cpu:2']"
fi
expect_rc 2 "a backwards device range" "$baton" check "$mlp" --devices 'cpu:3-1' &&
  check "backwards range: says so" grep -q "'cpu:3-1' is not a device range" "$tmp/err"
expect_rc 2 "cpu*0" "$baton" check "$mlp" --devices 'cpu*0'
if expect_rc 0 "profile cpu*2" "$baton" profile "$mlp" --devices 'cpu*2' --repeats 1 --warmup 0 -o "$tmp/p.json"; then
  check "profile cpu*2: measures cpu:0 and cpu:1: $(grep -i 'cpu:1' "$tmp/out" | head -2)" grep -q "cpu:0 -> cpu:1\|cpu:1" "$tmp/out"
fi
if expect_rc 0 "--devices cpu:0 alone" "$baton" run "$mlp" --devices cpu:0 --steps 2 --log-format jsonl; then
  check "--devices cpu:0: one stage: $(head -n 1 "$tmp/out")" grep -q '"stages": 1,' "$tmp/out"
fi
expect_rc 2 "--devices cpu:0 with --stages 2 (explicit)" "$baton" run "$mlp" --devices cpu:0 --stages 2 --steps 1

# plan --json
if expect_rc 0 "plan --json" "$baton" plan "$mlp" --json --repeats 1 && [ $have_python = 1 ]; then
  check "plan --json: stages and yaml" test "$(json_get "$tmp/out" 'd["n_stages"] == len(d["stages"]) and "parallel:" in d["yaml"]')" = True
  check "plan --json: memory source" test "$(json_get "$tmp/out" 'd["memory"]["source"]')" = "the machine's memory shared by its cpu devices"
fi

# --memory: bytes per device in both (fashion-mlp, batch 64: stage 1 holds about 16.6 MiB, both
# stages about 29 MiB): 20M fits each device in both commands, 16M fits in neither
expect_rc 0 "run --memory 20M (per device)" "$baton" run "$fm" --synthetic --batch 64 --steps 1 --memory 20M
expect_rc 0 "plan --memory 20M (per device)" "$baton" plan "$fm" train.batch=64 --memory 20M --repeats 1
if expect_rc 1 "run --memory 16M" "$baton" run "$fm" --synthetic --batch 64 --steps 1 --memory 16M; then
  check "run --memory: says where the limit came from: $(cat "$tmp/err")" grep -q "the limit given for each device (--memory" "$tmp/err"
  # fashion-mlp says parallel: auto: no layout it tries fits either, and it says so
  check "run --memory: parallel: auto says no layout fits: $(cat "$tmp/err")" grep -q "no layout fits" "$tmp/err"
fi
expect_rc 2 "plan --memory 16M" "$baton" plan "$fm" train.batch=64 --memory 16M --repeats 1

# option errors: the option, its range, the value, and a one-line hint (not the whole help)
if expect_rc 2 "--steps 0" "$baton" run "$mlp" --steps 0; then
  check "--steps 0: $(cat "$tmp/err")" grep -q "^baton run: --steps: must be a positive integer up to 1000000000, got 0$" "$tmp/err"
  check "--steps 0: two lines only" test "$(wc -l <"$tmp/err")" -eq 2
fi
if expect_rc 2 "unknown option" "$baton" run "$mlp" --stpes 3; then
  check "unknown option: named: $(cat "$tmp/err")" grep -q "^baton run: unknown option '--stpes'$" "$tmp/err"
  check "unknown option: no whole help" test "$(wc -l <"$tmp/err")" -eq 2
fi
if expect_rc 2 "predict: unknown option" "$baton" predict "$mlp" --bogus; then
  check "predict: unknown option named, hint: $(cat "$tmp/err")" test "$(sed -n 1p "$tmp/err")" = "baton predict: unknown option '--bogus'"
  check "predict: no whole help" test "$(wc -l <"$tmp/err")" -eq 2
fi
if expect_rc 2 "predict --data x" "$baton" predict "$mlp" --data x; then
  check "predict --data: range: $(cat "$tmp/err")" grep -q "^baton predict: --data: must be train or eval, got 'x'$" "$tmp/err"
fi
if expect_rc 2 "missing value" "$baton" check "$mlp" --stages; then
  check "missing value: $(cat "$tmp/err")" grep -q "^baton check: --stages needs a value$" "$tmp/err"
fi

echo "cli_habits: $tests tests, $failed failed"
[ "$failed" -eq 0 ]
