#!/usr/bin/env bash
# What the per-service objects cost (issue 11: "keep that object for the services that need
# it only, and measure what it costs"); a benchmark, not a test. benches/daemon.sh's load
# and run steps with a share of the services given session affinity or source ranges.
#
#   sudo benches/percost.sh [N:KIND:PCT...]     # KIND: affinity or ranges; PCT: 0-100
#
# N services x 3 endpoints, PCT % of them with `sessionAffinity: ClientIP` (chains, sets
# and a numgen vmap per service) or LoadBalancers with `loadBalancerSourceRanges` and an
# ingress IP (a firewall chain per service); benches/daemon.py `in_share` says which.
# Every configuration is loaded through the socket into a state directory of its own
# first; then ROUNDS rounds, each starting the daemon once on every configuration in the
# order given (interleaved), on a copy of that state, in a fresh network namespace: process start -> in sync, the
# worker's full sync, then CHANGES one-endpoint changes alternately of a plain service and
# of one with the behaviour, each timed from the API answer to the kernel's commit.
# Results: one JSON line per start in $RESULTS, then the markdown tables on stdout.
#
# Environment: NODEPORTD_BIN (skip `cargo build --release`), ROUNDS (1), CHANGES (40),
# RESULTS, KEEP=1 (keep the scratch directory).
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "benches/percost.sh: run as root (network namespaces, nftables)" >&2
    exit 1
fi
here=$(cd "$(dirname "$0")" && pwd)
py="$here/daemon.py"
configs=("$@")
if [ ${#configs[@]} -eq 0 ]; then
    configs=(10000:affinity:0 10000:affinity:1 10000:affinity:10 10000:affinity:100
        10000:ranges:1 10000:ranges:10 10000:ranges:100
        100:affinity:0 100:affinity:10 100:affinity:100 100:ranges:10 100:ranges:100)
fi
rounds=${ROUNDS:-1}
changes=${CHANGES:-40}
prefix="nppc$$"

work_prefix=nppercost
# shellcheck source=benches/netns.sh
. "$here/netns.sh"
bench_bin
bench_results percost

echo "# nodeportd $("$bin" --version | cut -d' ' -f2), kernel $(uname -r), $(nproc) CPUs," \
    "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# "N:KIND:PCT" -> the arguments of daemon.py load/run.
shares() {
    local kind=${1#*:}
    kind=${kind%%:*}
    case "$kind" in
        affinity | ranges) echo "--n ${1%%:*} --$kind ${1##*:}" ;;
        *) echo "benches/percost.sh: $1: KIND is affinity or ranges" >&2; return 1 ;;
    esac
}

for c in "${configs[@]}"; do
    args=$(shares "$c")
    dir="$work/${c//:/-}"
    mkdir -p "$dir"
    bench_config "$dir/nodeportd.toml" "$dir/nodeportd.sock" "$dir/state"
    echo "== $c: loading through the socket" >&2
    mkns "${prefix}-l"
    ip netns exec "${prefix}-l" "$bin" --config "$dir/nodeportd.toml" >>"$dir/load.log" 2>&1 &
    daemon_pid=$!
    # shellcheck disable=SC2086 # $args: several words
    python3 "$py" load --socket "$dir/nodeportd.sock" $args >&2
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || true
    daemon_pid=""
    delns "${prefix}-l"
done

for r in $(seq 1 "$rounds"); do
    for c in "${configs[@]}"; do
        args=$(shares "$c")
        dir="$work/${c//:/-}"
        echo "== round $r, $c: start and $changes one-endpoint changes (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        # Every start from a copy of the loaded state: the changes are stored too.
        rm -rf "$dir/run-state"
        cp -a "$dir/state" "$dir/run-state"
        bench_config "$dir/run.toml" "$dir/nodeportd.sock" "$dir/run-state"
        mkns "${prefix}-d"
        # shellcheck disable=SC2086
        python3 "$py" run --netns "${prefix}-d" --bin "$bin" --config "$dir/run.toml" \
            --socket "$dir/nodeportd.sock" --log "$dir/run.log" --changes "$changes" $args >>"$results"
        tail -n 1 "$results" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps(
            {k: r[k] for k in ("start_to_in_sync_ms", "first_sync_ms", "first_messages", "by_kind")}))' >&2
        delns "${prefix}-d"
    done
done

echo "results: $results" >&2
python3 "$py" costreport "$results"
