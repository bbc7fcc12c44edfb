#!/usr/bin/env bash
# New-connection rate through the router (issue 11; a benchmark, not a test), as root:
#
#   benches/connrate.sh [SECONDS] [THREADS] [ROUNDS]     # default 5 s, 8 threads, 3 rounds
#
# A client, a router running nodeportd and a backend in network namespaces. The load
# generator (benches/connrate.c: connect, request, read until the server closes, close)
# measures, in the same run and alternating ROUNDS times:
#   forward  plain routed connections from the client to the backend (no NAT: the limit)
#   nat      connections to the router's NodePort, DNATed to the backend's 3 endpoints
# first with 10 services in the table, then with 10 000 (3 endpoints each).
# Prints one line per measurement and the ratios. Addresses: 198.18.0.0/15 only.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "benches/connrate.sh: run as root" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
secs=${1:-5}
threads=${2:-8}
rounds=${3:-3}
bin=${NODEPORTD_BIN:-$root/target/release/nodeportd}
[ -x "$bin" ] || (cd "$root" && cargo build --release --bin nodeportd)
gen="$root/target/connrate"
mkdir -p "$root/target"
gcc -O2 -pthread -o "$gen" "$here/connrate.c"

p="npcr$$"
work=$(mktemp -d /dev/shm/npcr.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for r in cl rt be; do ip netns del "$p-$r" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

for r in cl rt be; do ip netns add "$p-$r"; ip -n "$p-$r" link set lo up; done
ip -n "$p-rt" link add c0 type veth peer name eth0 netns "$p-cl"
ip -n "$p-rt" link add b0 type veth peer name eth0 netns "$p-be"
ip -n "$p-rt" addr add 198.18.1.1/24 dev c0
ip -n "$p-rt" addr add 198.18.2.1/24 dev b0
ip -n "$p-cl" addr add 198.18.1.2/24 dev eth0
for a in 11 12 13; do ip -n "$p-be" addr add "198.18.2.$a/24" dev eth0; done
for r in cl rt be; do for l in $(ip -n "$p-$r" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip -n "$p-$r" link set "$l" up; done; done
ip -n "$p-cl" route add default via 198.18.1.1
ip -n "$p-be" route add default via 198.18.2.1
ip netns exec "$p-rt" sysctl -qw net.ipv4.ip_forward=1

ip netns exec "$p-be" "$gen" serve 0.0.0.0 8080 &
pids+=($!)

cat >"$work/nodeportd.toml" <<EOF
socket = "$work/sock"
state_dir = "$work/state"
service_cluster_ip_ranges = ["198.19.0.0/16"]
nodeport_addresses = ["198.18.1.1/32"]
resync_interval_seconds = 86400
EOF
ip netns exec "$p-rt" "$bin" --config "$work/nodeportd.toml" --log stderr 2>"$work/daemon.log" &
pids+=($!)
for _ in $(seq 200); do [ -S "$work/sock" ] && break; sleep 0.05; done
ctl() { ip netns exec "$p-rt" "$bin" ctl --socket "$work/sock" "$@"; }

# Services FROM..TO-1 as one List: service 0 is the NodePort under test (3 endpoints on
# the backend), the others ClusterIPs with 3 endpoints each (never connected to).
objects() {
    python3 - "$1" "$2" <<'PY'
import json, sys
lo, hi = int(sys.argv[1]), int(sys.argv[2])
items = []
for i in range(lo, hi):
    name = f"rate-{i:05d}"
    spec = {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    if i == 0:
        spec["type"] = "NodePort"
        spec["ports"][0]["nodePort"] = 30080
        eps = ["198.18.2.11", "198.18.2.12", "198.18.2.13"]
    else:
        eps = [f"198.18.{64 + (3 * i + j) // 256}.{(3 * i + j) % 256}" for j in range(3)]
    items.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    items.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"name": f"{name}-1", "namespace": "default", "labels": {"kubernetes.io/service-name": name}},
                  "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                  "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in eps]})
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}
in_sync() {
    for _ in $(seq 1200); do
        ctl status -o json | tr -d ' \n' | grep -q '"inSync":true' && return 0
        sleep 0.1
    done
    echo "the daemon did not get in sync" >&2; exit 1
}

# TIME_WAIT entries would fill the conntrack table at these rates.
ip netns exec "$p-rt" sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_time_wait=1 2>/dev/null || true

measure() { # LABEL SERVICES ADDR PORT
    local out
    out=$(ip netns exec "$p-cl" "$gen" load "$3" "$4" "$secs" "$threads")
    echo "$1 services=$2 $out"
    echo "$1 $2 $out" >>"$work/results"
}

echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r), $secs s x $threads threads" >&2
objects 0 10 >"$work/o10.json"
ctl apply -f "$work/o10.json" >/dev/null
in_sync
ip netns exec "$p-rt" sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_time_wait=1
for _ in $(seq "$rounds"); do
    measure forward 10 198.18.2.11 8080
    measure nat 10 198.18.1.1 30080
done
objects 10 10000 >"$work/o10000.json"
ctl apply -f "$work/o10000.json" >/dev/null
in_sync
for _ in $(seq "$rounds"); do
    measure forward 10000 198.18.2.11 8080
    measure nat 10000 198.18.1.1 30080
done
python3 - "$work/results" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
rate = {}
for kind, n, done, failed, per_s in rows:
    rate.setdefault((kind, int(n)), []).append(float(per_s))
    if int(failed):
        print(f"note: {failed} failed connections in a {kind} run with {n} services")
med = {k: statistics.median(v) for k, v in rate.items()}
print("\n| services | forward, no NAT (conn/s, median) | NodePort DNAT (conn/s, median) | DNAT / forward |")
print("|---:|---:|---:|---:|")
for n in (10, 10000):
    print(f"| {n} | {med[('forward', n)]:.0f} | {med[('nat', n)]:.0f} | {med[('nat', n)] / med[('forward', n)]:.2f} |")
print(f"\nDNAT rate with 10 000 services / with 10: {med[('nat', 10000)] / med[('nat', 10)]:.3f}"
      f" (normalised by the forward rate of the same phase: "
      f"{(med[('nat', 10000)] / med[('forward', 10000)]) / (med[('nat', 10)] / med[('forward', 10)]):.3f})")
PY
