#!/usr/bin/env bash
# Data-parallel training across hosts: network namespaces joined by veth pairs on a bridge
# (the bridge in a namespace of its own, so the machine's network is never touched), one
# anvil-run per host, Gloo over each host's eth0, the rendezvous store a Redis server that
# node 0's anvil-run starts on its address.
#   multihost_test.sh BUILD_DIR equivalence   2 hosts x 2 ranks == one process
#   multihost_test.sh BUILD_DIR link-down     host 1's link goes down mid-training: the job
#                                             fails within the collective timeout naming rank
#                                             1 and the collective; --max-restarts brings it
#                                             back once the link is up, and it finishes
# Exit 77 (skipped) without root, ip netns or redis-server, saying which.
set -euo pipefail
build=$1
mode=$2
run="$build/launcher/anvil-run"
train="$build/tests/distributed/ddp_train_main"
[[ $(id -u) -eq 0 ]] || { echo "SKIP: network namespaces need root"; exit 77; }
command -v ip > /dev/null || { echo "SKIP: no ip (iproute2)"; exit 77; }
command -v redis-server > /dev/null || { echo "SKIP: no redis-server (the multi-host rendezvous store)"; exit 77; }
tag="a$$"
hub="${tag}hub"
tmp=$(mktemp -d)
export ANVIL_LOG_LEVEL=warning
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null || true; done
  for ns in "$hub" "${tag}h0" "${tag}h1"; do ip netns del "$ns" 2> /dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.err; do [[ -f $f ]] && { echo "--- $f"; grep -v 'anvil: CPU' "$f" | tail -8; }; done >&2
  exit 1
}

ip netns add "$hub" || { echo "SKIP: cannot create network namespaces here"; exit 77; }
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for h in 0 1; do
  ns="${tag}h$h"
  ip netns add "$ns"
  ip link add "${tag}v$h" type veth peer name eth0 netns "$ns"
  ip link set "${tag}v$h" netns "$hub"
  ip -n "$hub" link set "${tag}v$h" master br0 up
  ip -n "$ns" addr add "10.77.0.$((h + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done
master=10.77.0.1:29517

host() {  # host H NPROC ARGS...: one anvil-run in host H's namespace, in the background
  local h=$1 nproc=$2
  shift 2
  ip netns exec "${tag}h$h" "$run" --nproc "$nproc" --nnodes 2 --node-rank "$h" --master "$master" --ifname eth0 \
    --job-id "$mode" "$@" > "$tmp/host$h.out" 2> "$tmp/host$h.err" &
  pids+=($!)
}

case "$mode" in
  equivalence)
    "$train" --optimizer sgd --out "$tmp/one.st" > "$tmp/one.out" 2> /dev/null || fail "one process"
    host 0 2 "$train" --optimizer sgd --out "$tmp/multi.st"
    host 1 2 "$train" --optimizer sgd --out "$tmp/ignored.st"
    wait "${pids[0]}" || fail "host 0"
    wait "${pids[1]}" || fail "host 1"
    grep -q "rank 2 of 4 (local 0), gloo over eth0 (ipv4), rendezvous redis 10.77.0.1:29517" "$tmp/host1.err" ||
      fail "host 1's ranks did not use eth0 and the Redis store"
    "$train" --compare "$tmp/multi.st" "$tmp/one.st" --rtol 1e-6 || fail "2 hosts x 2 ranks differ from one process"
    [[ "$(grep -o 'correct=.*' "$tmp/host0.out")" == "$(grep -o 'correct=.*' "$tmp/one.out")" ]] ||
      fail "validation differs"
    ;;
  link-down)
    export ANVIL_COLLECTIVE_TIMEOUT_S=4 ANVIL_RENDEZVOUS_TIMEOUT_S=120
    "$train" --optimizer sgd --out "$tmp/one.st" > /dev/null 2>&1 || fail "one process"
    args=(--optimizer sgd --checkpoint "$tmp/ck.safetensors" --checkpoint-every 10 --step-delay-ms 300)
    host 0 1 --max-restarts 2 "$train" "${args[@]}" --out "$tmp/multi.st"
    host 1 1 --max-restarts 2 "$train" "${args[@]}" --out "$tmp/ignored.st"
    for _ in $(seq 1 600); do grep -q '^\[rank 0\] step 30 ' "$tmp/host0.err" && break; sleep 0.05; done
    grep -q '^\[rank 0\] step 30 ' "$tmp/host0.err" || fail "training did not reach step 30"
    down=$(date +%s.%N)
    ip -n "$hub" link set "${tag}v1" down
    for _ in $(seq 1 400); do grep -q 'did not arrive' "$tmp/host0.err" && break; sleep 0.05; done
    detected=$(date +%s.%N)
    line=$(grep -m1 'did not arrive' "$tmp/host0.err") || fail "the link failure was not reported within 20 s"
    echo "$line"
    echo "failure reported $(awk "BEGIN { printf \"%.1f\", $detected - $down }") s after the link went down (collective timeout 4 s)"
    [[ "$line" =~ (all_reduce|all_gather|broadcast).*\#[0-9]+\ failed\ on\ rank\ 0\ of\ 2.*rank\ 1\ did\ not\ arrive ]] ||
      fail "the message does not name the collective and rank 1: $line"
    sleep 1
    ip -n "$hub" link set "${tag}v1" up
    wait "${pids[0]}" || fail "host 0 did not recover"
    wait "${pids[1]}" || fail "host 1 did not recover"
    grep -q "restarting all ranks from the last checkpoint" "$tmp/host0.err" || fail "host 0 did not restart"
    grep 'anvil-run' "$tmp/host0.err" "$tmp/host1.err"
    "$train" --compare "$tmp/multi.st" "$tmp/one.st" --rtol 1e-6 || fail "the recovered run's weights differ"
    ;;
  *) fail "unknown mode $mode" ;;
esac
echo "PASS $mode"
