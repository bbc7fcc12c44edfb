#!/usr/bin/env bash
# Daemon-level data plane benchmark (issue 3, "Benchmark"); a benchmark, not a test.
#
#   sudo benches/daemon.sh [N...]        # default: 100 1000 10000 services x 3 endpoints
#
# For each N, against the real kernel, each step in a network namespace of its own:
#   1. load N Services + N EndpointSlices into a running daemon over one socket
#      connection (requests pipelined, 200 per write);
#   2. `nodeportd --dry-run` on that state: the ruleset as `nft` text;
#   3. `nft -f` of that text into a fresh namespace (kube-proxy's method), and once
#      more replacing the table in one transaction;
#   4. the daemon started on that state in a fresh namespace: time until
#      `status.dataplane.inSync` (its first, full sync), its RSS, then CHANGES (25)
#      one-endpoint `endpoints.apply` calls, each timed to the API answer, to the
#      `generation` increment and to `nft list chain` showing the new endpoint.
# Results: one JSON line per step in $RESULTS, then the markdown tables on stdout.
#
# Environment: NODEPORTD_BIN (skip `cargo build --release`), CHANGES, RESULTS, KEEP=1
# (keep the scratch directory). Addresses: 198.18.0.0/15 only (ClusterIPs from
# 198.19.0.0/16, endpoints and the node's address in 198.18.0.0/16).
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "benches/daemon.sh: run as root (network namespaces, nftables)" >&2
    exit 1
fi
for tool in ip nft python3; do
    command -v "$tool" >/dev/null || { echo "benches/daemon.sh: $tool is missing" >&2; exit 1; }
done

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
py="$here/daemon.py"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100 1000 10000)
changes=${CHANGES:-25}
prefix="npdb$$"

bin=${NODEPORTD_BIN:-}
if [ -z "$bin" ]; then
    (cd "$root" && cargo build --release --bin nodeportd)
    bin="$root/target/release/nodeportd"
fi
mkdir -p "$root/target/bench-daemon"
results=${RESULTS:-$root/target/bench-daemon/results-$(date -u +%Y%m%dT%H%M%SZ).jsonl}
: >"$results"

# tmpfs: the state store fsyncs every object; flash wear is not what this measures.
work=$(mktemp -d /dev/shm/npdbench.XXXXXX)
namespaces=()
daemon_pid=""

cleanup() {
    if [ -n "$daemon_pid" ]; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    for ns in "${namespaces[@]}"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    if [ "${KEEP:-0}" = 1 ]; then
        echo "scratch kept in $work" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A namespace with the node's address on a veth link (nodeport_addresses selects it;
# a veth pair inside the namespace, as not every kernel has the dummy driver).
mkns() {
    ip netns add "$1"
    namespaces+=("$1")
    ip -n "$1" link set lo up
    ip -n "$1" link add "${prefix}a" type veth peer name "${prefix}b"
    ip -n "$1" addr add 198.18.0.1/24 dev "${prefix}a"
    ip -n "$1" link set "${prefix}a" up
    ip -n "$1" link set "${prefix}b" up
}

delns() {
    ip netns del "$1"
    local keep=() ns
    for ns in "${namespaces[@]}"; do
        [ "$ns" = "$1" ] || keep+=("$ns")
    done
    namespaces=("${keep[@]}")
}

echo "# nodeportd $("$bin" --version | cut -d' ' -f2), $(nft --version), kernel $(uname -r)," \
    "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

for n in "${sizes[@]}"; do
    dir="$work/n$n"
    mkdir -p "$dir"
    cfg="$dir/nodeportd.toml"
    sock="$dir/nodeportd.sock"
    cat >"$cfg" <<EOF
node_name = "bench-node"
socket = "$sock"
state_dir = "$dir/state"
service_cluster_ip_ranges = ["198.19.0.0/16"]
nodeport_addresses = ["198.18.0.0/15"]
table = "nodeportd"
resync_interval_seconds = 86400
log_level = "info"
EOF

    echo "== $n services: loading through the socket" >&2
    mkns "${prefix}-l$n"
    ip netns exec "${prefix}-l$n" "$bin" --config "$cfg" >>"$dir/load.log" 2>&1 &
    daemon_pid=$!
    python3 "$py" load --socket "$sock" --n "$n" | tee -a "$results" >&2
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || true
    daemon_pid=""
    delns "${prefix}-l$n"

    echo "== $n services: dry-run ruleset" >&2
    mkns "${prefix}-t$n"
    python3 "$py" dryrun --netns "${prefix}-t$n" --bin "$bin" --config "$cfg" --socket "$sock" \
        --out "$dir/ruleset.nft" --log "$dir/dryrun.log" --n "$n" | tee -a "$results" >&2
    delns "${prefix}-t$n"

    echo "== $n services: nft -f" >&2
    mkns "${prefix}-f$n"
    python3 "$py" nftf --netns "${prefix}-f$n" --file "$dir/ruleset.nft" --n "$n" | tee -a "$results" >&2
    delns "${prefix}-f$n"

    echo "== $n services: daemon start and $changes one-endpoint changes" >&2
    mkns "${prefix}-d$n"
    python3 "$py" run --netns "${prefix}-d$n" --bin "$bin" --config "$cfg" --socket "$sock" \
        --ruleset "$dir/ruleset.nft" --log "$dir/run.log" --n "$n" --changes "$changes" >>"$results"
    tail -n 1 "$results" | python3 -c 'import json,sys; r=json.load(sys.stdin); r.pop("rounds"); print(json.dumps(r))' >&2
    delns "${prefix}-d$n"
    rm -rf "$dir/state"
done

echo "results: $results" >&2
python3 "$py" report "$results"
