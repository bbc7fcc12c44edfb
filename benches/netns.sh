# shellcheck shell=bash disable=SC2154
# Shared by benches/daemon.sh, benches/start.sh and benches/percost.sh (sourced, not run): a scratch directory
# on tmpfs, network namespaces that are removed on exit, and the daemon stopped on exit.
#   work_prefix=NAME; . benches/netns.sh      # sets $work; the caller sets $prefix and $daemon_pid
# tmpfs: the state store fsyncs every object; flash wear is not what the benches measure.
# BENCH_DIR puts it elsewhere (a disk, to read the state from it: benches/start.sh COLD=1).
work=$(mktemp -d "${BENCH_DIR:-/dev/shm}/${work_prefix:-npbench}.XXXXXX")
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
        echo "scratch kept in $work (state: $work/state)" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The daemon to measure: $NODEPORTD_BIN, or a `cargo build --release` of this tree. Sets $bin.
bench_bin() {
    bin=${NODEPORTD_BIN:-}
    if [ -z "$bin" ]; then
        local tree
        tree=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
        (cd "$tree" && cargo build --release --bin nodeportd)
        bin="$tree/target/release/nodeportd"
    fi
}

# A fresh results file: $RESULTS, or target/bench-daemon/NAME-<time>.jsonl. Sets $results.
bench_results() {
    local dir
    dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/bench-daemon"
    mkdir -p "$dir"
    results=${RESULTS:-$dir/$1-$(date -u +%Y%m%dT%H%M%SZ).jsonl}
    : >"$results"
}

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

# The benches' daemon config: bench_config FILE SOCKET STATE_DIR.
bench_config() {
    cat >"$1" <<EOF
node_name = "bench-node"
socket = "$2"
state_dir = "$3"
service_cluster_ip_ranges = ["198.19.0.0/16"]
nodeport_addresses = ["198.18.0.0/15"]
table = "nodeportd"
resync_interval_seconds = 86400
log_level = "info"
EOF
}

delns() {
    ip netns del "$1"
    local keep=() ns
    for ns in "${namespaces[@]}"; do
        [ "$ns" = "$1" ] || keep+=("$ns")
    done
    namespaces=("${keep[@]}")
}
