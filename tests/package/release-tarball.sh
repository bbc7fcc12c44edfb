#!/usr/bin/env bash
# The feed Makefile's source section (openwrt-package/nodeportd/Makefile) against the
# tarball openwrt-package/release-tarball.sh makes: PKG_HASH is the SHA-256 of the
# tarball of NODEPORTD_RELEASE_COMMIT, the script gives the same bytes twice, and the
# tarball holds what the buildroot's Build/Prepare and rust-package.mk need
# (nodeportd-PKG_VERSION/ with Cargo.toml of that version, Cargo.lock, LICENSE, src/).
# Needs git history back to that commit; a shallow clone without it fails.
#
#   tests/package/release-tarball.sh
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
makefile="$root/openwrt-package/nodeportd/Makefile"
script="$root/openwrt-package/release-tarball.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# shellcheck source=tests/package/tap.sh
. "$here/tap.sh"
mk_var() {
	sed -n "s/^$1:=[[:space:]]*//p" "$makefile" | head -n 1
}

version=$(mk_var PKG_VERSION)
commit=$(mk_var NODEPORTD_RELEASE_COMMIT)
hash=$(mk_var PKG_HASH)
source=$(mk_var PKG_SOURCE)
license_files=$(mk_var PKG_LICENSE_FILES)

if [[ "$hash" =~ ^[0-9a-f]{64}$ ]]; then
	ok "PKG_HASH is a SHA-256 ($hash)"
else
	not_ok "PKG_HASH is a SHA-256" "PKG_HASH:=$hash"
fi
# shellcheck disable=SC2016 # make's $(...), not the shell's
if [ "$source" = '$(PKG_NAME)-$(PKG_VERSION).tar.gz' ]; then
	ok "PKG_SOURCE is the name release-tarball.sh gives"
else
	not_ok "PKG_SOURCE is the name release-tarball.sh gives" "PKG_SOURCE:=$source"
fi
if [ "$(mk_var PKG_SOURCE_URL)" != "" ] && grep -q '^PKG_SOURCE_URL:=' "$makefile"; then
	ok "PKG_SOURCE_URL is set"
else
	not_ok "PKG_SOURCE_URL is set"
fi

if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
	not_ok "NODEPORTD_RELEASE_COMMIT $commit is in this clone" \
		"(a shallow clone? fetch the history: git fetch --unshallow)"
	echo "release-tarball: $passed passed, $failed failed"
	exit 1
fi
ok "NODEPORTD_RELEASE_COMMIT $commit is in this clone"

if out=$("$script" -o "$work/a" --pinned 2>&1) && "$script" -o "$work/b" "$commit" >/dev/null 2>&1; then
	ok "release-tarball.sh makes the tarball of the pinned commit"
else
	not_ok "release-tarball.sh makes the tarball of the pinned commit" "$out"
fi
tarball="$work/a/nodeportd-$version.tar.gz"
got=$(sha256sum "$tarball" 2>/dev/null | cut -d' ' -f1)
if [ -n "$got" ] && [ "$got" = "$hash" ]; then
	ok "its SHA-256 is the Makefile's PKG_HASH"
else
	not_ok "its SHA-256 is the Makefile's PKG_HASH" "tarball: ${got:-none}" "PKG_HASH:  $hash" \
		"after moving NODEPORTD_RELEASE_COMMIT, run openwrt-package/release-tarball.sh --makefile REF"
fi
if printf '%s\n' "$out" | grep -qx "PKG_HASH:=$got"; then
	ok "release-tarball.sh prints the PKG_HASH line of what it wrote"
else
	not_ok "release-tarball.sh prints the PKG_HASH line of what it wrote" "$out"
fi
if cmp -s "$tarball" "$work/b/nodeportd-$version.tar.gz"; then
	ok "a second run gives the same bytes"
else
	not_ok "a second run gives the same bytes"
fi

mkdir -p "$work/x"
if tar -xzf "$tarball" -C "$work/x" 2>/dev/null; then
	ok "the tarball unpacks"
else
	not_ok "the tarball unpacks"
fi
top=$(ls "$work/x")
if [ "$top" = "nodeportd-$version" ]; then
	ok "one top directory, PKG_NAME-PKG_VERSION (the buildroot's PKG_BUILD_DIR)"
else
	not_ok "one top directory, PKG_NAME-PKG_VERSION (the buildroot's PKG_BUILD_DIR)" "found: $top"
fi
t="$work/x/nodeportd-$version"
missing=""
for f in Cargo.toml Cargo.lock src/main.rs src/lib.rs "$license_files"; do
	[ -f "$t/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then
	ok "it holds Cargo.toml, Cargo.lock, src/ and PKG_LICENSE_FILES ($license_files)"
else
	not_ok "it holds Cargo.toml, Cargo.lock, src/ and PKG_LICENSE_FILES" "missing:$missing"
fi
crate_version=$(awk '/^\[/ { p = ($0 == "[package]") } p && /^version/ { gsub(/^[^"]*"|".*$/, ""); print; exit }' "$t/Cargo.toml" 2>/dev/null)
if [ "$crate_version" = "$version" ]; then
	ok "its Cargo.toml has version $version (PKG_VERSION)"
else
	not_ok "its Cargo.toml has version $version (PKG_VERSION)" "found: $crate_version"
fi
# rust-package.mk builds with --locked: the lock file must fit the manifest (resolved
# offline for this host's platform, whose crates cargo test has fetched already).
host=$(rustc -vV | sed -n 's/^host: //p')
if out=$(cargo metadata --locked --offline --filter-platform "$host" --format-version 1 \
	--manifest-path "$t/Cargo.toml" 2>&1 >/dev/null); then
	ok "cargo metadata --locked accepts its Cargo.lock (rust-package.mk builds --locked)"
else
	not_ok "cargo metadata --locked accepts its Cargo.lock (rust-package.mk builds --locked)" "$out"
fi

# A damaged tarball is told apart (what download.pl relies on).
cp "$tarball" "$work/damaged.tar.gz"
printf '\0' | dd of="$work/damaged.tar.gz" bs=1 seek=100 conv=notrunc 2>/dev/null
if [ "$(sha256sum "$work/damaged.tar.gz" | cut -d' ' -f1)" != "$hash" ]; then
	ok "a damaged tarball does not match PKG_HASH"
else
	not_ok "a damaged tarball does not match PKG_HASH"
fi

echo "release-tarball: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
