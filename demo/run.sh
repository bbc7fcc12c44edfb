#!/bin/sh
# nodeportd's main job in one command (run as root; it changes nothing outside the
# network namespaces it creates and removes again):
#
#   client 198.18.1.2 ──▶ router 198.18.1.1 (nodeportd) ──▶ backends 198.18.2.11, 198.18.2.12
#
# The router runs the daemon; the example Service and EndpointSlice from configs/ are
# applied with nodeportctl; the client then calls router:nodePort and the answers show
# which backend served each request. The backends have no route back to the client, so
# every answer also shows the router's masquerade at work.
#
# Usage: demo/run.sh [REQUESTS]      (default 10)
# Env:   NODEPORTD=path/to/nodeportd (default: target/release, then target/debug, else build)
set -eu

cd "$(dirname "$0")/.."
requests=${1:-10}

die() { echo "demo: $*" >&2; exit 1; }
if [ -t 1 ]; then bold='\033[1m' plain='\033[0m'; else bold='' plain=''; fi
say() { printf "\n${bold}== %s${plain}\n" "$*"; }

[ "$(id -u)" = 0 ] || die "run me as root (I create network namespaces)"
for tool in ip nft python3 curl; do
	command -v "$tool" >/dev/null 2>&1 || die "needs $tool (Debian: apt-get install iproute2 nftables python3 curl)"
done

bin=${NODEPORTD:-}
if [ -z "$bin" ]; then
	for b in target/release/nodeportd target/debug/nodeportd; do
		if [ -x "$b" ]; then bin=$b; break; fi
	done
fi
if [ -z "$bin" ]; then
	say "building nodeportd (cargo build --release)"
	cargo build --release --quiet
	bin=target/release/nodeportd
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

p="npdemo$$"
work=$(mktemp -d)
pids=""

cleanup() {
	for pid in $pids; do kill "$pid" 2>/dev/null || true; done
	for pid in $pids; do wait "$pid" 2>/dev/null || true; done
	for ns in "$p-client" "$p-router" "$p-b1" "$p-b2"; do ip netns del "$ns" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_ns() { ns=$1; shift; ip netns exec "$p-$ns" "$@"; }
ctl() { in_ns router "$bin" ctl --socket "$work/nodeportd.sock" "$@"; }

say "network namespaces: client, router, two backends"
for ns in client router b1 b2; do ip netns add "$p-$ns"; done
ip -n "$p-router" link add c0 type veth peer name eth0 netns "$p-client"
ip -n "$p-router" link add br0 type bridge
ip -n "$p-router" link add b1 type veth peer name eth0 netns "$p-b1"
ip -n "$p-router" link add b2 type veth peer name eth0 netns "$p-b2"
for ns in client router b1 b2; do in_ns "$ns" ip link set lo up; done
in_ns router sysctl -qw net.ipv4.ip_forward=1
in_ns router ip link set b1 master br0
in_ns router ip link set b2 master br0
for l in c0 b1 b2 br0; do in_ns router ip link set "$l" up; done
in_ns router ip addr add 198.18.1.1/24 dev c0
in_ns router ip addr add 198.18.2.1/24 dev br0
# The service range needs a route for the router to originate or forward to it at all.
in_ns router ip route add 198.19.0.0/16 dev br0
in_ns client sh -c 'ip link set eth0 up && ip addr add 198.18.1.2/24 dev eth0 &&
	ip route add default via 198.18.1.1'
in_ns b1 sh -c 'ip link set eth0 up && ip addr add 198.18.2.11/24 dev eth0'
in_ns b2 sh -c 'ip link set eth0 up && ip addr add 198.18.2.12/24 dev eth0'
echo "client 198.18.1.2 -> router 198.18.1.1 | 198.18.2.1 -> backends 198.18.2.11, 198.18.2.12"
echo "(the backends have no route to 198.18.1.0/24)"

say "backends: an HTTP server on :8080 in each, answering its name and the client it saw"
for b in b1 b2; do
	# Not through in_ns: `ip netns exec` execs the program, so $! is the program itself
	# and the cleanup can stop it by its PID.
	ip netns exec "$p-$b" python3 tests/netns/backend.py "$b" 8080 >"$work/$b.out" &
	pids="$pids $!"
done

say "router: nodeportd"
cat >"$work/nodeportd.toml" <<EOF
node_name = "demo-router"
socket = "$work/nodeportd.sock"
state_dir = "$work/state"
service_cluster_ip_ranges = ["198.19.0.0/16"]
EOF
cat "$work/nodeportd.toml"
ip netns exec "$p-router" "$bin" --config "$work/nodeportd.toml" --log stderr >"$work/nodeportd.out" 2>"$work/nodeportd.log" &
pids="$pids $!"

i=0
until [ -S "$work/nodeportd.sock" ] && grep -q ready "$work/b1.out" && grep -q ready "$work/b2.out"; do
	i=$((i + 1))
	[ "$i" -lt 100 ] || { cat "$work/nodeportd.log" >&2; die "the daemon or a backend did not start"; }
	sleep 0.1
done

say "nodeportctl apply -f configs/web-service.json -f configs/web-endpointslice.json"
ctl apply -f configs/web-service.json
ctl apply -f configs/web-endpointslice.json
ctl get svc

# PORT(S) reads 80:NODEPORT/TCP: the allocator picked the NodePort.
nodeport=$(ctl get svc web | awk 'NR == 2 { for (i = 1; i <= NF; i++) if ($i ~ /^80:[0-9]+\/TCP$/) print $i }' |
	sed 's/^80:\([0-9]*\)\/TCP$/\1/')
[ -n "$nodeport" ] || die "could not read the NodePort from 'nodeportctl get svc web'"

i=0
until in_ns router nft list map inet nodeportd service-nodeports-v4 2>/dev/null | grep -q "tcp . $nodeport "; do
	i=$((i + 1))
	[ "$i" -lt 50 ] || { cat "$work/nodeportd.log" >&2; die "the NodePort $nodeport never reached the kernel"; }
	sleep 0.1
done

say "the rules nodeportd programmed (nft list table inet nodeportd, the service's part)"
in_ns router nft list table inet nodeportd | grep -E "chain (svc4|ext4|ep4)-|numgen|dnat|tcp \. $nodeport " || true

say "$requests requests from the client to http://198.18.1.1:$nodeport/"
: >"$work/answers"
n=0
while [ "$n" -lt "$requests" ]; do
	n=$((n + 1))
	answer=$(in_ns client curl -s -m 3 "http://198.18.1.1:$nodeport/" || echo "no answer")
	echo "request $n: $answer"
	echo "$answer" >>"$work/answers"
done

say "requests per backend"
awk '{ print $1 }' "$work/answers" | sort | uniq -c
b1=$(grep -c '^b1 ' "$work/answers" || true)
b2=$(grep -c '^b2 ' "$work/answers" || true)
if [ $((b1 + b2)) -ne "$requests" ]; then
	die "some requests got no answer"
fi
echo "every answer came back through the router's masquerade (the backends saw 198.18.2.1)"
if [ "$b1" -gt 0 ] && [ "$b2" -gt 0 ]; then
	echo "spread over both backends: the demo worked"
else
	echo "all went to one backend this time (random choice); run again with more requests"
fi
