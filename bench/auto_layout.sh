#!/bin/sh
# bench/auto_layout.sh: does `parallel: auto` run as fast as the fastest layout found by hand?
# For each model (models/fashion-mlp.yaml: 784-1024-1024-10, batch 256; bench/mlp7.yaml: 784-
# 1024x6-10, batch 1024; MODELS=cnn adds models/fashion-cnn.yaml, batch 128; synthetic data, AdamW)
# it trains STEPS steps under every hand layout
# below and under parallel: auto, ROUNDS rounds, the layouts alternating within each round (the
# machine is shared: load drifts, so no layout gets a quiet stretch the others miss), then prints
# each layout's median step time, auto's ratio to the fastest hand layout, and the PyTorch peer at
# its best thread setting measured in the same rounds.
# Hand layouts (the search space of parallel: auto on 2 cores): 1 stage x {1, 2} BLAS threads x
# {1, 2, 4} micro-batches; 2 stages x 1 thread x {1f1b, gpipe, zb-h1, interleaved-1f1b with
# virtual 2} x {2, 4, 8, 16} micro-batches (2 threads each would oversubscribe 2 cores; 3 stages
# on 2 cores likewise). The model file's parallel: section is replaced for each run (parallel:
# auto for auto, the interleaved layout written out, since run has no flag for virtual).
# Usage: bench/auto_layout.sh BUILD_DIR [ROUNDS] [STEPS_MLP] [STEPS_MLP7] [STEPS_CNN]
# MODELS="mlp mlp7" (default) picks the models; KEEP=DIR keeps every run's output there.
set -eu
build=${1:?usage: auto_layout.sh BUILD_DIR [ROUNDS] [STEPS_MLP] [STEPS_MLP7]}
rounds=${2:-3}; steps3=${3:-30}; steps7=${4:-8}; stepscnn=${5:-10}
here=$(cd "$(dirname "$0")" && pwd); src=$(dirname "$here")
baton=$build/baton
python=/usr/bin/python3
have_torch=1; $python -c 'import torch' 2>/dev/null || have_torch=0
core=$(grep -q avx512f /proc/cpuinfo && echo SkylakeX || echo Haswell)
if [ -n "${KEEP:-}" ]; then tmp=$KEEP; mkdir -p "$tmp"; else tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; fi

layouts="1s-t1-m1 1s-t1-m2 1s-t1-m4 1s-t2-m1 1s-t2-m2 1s-t2-m4"
for s in 1f1b gpipe zb-h1 il2; do for m in 2 4 8 16; do layouts="$layouts 2s-$s-m$m"; done; done
layouts="$layouts auto"

args_of() { # layout -> baton run flags
  case $1 in
    auto) echo "" ;;
    1s-t*) t=${1#1s-t}; t=${t%%-*}; m=${1##*-m}; echo "--stages 1 --threads $t --microbatches $m" ;;
    2s-il2-*) echo "--threads 1" ;; # the file says it (with_parallel)
    2s-*) s=${1#2s-}; s=${s%-m*}; m=${1##*-m}; echo "--devices cpu:0,cpu:1 --stages 2 --threads 1 --schedule $s --microbatches $m --partition params" ;;
  esac
}

# The model file with its parallel: section replaced by $2 (one YAML line), written to $3.
with_parallel() {
  awk -v par="$2" '
    /^parallel:/ { skip = 1; next }
    skip && /^[^ #]/ { skip = 0 }
    !skip { print }
    END { print par }' "$1" >"$3"
}

file_for() { # model file, layout -> the file to run
  case $2 in
    2s-il2-*) m=${2##*-m}
      with_parallel "$1" "parallel: {devices: [cpu:0, cpu:1], pipeline: {stages: 4, virtual: 2, microbatches: $m, schedule: interleaved-1f1b, partition: params}}" "$tmp/il2-m$m.yaml"
      echo "$tmp/il2-m$m.yaml" ;;
    *) with_parallel "$1" "parallel: auto" "$tmp/auto.yaml"; echo "$tmp/auto.yaml" ;;
  esac
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

bench_model() { # name file steps widths batch
  name=$1; file=$2; steps=$3; widths=$4; batch=$5
  for r in $(seq "$rounds"); do
    for l in $layouts; do
      # shellcheck disable=SC2046
      f=$(file_for "$file" "$l")
      ms=$(env -u OPENBLAS_CORETYPE "$baton" run "$f" --synthetic --steps "$steps" $(args_of "$l") 2>&1 |
           tee "$tmp/$name-$l-$r.log" | sed -n 's/^median step \([0-9.]*\) ms.*/\1/p')
      echo "$ms" >>"$tmp/$name-$l"
    done
    if [ $have_torch = 1 ]; then
      for t in 1 2; do
        ms=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t $python "$here/torch_mlp.py" "$steps" "$t" "$widths" "$batch" | awk '{print $2}')
        echo "$ms" >>"$tmp/$name-torch-t$t"
      done
    fi
    echo "$name: round $r of $rounds done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  done
  echo "== $name (batch $batch, $steps steps a run, medians of $rounds alternating rounds, load at the end $(cut -d' ' -f1-3 /proc/loadavg))"
  best=""; best_ms=""
  for l in $layouts; do
    m=$(median <"$tmp/$name-$l" | tr -d '\n')
    printf '  %-12s %9s ms  %8s samples/s\n' "$l" "$m" "$(awk -v m="$m" -v b="$batch" 'BEGIN { if (m > 0) printf "%.0f", b * 1000 / m }')"
    if [ "$l" != auto ] && { [ -z "$best_ms" ] || awk -v a="$m" -v b="$best_ms" 'BEGIN { exit !(a < b) }'; }; then best=$l; best_ms=$m; fi
  done
  auto_ms=$(median <"$tmp/$name-auto" | tr -d '\n')
  for r in $(seq "$rounds"); do
    pred=$(sed -n 's/^best: \(.*\) on .*predicted.*/\1/p' "$tmp/$name-auto-$r.log")
    ran=$(sed -n 's/^runs: \(.*\) (measured fastest)/\1/p' "$tmp/$name-auto-$r.log")
    echo "  auto, round $r: predicted fastest $pred; ran ${ran:-that one (fastest in its trial steps too)}"
  done
  awk -v a="$auto_ms" -v b="$best_ms" -v l="$best" 'BEGIN { printf "  auto / fastest hand layout (%s): %.3f of its speed (target >= 0.95)\n", l, b / a }'
  if [ $have_torch = 1 ]; then
    t1=$(median <"$tmp/$name-torch-t1" | tr -d '\n'); t2=$(median <"$tmp/$name-torch-t2" | tr -d '\n')
    tb=$(awk -v a="$t1" -v b="$t2" 'BEGIN { print (a < b) ? a : b }')
    awk -v a="$auto_ms" -v t="$tb" -v t1="$t1" -v t2="$t2" 'BEGIN { printf "  pytorch best of 1 thread (%s ms) and 2 (%s ms): baton auto / pytorch throughput %.2fx\n", t1, t2, t / a }'
  fi
}

echo "cpu: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; OpenBLAS kernels $core; load at the start $(cut -d' ' -f1-3 /proc/loadavg)"
for model in ${MODELS:-mlp mlp7}; do
  case $model in
    mlp) bench_model mlp "$src/models/fashion-mlp.yaml" "$steps3" 784,1024,1024,10 256 ;;
    mlp7) bench_model mlp7 "$here/mlp7.yaml" "$steps7" 784,1024,1024,1024,1024,1024,1024,10 1024 ;;
    cnn) have_torch=0 # bench/torch_mlp.py is an MLP: no peer for the CNN here (bench/compare_torch.sh has one)
      bench_model cnn "$src/models/fashion-cnn.yaml" "$stepscnn" - 128 ;;
    *) echo "unknown model $model (mlp, mlp7, cnn)" >&2; exit 2 ;;
  esac
done
