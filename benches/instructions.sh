#!/usr/bin/env bash
# Instructions the emulated router's benchmark spends, counted (callgrind), not timed; a
# benchmark, not a test. Under QEMU's TCG a router's time follows the instructions it runs,
# and wall times on this shared host swing with its load, so changes aimed at the mipsel
# figures of issue 11 are compared by these counts (docs/benchmarks.md).
#
#   sudo benches/instructions.sh BIN [BIN...]
#
# For each binary (the same x86_64 static musl build a router runs, e.g.
# `cargo build --release --target x86_64-unknown-linux-musl --no-default-features`, with
# CARGO_PROFILE_RELEASE_STRIP=none CARGO_PROFILE_RELEASE_DEBUG=1 for callgrind_annotate),
# on one state of N services x 3 endpoints (loaded once through the socket by the first):
#   restart  the daemon started on the state until its table is in the kernel: its main
#            thread (reading and decoding the state) and the data plane worker (planning,
#            encoding, committing);
#   apply    `nodeportctl apply -f` of one List of 100 Services + 100 EndpointSlices (the
#            QEMU benchmark's batch, tests/qemu/guest-bench.sh), until in sync: nodeportctl,
#            and the daemon's main thread, worker and store thread.
# One line per binary: instructions in millions. Environment: N (default 1000), KEEP=1.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "benches/instructions.sh: run as root (network namespaces, nftables)" >&2
    exit 1
fi
[ $# -ge 1 ] || { echo "usage: benches/instructions.sh BIN [BIN...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "benches/instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
n=${N:-1000}
prefix="npin$$"
work_prefix=npinstr # read by benches/netns.sh
# shellcheck source=benches/netns.sh disable=SC2034
. "$here/netns.sh"

# The QEMU benchmark's generator, as the guest runs it.
eval "$(sed -n '/^gen()/,/^}/p' "$root/tests/qemu/guest-bench.sh")"
gen 1000 1100 3 >"$work/batch.json"

config() { # STATE_DIR SOCKET
    cat <<EOF
node_name = "bench-node"
socket = "$2"
state_dir = "$1"
service_cluster_ip_ranges = ["198.19.0.0/16"]
nodeport_addresses = ["198.18.0.0/15"]
table = "nodeportd"
resync_interval_seconds = 86400
EOF
}

ctl() { "$work/nodeportctl" --socket "$work/d.sock" "$@"; }
# `status` prints "NOT in sync" before the first sync.
wait_in_sync() {
    for _ in $(seq 1 1200); do
        ctl status 2>/dev/null | grep -q ', in sync,' && return 0
        sleep 0.5
    done
    echo "not in sync" >&2
    return 1
}
summary() { grep -m1 '^summary' "$1" | awk '{ printf "%.1f", $2 / 1e6 }'; }

first=1
run=0
for bin in "$@"; do
    run=$((run + 1))
    ln -sf "$bin" "$work/nodeportctl"
    if [ "$first" = 1 ]; then
        config "$work/state" "$work/d.sock" >"$work/load.toml"
        mkns "${prefix}l"
        ip netns exec "${prefix}l" "$bin" --config "$work/load.toml" --log stderr 2>>"$work/load.log" &
        daemon_pid=$!
        python3 "$here/daemon.py" load --socket "$work/d.sock" --n "$n" >/dev/null
        kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=""
        delns "${prefix}l"
        first=0
    fi
    # One directory per run: binaries of the same name must not read each other's dumps.
    out="$work/cg.$run.$(basename "$bin")"
    rm -rf "$out"
    mkdir -p "$out"
    rm -rf "$work/run"; cp -a "$work/state" "$work/run"
    config "$work/run" "$work/d.sock" >"$work/run.toml"
    mkns "${prefix}r"
    ip netns exec "${prefix}r" valgrind --tool=callgrind --separate-threads=yes \
        --callgrind-out-file="$out/d.%p" "$bin" --config "$work/run.toml" --log stderr 2>>"$work/run.log" &
    daemon_pid=$!
    wait_in_sync
    sleep 1
    callgrind_control -d restart "$daemon_pid" >/dev/null
    valgrind --tool=callgrind --callgrind-out-file="$out/ctl" "$work/nodeportctl" --socket "$work/d.sock" \
        apply -f "$work/batch.json" >/dev/null 2>>"$work/run.log"
    wait_in_sync
    sleep 1
    callgrind_control -d apply "$daemon_pid" >/dev/null
    kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=""
    delns "${prefix}r"
    # Dump 1: the restart; dump 2: the apply. Threads: 01 main, 02 data plane, 03 store.
    p=$(basename "$(find "$out" -name 'd.*.1-01')" .1-01)
    printf '%s: restart main %s worker %s | apply nodeportctl %s main %s worker %s store %s (M instructions)\n' \
        "$bin" "$(summary "$out/$p.1-01")" "$(summary "$out/$p.1-02")" "$(summary "$out/ctl")" \
        "$(summary "$out/$p.2-01")" "$(summary "$out/$p.2-02")" "$(summary "$out/$p.2-03")"
done
