#!/usr/bin/env bash
# The test command (README.md): every check, in order of cost. Run as root (the
# kernel-facing tests create network namespaces). Exits non-zero on the first failure.
#   tests/run.sh            everything
#   tests/run.sh quick      formatting, lints, unit and integration tests only
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
# Kernel-facing tests that cannot run (not root, no nft, no namespaces) fail instead of
# skipping: CI must not count a skipped suite as a green one.
export NODEPORTD_REQUIRE_ROOT=1 NODEPORTD_REQUIRE_NETNS=1 NODEPORTD_REQUIRE_NFT=1

step() { printf '\n==== %s (%s)\n' "$*" "$(date +%T)"; }
start=$(date +%s)

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --all-targets -- -D warnings

step "cargo test (unit, integration, real-kernel netns tests)"
cargo test -- --test-threads=2

step "cluster mode (--features cluster): clippy, unit tests, the stand-in API server"
cargo clippy --all-targets --features cluster -- -D warnings
cargo test --features cluster --lib cluster::
cargo test --features cluster --test cluster_standin -- --test-threads=4
cargo test --features cluster --lib config::

step "base router build (--no-default-features: no pod routes, no cluster mode): clippy, config refusals"
cargo clippy --lib --bins --no-default-features -- -D warnings
cargo test --no-default-features --lib config::

[ "$mode" = quick ] && { step "quick checks passed in $(( $(date +%s) - start ))s"; exit 0; }

step "the README quick start as a user who is not root"
tests/quickstart/run.sh

if [ -x fuzz/run.sh ]; then
    step "fuzz the request path (bounded)"
    fuzz/run.sh 30
fi

step "LuCI app: eslint, menu/ACL/ubus references, the views in headless chromium"
tests/luci/run.sh

step "end-to-end: the daemon in network namespaces with real traffic"
tests/netns/run.sh

step "static builds for the router targets (+ s390x for the big-endian guest)"
cross/build.sh all s390x

step "qemu-user smoke test of every binary"
tests/smoke/run.sh

step "OpenWrt packages"
openwrt-package/build-ipk.sh
tests/package/run.sh
# The feed Makefile's PKG_HASH against release-tarball.sh's tarball (seconds).
tests/package/release-tarball.sh
# After tests/package/run.sh, which rebuilds dist/ipk from scratch.
openwrt-package/build-luci-app.sh
# nodeportd-cluster (NODEPORTD_VARIANT=cluster), packed in a scratch directory; binaries
# from dist/ (dist/cluster/) or a debug cargo build.
tests/package/cluster_variant.sh

step "emulated routers (full-system QEMU)"
# Functional checks only; the footprint benchmark is run by hand (docs/benchmarks.md).
NP_QEMU_BENCH=0 tests/qemu/run.sh mipsel aarch64 armhf s390x

# Last, so that a binary over the budget still lets every functional check above report.
step "size budget"
cross/size-check.sh

step "all checks passed in $(( $(date +%s) - start ))s"
