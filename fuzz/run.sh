#!/bin/sh
# Runs the request-path fuzz target for SECONDS (default 60), seeded with the kubectl
# fixtures. Needs the nightly toolchain and cargo-fuzz (installed when missing).
set -eu
seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
mkdir -p "$here/corpus/request_path"
cp "$here"/seeds/*.json "$here/corpus/request_path/"
exec cargo +nightly fuzz run request_path "$here/corpus/request_path" -- \
    -max_total_time="$seconds" -max_len=65536 -dict="$here/json.dict"
