#!/bin/sh
# Runs every fuzz target for SECONDS each (default 60), seeded with the kubectl fixtures.
# Usage: fuzz/run.sh [SECONDS] [TARGET...]   (targets: request_path registry_apply health_http cli_args)
# Needs the nightly toolchain and cargo-fuzz (installed when missing). Exits non-zero
# when a target finds a crash; the reproducer is left in fuzz/artifacts/TARGET/.
set -eu
seconds="${1:-60}"
[ "$#" -gt 0 ] && shift
targets="${*:-request_path registry_apply health_http cli_args}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
for t in $targets; do
    mkdir -p "$here/corpus/$t"
    # Targets with their own seeds (seeds/TARGET/) take raw bytes; the others JSON.
    if [ -d "$here/seeds/$t" ]; then
        cp "$here/seeds/$t"/* "$here/corpus/$t/"
        set -- -max_len=16384
    else
        cp "$here"/seeds/*.json "$here/corpus/$t/"
        set -- -max_len=65536 -dict="$here/json.dict"
    fi
    echo "== fuzz $t for ${seconds}s"
    cargo +nightly fuzz run "$t" "$here/corpus/$t" -- -max_total_time="$seconds" "$@"
done
