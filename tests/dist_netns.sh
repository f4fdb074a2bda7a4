#!/bin/sh
# tests/dist_netns.sh: two ranks in two network namespaces joined by a veth pair, as two machines
# on a wire: Open MPI's TCP transport only (--mca btl tcp,self, on the veth's subnet), mpirun
# inside the first namespace (its rank runs there) and an rsh agent that starts the second host's
# Open MPI daemon inside the second namespace (`ip netns exec`). Equivalence as tests/dist.sh: the
# loss of each of 3 steps and every tensor of the final checkpoint match the one-process run within
# 1e-5 relative, for (D, P) = (1, 2) (a pipeline boundary over the wire) and (2, 1) (the gradient
# all-reduce over the wire); each rank records its network namespace, which must differ, and the
# veth must have carried the bytes. Across the two "machines" the gradient reduction stays on MPI
# (the summary says mpi), and BATON_DP_REDUCE=shm is refused (exit 2) naming each rank's machine.
# Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2: where `ip netns add` or a veth pair
# is not permitted it skips (exit 77) and says why. The namespaces (and with them the veth pair)
# are removed on every exit path.
set -u
b=${BT_BUILDDIR:-.}/baton
b=$(cd "$(dirname "$b")" && pwd)/$(basename "$b")
src=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
model=$src/tests/dist/skip-mlp.yaml
cmp=$src/tests/dist/compare.py
skip() { echo "SKIP: $1"; exit 77; }
[ "${BT_HAVE_MPI:-1}" = 1 ] || skip "this baton was built without MPI"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2: scripts/install-deps.sh installs it)"
mpirun=${BT_MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null 2>&1 || skip "no $mpirun"
ns1=bt_ns$$a ns2=bt_ns$$b veth1=bt$$a veth2=bt$$b # veth names: at most 15 characters
net=10.213.0 # private to the two namespaces, so parallel runs of this test do not meet
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$ns1" 2>/dev/null
  ip netns del "$ns2" 2>/dev/null # deleting a namespace deletes its end of the veth, and the pair
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
if ! err=$(ip netns add "$ns1" 2>&1); then skip "network namespaces are not permitted here (ip netns add: $err)"; fi
ip netns add "$ns2" 2>"$tmp/e" || skip "a second network namespace is not permitted: $(cat "$tmp/e")"
if ! err=$(ip link add "$veth1" type veth peer name "$veth2" 2>&1); then skip "veth pairs are not permitted here (ip link add: $err)"; fi
fails=0 tests=0
ok() { tests=$((tests + 1)); echo "ok: $1"; }
bad() { tests=$((tests + 1)); fails=$((fails + 1)); echo "FAIL: $1"; }
set_up() {
  ip link set "$veth1" netns "$ns1" && ip link set "$veth2" netns "$ns2" &&
  ip -n "$ns1" addr add "$net.1/24" dev "$veth1" && ip -n "$ns2" addr add "$net.2/24" dev "$veth2" &&
  ip -n "$ns1" link set lo up && ip -n "$ns2" link set lo up &&
  ip -n "$ns1" link set "$veth1" up && ip -n "$ns2" link set "$veth2" up
}
if ! err=$(set_up 2>&1); then skip "a veth pair between two network namespaces cannot be set up here: $err"; fi
if ! err=$(ip netns exec "$ns2" true 2>&1); then skip "processes cannot enter a network namespace here (ip netns exec: $err)"; fi

# the rsh agent: Open MPI runs `agent HOST orted ...` for every host but its own
cat >"$tmp/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
  $net.1) ns=$ns1 ;;
  $net.2) ns=$ns2 ;;
  *) echo "dist_netns agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$tmp/agent.sh"
printf '%s.1 slots=1\n%s.2 slots=1\n' "$net" "$net" >"$tmp/hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include OMPI_MCA_rmaps_base_oversubscribe
if [ -n "${ASAN_OPTIONS:-}" ]; then export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"; fi
mpi() { # the job: rank 0 in ns1 (mpirun's own host), rank 1 in ns2 (through the agent)
  timeout 120 ip netns exec "$ns1" "$mpirun" --oversubscribe --hostfile "$tmp/hosts" -np 2 \
    --mca plm_rsh_agent "$tmp/agent.sh" --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" \
    --mca oob_tcp_if_include "$net.0/24" "$@"
}
rx_bytes() { ip -n "$ns2" -s link show "$veth2" | awk '/RX:/ {getline; print $1; exit}'; }

"$b" run "$model" --layout "fc_in,b0,b1,skip,head,loss" --schedule 1f1b --threads 1 --log-format jsonl \
  --checkpoint-dir "$tmp/ref" >"$tmp/ref.jsonl" 2>"$tmp/ref.err" || { bad "one-process reference: $(cat "$tmp/ref.err")"; exit 1; }
equiv() { # D P layout
  D=$1 P=$2 L=$3 tag="D=$1 P=$2 over a veth between two network namespaces"
  d=$tmp/run-$D-$P
  before=$(rx_bytes)
  mpi sh -c 'readlink /proc/self/ns/net >"$0/netns.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$tmp" \
    "$b" run "$model" --layout "$L" --schedule 1f1b --dp "$D" --threads 1 --log-format jsonl \
    --checkpoint-dir "$d" >"$tmp/$D-$P.jsonl" 2>"$tmp/$D-$P.err"
  rc=$?
  if [ $rc != 0 ]; then bad "$tag: exit $rc: $(head -c 2000 "$tmp/$D-$P.err")"; return; fi
  n0=$(cat "$tmp/netns.0" 2>/dev/null) n1=$(cat "$tmp/netns.1" 2>/dev/null)
  if [ -z "$n0" ] || [ "$n0" = "$n1" ]; then bad "$tag: the ranks ran in network namespaces '$n0' and '$n1'"; return; fi
  moved=$(($(rx_bytes) - before))
  if [ "$moved" -lt 10000 ]; then bad "$tag: the veth carried only $moved bytes"; return; fi
  if m1=$(python3 "$cmp" losses "$tmp/ref.jsonl" "$tmp/$D-$P.jsonl" 1e-5) &&
     m2=$(python3 "$cmp" tensors "$tmp/ref" "$d" 1e-5); then
    ok "$tag ($n0, $n1; $moved bytes received over the veth): $m1; $m2"
  else
    bad "$tag: $m1 ${m2:-}"
  fi
}
equiv 1 2 "fc_in,b0|b1,skip,head,loss"
equiv 2 1 "fc_in,b0,b1,skip,head,loss"
# the replicas are on two "machines" (two hosts for Open MPI): the gradient reduction stays on MPI,
# and forcing the shared-memory path is an error naming the ranks (exec/dist_shm.c)
p=$(sed -n 's/.*"allreduce": {[^}]*"path": "\([a-z-]*\)"}.*/\1/p' "$tmp/2-1.jsonl")
if [ "$p" = mpi ]; then ok "D=2 across two namespaces: the reduction path is mpi"
else bad "D=2 across two namespaces: the reduction path is '$p', not mpi"; fi
mpi -x BATON_DP_REDUCE=shm "$b" run "$model" --layout "fc_in,b0,b1,skip,head,loss" --dp 2 --threads 1 --steps 1 \
  >"$tmp/shm.out" 2>"$tmp/shm.err"; rc=$?
if [ $rc = 2 ] && grep -q "BATON_DP_REDUCE=shm: the replicas of stage 0 are not all on one machine (rank 0 on rank 0's machine, rank 1 on rank 1's machine)" "$tmp/shm.err"; then
  ok "BATON_DP_REDUCE=shm across two namespaces: exit 2 naming the ranks"
else bad "BATON_DP_REDUCE=shm across two namespaces: exit $rc: $(head -c 1500 "$tmp/shm.err")"; fi
echo "dist_netns: $tests tests, $fails failed"
[ $fails = 0 ]
