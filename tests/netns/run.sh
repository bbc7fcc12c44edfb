#!/bin/sh
# End-to-end traffic tests on the real kernel (root needed): client -> router -> two
# backends in network namespaces this script's tests create and remove.
#   1. the rendered ruleset loaded with `nft -f` into the router;
#   2. the daemon in the router, driven by `nodeportctl apply -f`, including self-heal
#      after `nft delete table` and a foreign table left untouched.
# Exits non-zero on any failure. Usage: tests/netns/run.sh [CARGO_TEST_FILTER]
set -eu

cd "$(dirname "$0")/../.."

if [ "$(id -u)" != 0 ]; then
	echo "tests/netns/run.sh: must run as root (it creates network namespaces)" >&2
	exit 1
fi

missing=""
for tool in ip nft python3 unshare; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
	if command -v apt-get >/dev/null 2>&1; then
		apt-get -o DPkg::Lock::Timeout=600 install -y iproute2 nftables python3 util-linux >/dev/null
	else
		echo "tests/netns/run.sh: missing:$missing" >&2
		exit 1
	fi
fi

NODEPORTD_NETNS_PREFIX="npdr$$"
export NODEPORTD_NETNS_PREFIX
NODEPORTD_REQUIRE_NETNS=1
NODEPORTD_REQUIRE_NFT=1
export NODEPORTD_REQUIRE_NETNS NODEPORTD_REQUIRE_NFT

cleanup() {
	# The tests remove their namespaces themselves; this catches a killed run.
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NODEPORTD_NETNS_PREFIX" || true); do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
	done
}
trap cleanup EXIT INT TERM

cargo build --quiet --bins
cargo test --quiet --test netns -- --include-ignored --test-threads=1 --nocapture "$@"
# Cluster mode (issue 16): the same kernel path fed by a stand-in API server.
if [ $# -eq 0 ] || [ "$1" = cluster_mode_carries_traffic ]; then
	cargo test --quiet --features cluster --test netns -- --include-ignored --nocapture cluster_mode_carries_traffic
fi
echo "tests/netns/run.sh: all end-to-end tests passed"
