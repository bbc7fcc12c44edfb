#!/usr/bin/env bash
# The daemon's start on persisted state, alone (issue 11: memory at rest and process
# start -> in sync); a benchmark, not a test. A narrower benches/daemon.sh: no anchor, no
# changes, but the same steps and measurements (benches/daemon.py `load` and `run`).
#
#   sudo benches/start.sh N [RUNS]     # N services x 3 endpoints, RUNS starts (default 3)
#
# Loads N Services + N EndpointSlices through the socket once (state dir on tmpfs), then
# starts the daemon RUNS times on that state, each in a fresh network namespace, and
# prints one JSON line per start: start -> socket, start -> in sync, the worker's first
# full sync, VmRSS at rest (2 s after it settled) and VmHWM (the peak).
#
# Environment: NODEPORTD_BIN (skip `cargo build --release`; may be a wrapper script, e.g.
# one that runs the daemon under heaptrack), STATE (reuse a state directory made by an
# earlier run with KEEP=1 instead of loading), KEEP=1 (keep the scratch directory),
# BENCH_DIR (where the scratch directory and the state live; default /dev/shm), COLD=1
# (drop the page cache before each start, so the state is read from BENCH_DIR's disk),
# AFFINITY / RANGES (the % of services loaded with session affinity / source ranges:
# benches/daemon.py load --affinity / --ranges).
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "benches/start.sh: run as root (network namespaces, nftables)" >&2
    exit 1
fi
here=$(cd "$(dirname "$0")" && pwd)
py="$here/daemon.py"
n=${1:?usage: benches/start.sh N [RUNS]}
runs=${2:-3}
prefix="npst$$"


work_prefix=npstart
# shellcheck source=benches/netns.sh
. "$here/netns.sh"
bench_bin

cfg="$work/nodeportd.toml"
sock="$work/nodeportd.sock"
if [ -n "${STATE:-}" ]; then
    cp -a "$STATE" "$work/state"
fi
bench_config "$cfg" "$sock" "$work/state"

echo "# $("$bin" --version 2>/dev/null || echo "$bin"), kernel $(uname -r), $(nproc) CPUs," \
    "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ -z "${STATE:-}" ]; then
    echo "== loading $n services through the socket" >&2
    mkns "${prefix}-l"
    ip netns exec "${prefix}-l" "$bin" --config "$cfg" >>"$work/load.log" 2>&1 &
    daemon_pid=$!
    python3 "$py" load --socket "$sock" --n "$n" --affinity "${AFFINITY:-0}" --ranges "${RANGES:-0}" >&2
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || true
    daemon_pid=""
    delns "${prefix}-l"
fi

for r in $(seq 1 "$runs"); do
    mkns "${prefix}-d$r"
    if [ "${COLD:-0}" = 1 ]; then
        sync
        echo 3 >/proc/sys/vm/drop_caches
    fi
    python3 "$py" run --netns "${prefix}-d$r" --bin "$bin" --config "$cfg" --socket "$sock" \
        --log "$work/run.log" --n "$n" --changes 0 |
        python3 -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps({k: r[k] for k in (
            "n", "start_to_socket_ms", "start_to_in_sync_ms", "first_sync_ms", "first_messages",
            "rss_idle_kib", "hwm_kib", "status_during_sync_ms")}))'
    delns "${prefix}-d$r"
done
