#!/usr/bin/env bash
# The daemon's memory at rest in the ways a router gets there (issue 11: RSS at rest
# <= 4 KiB per service, peak <= 2x); a benchmark, not a test.
#
#   sudo STATE=DIR benches/rest.sh BIN [N]
#
# STATE: a state directory of N services x 3 endpoints (default N 10000), such as the one
# `KEEP=1 benches/start.sh N 1` keeps. BIN: the daemon. Prints VmRSS and VmHWM (KiB) after:
#   restart  a daemon started on a copy of STATE, killed (-9) once in sync, then started
#            again on its own table (as a router restarts it);
#   reloads  five SIGHUPs to that daemon (a full rebuild each);
#   churn    six rounds of 2 000 EndpointSlice and 500 Service updates to it;
#   load     a fresh daemon with N Services and N EndpointSlices applied through its socket.
# Each figure is read 3 s after the daemon is in sync with nothing left to pack.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "benches/rest.sh: run as root (network namespaces, nftables)" >&2
    exit 1
fi
bin=${1:?usage: STATE=DIR benches/rest.sh BIN [N]}
n=${2:-10000}
state=${STATE:?set STATE to a state directory of N services (KEEP=1 benches/start.sh N 1)}
here=$(cd "$(dirname "$0")" && pwd)
py="$here/daemon.py"
prefix="nprs$$"
work_prefix=nprest # read by benches/netns.sh
# shellcheck source=benches/netns.sh disable=SC2034
. "$here/netns.sh"

sock="$work/nodeportd.sock"
config() { bench_config "$work/nodeportd.toml" "$sock" "$1"; } # STATE_DIR
ctl() { NODEPORTD_SOCKET="$sock" "$bin" ctl "$@"; }
start() { # NETNS
    rm -f "$sock"
    ip netns exec "$1" "$bin" --config "$work/nodeportd.toml" >>"$work/daemon.log" 2>&1 &
    daemon_pid=$!
}
# In sync, nothing waits to be packed (`objects.typed`, where the daemon has it), then 3 s.
settle() {
    until ctl status -o json 2>/dev/null | tr -d ' \n' | grep -q '"inSync":true'; do sleep 0.2; done
    while ctl status -o json | tr -d ' \n' | grep -q '"typed":[1-9]'; do sleep 0.2; done
    sleep 3
}
memory() { # LABEL
    printf '%-40s VmRSS %8s KiB   VmHWM %8s KiB\n' "$1" \
        "$(awk '/^VmRSS/ {print $2}' "/proc/$daemon_pid/status")" \
        "$(awk '/^VmHWM/ {print $2}' "/proc/$daemon_pid/status")"
}
stop() { # SIGNAL
    kill "-$1" "$daemon_pid"
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
}

echo "# $("$bin" --version 2>/dev/null || echo "$bin"), $n services, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
cp -a "$state" "$work/state"
config "$work/state"
mkns "${prefix}-a"
start "${prefix}-a"
settle
memory "started, fresh table"
stop KILL
start "${prefix}-a"
settle
memory "restart on its own table"
for _ in 1 2 3 4 5; do
    gen=$(ctl status -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["dataplane"]["generation"])')
    kill -HUP "$daemon_pid"
    until ctl status -o json | python3 -c 'import json,sys; d=json.load(sys.stdin)["dataplane"]; sys.exit(0 if d["generation"] > '"$gen"' else 1)'; do
        sleep 0.2
    done
    settle
done
memory "after 5 config reloads"
python3 - "$py" "$sock" "$n" <<'EOF'
import importlib.util, random, sys
spec = importlib.util.spec_from_file_location("daemon", sys.argv[1])
d = importlib.util.module_from_spec(spec)
spec.loader.exec_module(d)
n = int(sys.argv[3])
rpc, rng = d.Rpc(sys.argv[2]), random.Random(1)
for rnd in range(6):
    batch = []
    for k, i in enumerate(rng.sample(range(n), min(2000, n))):
        eps = [d.ip4(d.NEW_EP_BASE + (rnd * 7 + k * 3 + j) % 60000) for j in range(3)]
        batch.append(("endpoints.apply", {"object": d.slice_(i, eps)}))
        if len(batch) == 100:
            rpc.send_many(batch)
            batch = []
    if batch:
        rpc.send_many(batch)
    for i in rng.sample(range(n), min(500, n)):
        s = d.service(i)
        s["metadata"]["labels"] = {"round": str(rnd)}
        rpc.call("service.apply", {"object": s})
EOF
settle
memory "after churn (12 000 slices, 3 000 Services)"
stop TERM
delns "${prefix}-a"

mkdir "$work/empty"
config "$work/empty"
mkns "${prefix}-b"
start "${prefix}-b"
until ctl status >/dev/null 2>&1; do sleep 0.1; done
python3 "$py" load --socket "$sock" --n "$n" >&2
settle
memory "applied through the socket"
stop TERM
delns "${prefix}-b"
