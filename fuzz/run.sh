#!/bin/sh
# Runs every fuzz target for SECONDS each (default 60), seeded with the kubectl fixtures.
# Usage: fuzz/run.sh [SECONDS] [TARGET...]   (targets: request_path registry_apply)
# Needs the nightly toolchain and cargo-fuzz (installed when missing). Exits non-zero
# when a target finds a crash; the reproducer is left in fuzz/artifacts/TARGET/.
set -eu
seconds="${1:-60}"
[ "$#" -gt 0 ] && shift
targets="${*:-request_path registry_apply}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
for t in $targets; do
    mkdir -p "$here/corpus/$t"
    cp "$here"/seeds/*.json "$here/corpus/$t/"
    echo "== fuzz $t for ${seconds}s"
    cargo +nightly fuzz run "$t" "$here/corpus/$t" -- \
        -max_total_time="$seconds" -max_len=65536 -dict="$here/json.dict"
done
