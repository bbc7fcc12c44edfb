#!/usr/bin/env bash
# The release tarball the feed Makefile's PKG_SOURCE names, made from a tag:
#
#   openwrt-package/release-tarball.sh [REF]     # default: the tag v<version of Cargo.toml>
#
# Writes dist/nodeportd-VERSION.tar.gz (`git archive`: the same commit gives the same
# bytes) and prints the PKG_HASH line for openwrt-package/nodeportd/Makefile.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n '/^\[package\]/,/^\[/s/^version[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$root/Cargo.toml" | head -n 1)
ref=${1:-v$version}
git -C "$root" rev-parse --verify -q "$ref^{commit}" >/dev/null ||
	{ echo "release-tarball: no commit '$ref' (tag the release first, or name a ref)" >&2; exit 1; }
out="$root/dist/nodeportd-$version.tar.gz"
mkdir -p "$root/dist"
git -C "$root" archive --format=tar.gz --prefix="nodeportd-$version/" -o "$out" "$ref"
echo "$out"
echo "PKG_HASH:=$(sha256sum "$out" | cut -d' ' -f1)"
