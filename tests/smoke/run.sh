#!/usr/bin/env bash
# Smoke test of the cross-built binaries under QEMU user-mode emulation.
#
#   tests/smoke/run.sh [TARGET...]   # default: every dist/<triple>/nodeportd present
#
# TARGET is a triple or a short name (mips, mipsel, armv7, aarch64, x86_64, s390x: cross/targets.sh).
# For each binary: --version; --check-config on a good config (exit 0, TOML out, and the
# TOML it prints is itself accepted) and on a bad one (exit 1, names the key); then a
# --dry-run daemon on a temporary socket and state dir, driven by nodeportctl (the same
# binary through a symlink, and as `nodeportd ctl`): apply a NodePort Service made by
# kubectl, read its nodePort back, see it in the dry-run ruleset, stop the daemon with
# SIGTERM, restart it on the same state dir and find the same nodePort.
#
# qemu-user is called explicitly (binfmt_misc is not mounted here); x86_64 runs natively.
# qemu-user cannot open NETLINK_NETFILTER sockets, hence --dry-run: the kernel paths are
# tested by tests/qemu/.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIST="$ROOT/dist"
# Emulated start-up of a MIPS binary on a loaded 2-core machine takes seconds; be generous.
STEP_TIMEOUT=${SMOKE_STEP_TIMEOUT:-60}

PASSED=0
FAILED=0
ok() { PASSED=$((PASSED + 1)); printf 'ok    %s: %s\n' "$CUR" "$*"; }
bad() { FAILED=$((FAILED + 1)); printf 'FAIL  %s: %s\n' "$CUR" "$*"; }
log() { printf '[smoke] %s\n' "$*" >&2; }
die() { printf '[smoke] error: %s\n' "$*" >&2; exit 2; }

# shellcheck source=cross/targets.sh
. "$ROOT/cross/targets.sh"
triple_of() { np_triple "$1"; }
qemu_of() { np_qemu "$1"; }

APT_UPDATED=0
apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    log "apt-get install ${missing[*]}"
    if [ "$APT_UPDATED" -eq 0 ]; then
        # Exit 100 happens while a foreign-architecture index is mid-sync; carry on.
        apt-get -o DPkg::Lock::Timeout=600 update -qq || log "apt-get update failed (exit $?); continuing"
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >&2
}

need_tools() {
    local need_qemu=$1
    if [ "$need_qemu" = 1 ] && ! command -v qemu-mipsel-static >/dev/null; then
        apt_install qemu-user-static || die "cannot install qemu-user-static"
    fi
    command -v jq >/dev/null || apt_install jq || die "cannot install jq"
    command -v kubectl >/dev/null || apt_install kubernetes-client || die "cannot install kubectl (kubernetes-client)"
}

crate_version() {
    sed -n '/^\[package\]/,/^\[/s/^version[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$ROOT/Cargo.toml" | head -n 1
}

# run BIN ARGS... : the binary (or a symlink to it) under the target's qemu, with a timeout.
run() {
    local exe=$1
    shift
    if [ -n "$QEMU" ]; then
        timeout "$STEP_TIMEOUT" "$QEMU" "$exe" "$@"
    else
        timeout "$STEP_TIMEOUT" "$exe" "$@"
    fi
}

DAEMON_PID=""
TMP=""
cleanup() {
    if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID" 2>/dev/null
        sleep 1
        kill -KILL "$DAEMON_PID" 2>/dev/null
    fi
    DAEMON_PID=""
    [ -n "$TMP" ] && rm -rf "$TMP"
    TMP=""
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

start_daemon() {
    local out=$1
    if [ -n "$QEMU" ]; then
        "$QEMU" "$BIN" --dry-run --config "$TMP/good.toml" --socket "$SOCK" --state-dir "$TMP/state" \
            --log stderr >"$out" 2>>"$TMP/daemon.err" &
    else
        "$BIN" --dry-run --config "$TMP/good.toml" --socket "$SOCK" --state-dir "$TMP/state" \
            --log stderr >"$out" 2>>"$TMP/daemon.err" &
    fi
    DAEMON_PID=$!
    for _ in $(seq 1 $((STEP_TIMEOUT * 4))); do
        [ -S "$SOCK" ] && return 0
        kill -0 "$DAEMON_PID" 2>/dev/null || { DAEMON_PID=""; return 1; }
        sleep 0.25
    done
    return 1
}

# stop_daemon: SIGTERM, then the exit status it stopped with (124 if it did not stop).
stop_daemon() {
    kill -TERM "$DAEMON_PID" 2>/dev/null
    for _ in $(seq 1 $((STEP_TIMEOUT * 4))); do
        kill -0 "$DAEMON_PID" 2>/dev/null || break
        sleep 0.25
    done
    if kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -KILL "$DAEMON_PID" 2>/dev/null
        wait "$DAEMON_PID" 2>/dev/null
        DAEMON_PID=""
        return 124
    fi
    wait "$DAEMON_PID"
    local rc=$?
    DAEMON_PID=""
    return "$rc"
}

get_node_port() {
    # nodeportd ctl form, so both multi-call entry points are exercised.
    run "$BIN" ctl --socket "$SOCK" get svc web -o json >"$TMP/get.json" 2>"$TMP/get.err" || return 1
    jq -er '.spec.ports[0].nodePort' "$TMP/get.json"
}

smoke_one() {
    local triple=$1 out rc v np np2 cip
    CUR=$triple
    BIN="$DIST/$triple/nodeportd"
    QEMU=$(qemu_of "$triple")
    if [ ! -f "$BIN" ]; then
        bad "missing $BIN (run cross/build.sh $triple)"
        return
    fi
    TMP=$(mktemp -d "/tmp/nodeportd-smoke.XXXXXX")
    SOCK="$TMP/nodeportd.sock"
    mkdir -p "$TMP/bin" "$TMP/state"
    ln -s "$BIN" "$TMP/bin/nodeportctl"
    log "$triple: ${QEMU:-native} $BIN ($(stat -c %s "$BIN") bytes)"

    # 1. --version names the crate version.
    v=$(crate_version)
    if out=$(run "$BIN" --version 2>&1) && [ -n "$v" ] && printf '%s' "$out" | grep -qF "$v"; then
        ok "--version: $out"
    else
        bad "--version (exit $?, want $v): $out"
    fi

    # 2. --check-config: good config exits 0 and prints the effective TOML.
    cat >"$TMP/good.toml" <<EOF
node_name = "smoke-node"
service_node_port_range = "30000-32767"
service_cluster_ip_ranges = ["10.96.0.0/16"]
nodeport_addresses = ["198.18.0.0/15"]
EOF
    if out=$(run "$BIN" --check-config --config "$TMP/good.toml" 2>"$TMP/check.err"); then
        if printf '%s\n' "$out" | grep -q '^node_name = "smoke-node"' &&
            printf '%s\n' "$out" | grep -q '^service_node_port_range = "30000-32767"'; then
            ok "--check-config good config: exit 0, effective TOML printed"
        else
            bad "--check-config good config: exit 0 but output is not the effective TOML: $out"
        fi
        printf '%s\n' "$out" >"$TMP/effective.toml"
        if run "$BIN" --check-config --config "$TMP/effective.toml" >/dev/null 2>&1; then
            ok "--check-config accepts its own output"
        else
            bad "--check-config rejects its own output: $(cat "$TMP/effective.toml")"
        fi
    else
        rc=$?
        bad "--check-config good config: exit $rc: $(cat "$TMP/check.err")"
    fi

    # 3. A bad config exits 1 and names the key (CONTRACT: an empty list is invalid).
    printf 'nodeport_addresses = []\n' >"$TMP/bad.toml"
    run "$BIN" --check-config --config "$TMP/bad.toml" >"$TMP/bad.out" 2>&1
    rc=$?
    if [ "$rc" -eq 1 ] && grep -q 'nodeport_addresses' "$TMP/bad.out"; then
        ok "--check-config bad config: exit 1, names nodeport_addresses"
    else
        bad "--check-config bad config: exit $rc (want 1 naming nodeport_addresses): $(cat "$TMP/bad.out")"
    fi

    # 4. A --dry-run daemon answering nodeportctl over its Unix socket.
    kubectl create service nodeport web --tcp=80:8080 --dry-run=client -o json >"$TMP/svc.json" ||
        die "kubectl create service failed"
    if ! start_daemon "$TMP/daemon.out"; then
        bad "--dry-run daemon did not create $SOCK: $(tail -n 20 "$TMP/daemon.err")"
        cleanup
        return
    fi
    ok "--dry-run daemon listening on its socket"

    if out=$(run "$TMP/bin/nodeportctl" --socket "$SOCK" apply -f "$TMP/svc.json" 2>&1); then
        if [ "$out" = "service/default/web created" ]; then
            ok "nodeportctl apply: $out"
        else
            bad "nodeportctl apply printed '$out', want 'service/default/web created'"
        fi
    else
        bad "nodeportctl apply: exit $?: $out"
    fi

    if np=$(get_node_port) && [ "$np" -ge 30000 ] && [ "$np" -le 32767 ]; then
        ok "nodeportctl get svc web: nodePort $np"
    else
        bad "nodeportctl get svc web: nodePort '${np:-}' not in 30000-32767: $(cat "$TMP/get.json" "$TMP/get.err" 2>/dev/null)"
        np=""
    fi
    cip=$(jq -r '.spec.clusterIP // empty' "$TMP/get.json" 2>/dev/null)
    case "$cip" in
        10.96.*) ok "clusterIP $cip from 10.96.0.0/16" ;;
        *) bad "clusterIP '$cip' not from 10.96.0.0/16" ;;
    esac

    # The dry-run ruleset goes to stdout on every sync; it must carry the nodePort.
    if [ -n "$np" ]; then
        local found=0
        for _ in $(seq 1 $((STEP_TIMEOUT * 2))); do
            if grep -q 'nodeportd' "$TMP/daemon.out" && grep -qw "$np" "$TMP/daemon.out"; then
                found=1
                break
            fi
            sleep 0.5
        done
        if [ "$found" -eq 1 ]; then
            ok "dry-run ruleset on stdout mentions nodePort $np"
        else
            bad "dry-run stdout has no ruleset with nodePort $np: $(tail -n 20 "$TMP/daemon.out")"
        fi
    fi

    stop_daemon
    rc=$?
    if [ "$rc" -eq 0 ]; then
        ok "SIGTERM: daemon exited 0"
    else
        bad "SIGTERM: daemon exit status $rc: $(tail -n 10 "$TMP/daemon.err")"
    fi

    # 5. The allocation survives a restart on the same state dir (byte order of the
    # persisted state matters on the big-endian targets).
    rm -f "$SOCK"
    if start_daemon "$TMP/daemon2.out"; then
        if np2=$(get_node_port) && [ -n "$np" ] && [ "$np2" = "$np" ]; then
            ok "after restart: nodePort $np2 kept"
        else
            bad "after restart: nodePort '${np2:-}' (was '$np'): $(cat "$TMP/get.err" 2>/dev/null)"
        fi
        stop_daemon || true
    else
        bad "daemon did not restart on the same state dir: $(tail -n 20 "$TMP/daemon.err")"
    fi
    cleanup
}

main() {
    local triples=() t tr need_qemu=0
    if [ "$#" -eq 0 ]; then
        for t in "$DIST"/*/nodeportd; do
            [ -f "$t" ] || continue
            tr=$(basename "$(dirname "$t")")
            triple_of "$tr" >/dev/null || continue
            triples+=("$tr")
        done
        [ "${#triples[@]}" -gt 0 ] || die "no binaries in $DIST; run cross/build.sh first"
    else
        for t in "$@"; do
            tr=$(triple_of "$t") || die "unknown target '$t'"
            triples+=("$tr")
        done
    fi
    for tr in "${triples[@]}"; do
        [ -n "$(qemu_of "$tr")" ] && need_qemu=1
    done
    need_tools "$need_qemu"
    for tr in "${triples[@]}"; do
        smoke_one "$tr"
    done
    printf 'smoke: %d passed, %d failed\n' "$PASSED" "$FAILED"
    [ "$FAILED" -eq 0 ]
}

main "$@"
