#!/usr/bin/env bash
# The README quick start, run as written by a user who is not root (issue 12): the lines
# of its ```sh block are taken from README.md and run by `nobody` (or $QUICKSTART_USER)
# in a private mount namespace whose /tmp is a fresh tmpfs (the quick start uses
# /tmp/nodeportd), so nothing on the machine is touched and nothing there interferes.
# Needs root to switch user and to make the namespace; then it checks the quick start's
# promise: no root needed. The one line run beforehand as root is `cargo build --release`
# (the user has no Rust toolchain; building is not what the promise is about): it runs
# in this checkout, and the user then runs everything else in a copy of it.
#   tests/quickstart/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
user=${QUICKSTART_USER:-nobody}

if [ "$(id -u)" != 0 ]; then
    echo "tests/quickstart/run.sh: needs root (to run the quick start as $user)" >&2
    exit 1
fi
command -v kubectl >/dev/null || { echo "kubectl is needed (apt-get install kubernetes-client)" >&2; exit 1; }

# The quick start block: from the heading to the end of its first code block.
block=$(awk '/^## Quick start/{q=1} q&&/^```sh/{b=1; next} b&&/^```/{exit} b{print}' README.md)
[ -n "$block" ] || { echo "no quick start block in README.md" >&2; exit 1; }
grep -q '^cargo build --release$' <<<"$block" || { echo "the quick start no longer starts with cargo build --release; update this test" >&2; exit 1; }
as_user=$(grep -v '^cargo build --release$' <<<"$block")

cargo build --release

# The user's script: the quick start, then a check of what it printed, then stop.
script=$(cat <<SCRIPT
set -eu
cd /tmp/quickstart
$as_user
out=\$(./target/release/nodeportctl get svc)
echo "\$out" | grep -q '^web ' || { echo "web is not listed: \$out" >&2; exit 1; }
./target/release/nodeportctl status | grep -qi 'nodeport' || { echo "status printed nothing useful" >&2; exit 1; }
kill \$!
wait \$! || true
SCRIPT
)

unshare -m --propagation private bash -euo pipefail -c '
    mount -t tmpfs quickstart /tmp
    mkdir -p /tmp/quickstart/target/release
    cp -r "$1/configs" /tmp/quickstart/
    cp "$1/target/release/nodeportd" /tmp/quickstart/target/release/
    chown -R "$2" /tmp/quickstart
    chmod 1777 /tmp
    cd /tmp/quickstart
    runuser -u "$2" -- env -u NODEPORTD_SOCKET HOME=/tmp/quickstart bash -c "$3"
' quickstart "$repo" "$user" "$script"
echo "quick start passed as $user"
