#!/bin/sh
# bench/compare_generate.sh: `baton generate` on models/gpt-shakespeare.yaml, measured in the same
# run, alternating, medians of ROUNDS rounds of TOKENS tokens after "ROMEO:" (seed = the round):
#   - the KV cache through 1 stage (cpu:0) and 2 stages (cpu:0, cpu:1), with 1 and 4 prompts in
#     flight (4: --prompt four times; the rate is all new tokens over the whole run), each as
#     tokens/s and as a ratio to 1 stage with 1 prompt;
#   - without the KV cache (the engine's forward over the window per token, the model's 2 stages);
#   - the peer: bench/torch_gpt.py --generate (the same model in PyTorch with a KV cache, the K
#     prompts as one batch) at 1 and 2 threads (OPENBLAS_NUM_THREADS to match), its better one.
# Usage: bench/compare_generate.sh BUILD_DIR CKPT [ROUNDS] [TOKENS]
# CKPT: a checkpoint directory of gpt-shakespeare (`baton run models/gpt-shakespeare.yaml
# --checkpoint-dir DIR`; the weights do not change the speed). Needs Debian's python3-torch.
set -eu
build=${1:?usage: compare_generate.sh BUILD_DIR CKPT [ROUNDS] [TOKENS]}
ckpt=${2:?usage: compare_generate.sh BUILD_DIR CKPT [ROUNDS] [TOKENS]}
rounds=${3:-3}; tokens=${4:-200}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
python=/usr/bin/python3
$python -c 'import torch' 2>/dev/null || { echo "compare_generate: python3-torch is not installed"; exit 2; }
make -s -C "$build" baton >/dev/null
core=SkylakeX
grep -q avx512f /proc/cpuinfo || core=Haswell
median() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
cd "$root"
# gen STAGES PROMPTS [more flags]: tokens/s and the stages' busy share, "R B"
gen() {
  s=$1; k=$2; shift 2
  devs=cpu:0; [ "$s" = 2 ] && devs=cpu:0,cpu:1
  set -- --stages "$s" --devices "$devs" --tokens "$tokens" --seed "$r" "$@"
  i=0; while [ $i -lt "$k" ]; do set -- "$@" --prompt "ROMEO:"; i=$((i + 1)); done
  "$build/baton" generate models/gpt-shakespeare.yaml --weights "$ckpt" "$@" |
    awk '/^[0-9]+ tokens in .* tokens\/s/ {r = $6; b = "-"; if (match($0, /busy [0-9]+%/)) b = substr($0, RSTART + 5, RLENGTH - 6); print r, b}'
}
s1p1=""; s2p1=""; s1p4=""; s2p4=""; nokv=""; t1p1=""; t2p1=""; t1p4=""; t2p4=""
for r in $(seq "$rounds"); do
  a=$(gen 1 1); b=$(gen 2 1); c=$(gen 1 4); d=$(gen 2 4); n=$(gen 2 1 --no-kv-cache)
  p11=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=1 $python "$here/torch_gpt.py" --generate "$tokens" --prompts 1 --threads 1 | awk '/^torch_generate/ {print $3}')
  p21=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=2 $python "$here/torch_gpt.py" --generate "$tokens" --prompts 1 --threads 2 | awk '/^torch_generate/ {print $3}')
  p14=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=1 $python "$here/torch_gpt.py" --generate "$tokens" --prompts 4 --threads 1 | awk '/^torch_generate/ {print $3}')
  p24=$(OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=2 $python "$here/torch_gpt.py" --generate "$tokens" --prompts 4 --threads 2 | awk '/^torch_generate/ {print $3}')
  echo "round $r (load $(cut -d' ' -f1 /proc/loadavg)): tokens/s [busy]: 1 stage 1 prompt $a, 2 stages 1 prompt $b, 1 stage 4 prompts $c, 2 stages 4 prompts $d, no KV cache ${n% *}; pytorch 1 prompt $p11 (1 thread) $p21 (2), 4 prompts $p14 (1) $p24 (2)"
  s1p1="$s1p1 ${a% *}"; s2p1="$s2p1 ${b% *}"; s1p4="$s1p4 ${c% *}"; s2p4="$s2p4 ${d% *}"; nokv="$nokv ${n% *}"
  t1p1="$t1p1 $p11"; t2p1="$t2p1 $p21"; t1p4="$t1p4 $p14"; t2p4="$t2p4 $p24"
done
awk -v a="$(median $s1p1)" -v b="$(median $s2p1)" -v c="$(median $s1p4)" -v d="$(median $s2p4)" -v n="$(median $nokv)" \
    -v p11="$(median $t1p1)" -v p21="$(median $t2p1)" -v p14="$(median $t1p4)" -v p24="$(median $t2p4)" -v tok="$tokens" 'BEGIN {
  best1 = p11 > p21 ? p11 : p21; best4 = p14 > p24 ? p14 : p24;
  printf "generate %d tokens after \"ROMEO:\", gpt-shakespeare, medians of rounds (tokens/s):\n", tok;
  printf "  KV cache, 1 stage,  1 prompt   %9.1f   1.00x\n", a;
  printf "  KV cache, 2 stages, 1 prompt   %9.1f   %.2fx of 1 stage\n", b, b / a;
  printf "  KV cache, 1 stage,  4 prompts  %9.1f   %.2fx of 1 prompt\n", c, c / a;
  printf "  KV cache, 2 stages, 4 prompts  %9.1f   %.2fx of 1 stage 1 prompt, %.2fx of 1 stage 4 prompts\n", d, d / a, d / c;
  printf "  no KV cache (2 stages, 1 prompt) %7.1f   KV cache (2 stages) / without: %.2fx\n", n, b / n;
  printf "  pytorch KV cache, 1 prompt     %9.1f   (1 thread %.1f, 2 threads %.1f)\n", best1, p11, p21;
  printf "  pytorch KV cache, 4 prompts    %9.1f   (1 thread %.1f, 2 threads %.1f; one batch of 4)\n", best4, p14, p24;
  printf "  baton / best pytorch: 1 prompt %.2fx (baton 1 stage), 4 prompts %.2fx (baton 2 stages)\n", a / best1, d / best4 }'
