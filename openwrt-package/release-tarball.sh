#!/usr/bin/env bash
# The release tarball the feed Makefile's PKG_SOURCE names, made from a tag or commit:
#
#   openwrt-package/release-tarball.sh [--makefile] [-o DIR] [REF | --pinned]
#
# REF defaults to the tag v<version>; --pinned is the Makefile's NODEPORTD_RELEASE_COMMIT
# (the commit its PKG_HASH is for). The version is the one of REF's own Cargo.toml.
# Writes DIR/nodeportd-VERSION.tar.gz (DIR: dist/ of this checkout) and prints its
# path, then the PKG_HASH and NODEPORTD_RELEASE_COMMIT lines for
# openwrt-package/nodeportd/Makefile. --makefile also writes both lines there.
#
# The archive is `git archive` of REF under the prefix nodeportd-VERSION/ (what the
# buildroot's default Build/Prepare unpacks into PKG_BUILD_DIR), compressed with
# `gzip -9n`: the same commit gives the same bytes, whatever git version runs it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
makefile="$root/openwrt-package/nodeportd/Makefile"
outdir="$root/dist"
fix=0
ref=""

die() {
	echo "release-tarball: $*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case "$1" in
	--makefile) fix=1 ;;
	--pinned)
		[ -z "$ref" ] || die "one REF only"
		ref=$(sed -n 's/^NODEPORTD_RELEASE_COMMIT:=[[:space:]]*//p' "$makefile")
		[ -n "$ref" ] || die "no NODEPORTD_RELEASE_COMMIT:= line in $makefile"
		;;
	-o)
		[ $# -ge 2 ] || die "-o needs a directory"
		outdir=$2
		shift
		;;
	-*) die "unknown option '$1' (usage: release-tarball.sh [--makefile] [-o DIR] [REF | --pinned])" ;;
	*)
		[ -z "$ref" ] || die "one REF only"
		ref=$1
		;;
	esac
	shift
done

# The [package] version of a Cargo.toml read on stdin.
cargo_version() {
	awk '
		/^\[/ { in_pkg = ($0 == "[package]") }
		in_pkg && /^version[[:space:]]*=/ { gsub(/^[^"]*"|".*$/, ""); print; exit }
	'
}

if [ -z "$ref" ]; then
	ref="v$(cargo_version <"$root/Cargo.toml")"
fi
commit=$(git -C "$root" rev-parse --verify -q "$ref^{commit}") ||
	die "no commit '$ref' (tag the release first, or name a ref)"
version=$(git -C "$root" show "$commit:Cargo.toml" | cargo_version)
[ -n "$version" ] || die "no [package] version in $ref:Cargo.toml"

mkdir -p "$outdir"
out="$(cd "$outdir" && pwd)/nodeportd-$version.tar.gz"
git -C "$root" archive --format=tar --prefix="nodeportd-$version/" "$commit" | gzip -9n >"$out.tmp"
mv "$out.tmp" "$out"
hash=$(sha256sum "$out" | cut -d' ' -f1)

echo "$out"
echo "PKG_HASH:=$hash"
echo "NODEPORTD_RELEASE_COMMIT:=$commit"

if [ "$fix" = 1 ]; then
	mk_version=$(sed -n 's/^PKG_VERSION:=[[:space:]]*//p' "$makefile")
	[ "$mk_version" = "$version" ] ||
		die "PKG_VERSION $mk_version in $makefile differs from version $version of $ref"
	{ grep -q '^PKG_HASH:=' "$makefile" && grep -q '^NODEPORTD_RELEASE_COMMIT:=' "$makefile"; } ||
		die "$makefile has no PKG_HASH:= or NODEPORTD_RELEASE_COMMIT:= line"
	sed -i -e "s/^PKG_HASH:=.*/PKG_HASH:=$hash/" \
		-e "s/^NODEPORTD_RELEASE_COMMIT:=.*/NODEPORTD_RELEASE_COMMIT:=$commit/" "$makefile"
	echo "release-tarball: wrote both lines into $makefile" >&2
fi
