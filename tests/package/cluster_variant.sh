#!/usr/bin/env bash
# The nodeportd-cluster package (issue 16; docs/cluster.md): openwrt-package/build-ipk.sh
# with NODEPORTD_VARIANT=cluster packs the cluster-mode build (dist/cluster/TRIPLE/) as
# nodeportd-cluster, which provides and conflicts with nodeportd; the files are the
# base package's but for the names OpenWrt derives from the package name.
#
#   tests/package/cluster_variant.sh
#
# Binaries: dist/cluster/x86_64-unknown-linux-musl/nodeportd (NODEPORTD_FEATURES=cluster
# cross/build.sh x86_64) if present, else a debug `cargo build --features cluster` (the
# packaging does not care how it was built; CI has it from the cluster step); the base
# binary likewise from dist/x86_64-unknown-linux-musl/ or `cargo build`. NODEPORTD_DIST
# names another dist directory.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pkg="$root/openwrt-package"
makefile="$pkg/nodeportd/Makefile"
t=x86_64-unknown-linux-musl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# shellcheck source=tests/package/tap.sh
. "$here/tap.sh"
command -v jq >/dev/null || { echo "tests/package/cluster_variant.sh: jq is missing" >&2; exit 1; }

binary() { # FEATURES DEST
	local from="${NODEPORTD_DIST:-$root/dist}${1:+/$1}/$t/nodeportd"
	mkdir -p "$(dirname "$2")"
	if [ ! -f "$from" ]; then
		echo "# no $from: cargo build ${1:+--features $1}" >&2
		(cd "$root" && cargo build --quiet --bin nodeportd ${1:+--features "$1"}) || exit 1
		from="${CARGO_TARGET_DIR:-$root/target}/debug/nodeportd"
	fi
	cp "$from" "$2"
}
d="$work/dist"
binary "" "$d/$t/nodeportd"
binary cluster "$d/cluster/$t/nodeportd"

version=$(awk '/^\[/ { p = ($0 == "[package]") } p && /^version *=/ { gsub(/^[^"]*"|".*$/, ""); print; exit }' "$root/Cargo.toml")
release=$(sed -n 's/^PKG_RELEASE:=//p' "$makefile")
ipk_version="$version-$release"
apk_version="$version-r$release"

export SOURCE_DATE_EPOCH=1700000000
build() { DIST_DIR="$d" "$pkg/build-ipk.sh" "$@"; }
if ! out=$(build x86_64 2>&1 && NODEPORTD_VARIANT=cluster build x86_64 2>&1); then
	not_ok "build-ipk.sh builds nodeportd and nodeportd-cluster" "$out"
	echo "$passed passed, $failed failed"
	exit 1
fi
ok "build-ipk.sh builds nodeportd and nodeportd-cluster"
ipk="$d/ipk/nodeportd-cluster_${ipk_version}_x86_64.ipk"
apk="$d/apk/x86_64/nodeportd-cluster-$apk_version.apk"
base_ipk="$d/ipk/nodeportd_${ipk_version}_x86_64.ipk"
check "the packages are named as the buildroot names a package nodeportd-cluster" test -f "$ipk" -a -f "$apk"
sha256sum "$ipk" "$apk" >"$work/first.sha256"
NODEPORTD_VARIANT=cluster build x86_64 >/dev/null 2>&1
check "a rebuild gives byte-identical nodeportd-cluster packages" sha256sum -c --quiet "$work/first.sha256"

# --- the .ipk ---
x="$work/x"
b="$work/base"
mkdir -p "$x/control" "$x/data" "$b/data"
tar xzf "$ipk" -C "$x" && tar xzf "$x/control.tar.gz" -C "$x/control" && tar xzf "$x/data.tar.gz" -C "$x/data"
tar xzf "$base_ipk" -C "$b" && tar xzf "$b/data.tar.gz" -C "$b/data"
mkdir -p "$b/control" && tar xzf "$b/control.tar.gz" -C "$b/control"
c="$x/control/control"
field() { sed -n "s/^$1: //p" "$2"; }
check "ipk: Package nodeportd-cluster, Version $ipk_version, Architecture x86_64" bash -c "
	[ \"\$(sed -n 's/^Package: //p' '$c')\" = nodeportd-cluster ] &&
	[ \"\$(sed -n 's/^Version: //p' '$c')\" = '$ipk_version' ] &&
	[ \"\$(sed -n 's/^Architecture: //p' '$c')\" = x86_64 ]"
check "ipk: Provides nodeportd and Conflicts nodeportd" \
	test "$(field Provides "$c")|$(field Conflicts "$c")" = "nodeportd|nodeportd"
check "ipk: the base package has neither" bash -c "! grep -qE '^(Provides|Conflicts):' '$b/control/control'"
check "ipk: the other fields are the base package's (Depends, Source, SourceName nodeportd, License, ...)" diff \
	<(grep -vE '^(Package|Provides|Conflicts|Installed-Size|Description):|^ ' "$b/control/control") \
	<(grep -vE '^(Package|Provides|Conflicts|Installed-Size|Description):|^ ' "$c")
check "ipk: the description is the base one plus a line naming cluster mode" bash -c "
	diff <(sed -n '/^Description:/,\$p' '$b/control/control') <(sed -n '/^Description:/,\$p' '$c' | sed '\$d') &&
	tail -n 1 '$c' | grep -q '^ This variant also follows a Kubernetes API server'"
check "ipk: Installed-Size is the unpacked data size" \
	test "$(field Installed-Size "$c")" = "$(gzip -dc "$x/data.tar.gz" | wc -c)"
check "ipk: /usr/sbin/nodeportd is the cluster build, byte for byte" cmp "$x/data/usr/sbin/nodeportd" "$d/cluster/$t/nodeportd"
check "ipk: ... and not the base build" bash -c "! cmp -s '$x/data/usr/sbin/nodeportd' '$b/data/usr/sbin/nodeportd'"
check "ipk: the same tree as nodeportd, keep.d named after the package" diff \
	<(cd "$b/data" && find . | sed 's|keep.d/nodeportd$|keep.d/nodeportd-cluster|' | LC_ALL=C sort) \
	<(cd "$x/data" && find . | LC_ALL=C sort)
check "ipk: config, init script, ACL and fw4 includes identical to nodeportd's" \
	diff -r -x nodeportd -x nodeportctl -x keep.d "$b/data" "$x/data"
check "ipk: nodeportctl links to nodeportd" test "$(readlink "$x/data/usr/sbin/nodeportctl")" = nodeportd
check "ipk: maintainer scripts identical to nodeportd's (opkg passes the package name)" bash -c "
	for s in postinst prerm postinst-pkg prerm-pkg conffiles; do cmp '$b/control/'\$s '$x/control/'\$s || exit 1; done"

# --- the .apk ---
j="$work/apk.json"
if python3 "$pkg/apkv3.py" show "$apk" >"$j" 2>"$work/show.err"; then
	ok "apk: apkv3.py reads and verifies it"
	# shellcheck disable=SC2016 # jq variables
	check "apk: name nodeportd-cluster, provides nodeportd=$apk_version, the base package's depends" \
		jq -e --arg v "$apk_version" '.info.name == "nodeportd-cluster" and .info.version == $v
			and .info.provides == ["nodeportd=\($v)"] and .info.depends == ["kmod-nft-core", "kmod-nft-nat", "libc"]
			and (.info.description | endswith("(cluster mode: list and watch over HTTPS).")) and .info.origin == "feeds/nodeportd/nodeportd"' "$j"
	check "apk: the scripts name the package nodeportd-cluster (default_postinst reads its .list)" bash -c "
		for s in post-install post-upgrade pre-deinstall; do
			jq -r --arg s \$s '.scripts[\$s]' '$j' | grep -qx 'export pkgname=\"nodeportd-cluster\"' || exit 1
		done"
	r="$work/apkroot"
	if python3 "$pkg/apkv3.py" extract "$apk" "$r" 2>"$work/extract.err"; then
		check "apk: /lib/apk/packages/nodeportd-cluster.{list,conffiles,conffiles_static}" bash -c "
			cd '$r/lib/apk/packages' && [ \"\$(ls | tr '\n' ' ')\" = 'nodeportd-cluster.conffiles nodeportd-cluster.conffiles_static nodeportd-cluster.list ' ]"
		check "apk: the list names every file and link" diff \
			<(cd "$r" && find . \( -type f -o -type l \) ! -path './lib/apk/packages/*' | sed 's|^\.||' | LC_ALL=C sort) \
			"$r/lib/apk/packages/nodeportd-cluster.list"
		check "apk: unpacked, the same files as the .ipk" diff -r -x apk "$x/data" "$r"
	else
		not_ok "apk: apkv3.py extract" "$(cat "$work/extract.err")"
	fi
else
	not_ok "apk: apkv3.py reads and verifies it" "$(cat "$work/show.err")"
fi

# --- the binary in it has cluster mode ---
# A [cluster] table whose CA file is missing: the cluster build names the file, the base
# build says it has no cluster mode. Both stop before touching the kernel.
cat >"$work/c.toml" <<EOF
socket = "$work/sock"
state_dir = "$work/state"
ubus = "off"
[cluster]
server = "https://127.0.0.1:1"
ca_file = "$work/no-such-ca.crt"
token_file = "$work/no-such-token"
EOF
out=$(timeout 20 "$x/data/usr/sbin/nodeportd" --dry-run --config "$work/c.toml" --log stderr 2>&1)
check "the packaged nodeportd-cluster binary reads [cluster] (names the missing CA file)" \
	grep -q "cluster.ca_file: $work/no-such-ca.crt" <<<"$out"
out=$(timeout 20 "$b/data/usr/sbin/nodeportd" --dry-run --config "$work/c.toml" --log stderr 2>&1)
check "the base package's binary says it has no cluster mode" grep -q "this build has no cluster mode" <<<"$out"

# --- the feed Makefile, as the buildroot reads it ---
# Stand-ins for the buildroot's rules.mk, package.mk and the packages feed's
# rust-package.mk (docs/openwrt.md checks the same with a real buildroot): each
# BuildPackage prints the package's fields as package.mk evaluates them, and the
# compile step prints the `cargo install` arguments rust-package.mk would get.
top="$work/top"
mkdir -p "$top/include" "$top/feeds/packages/lang/rust"
# shellcheck disable=SC2016 # make's $(...), literally
echo 'INCLUDE_DIR:=$(TOPDIR)/include' >"$top/rules.mk"
cat >"$top/include/package.mk" <<'MK'
define BuildPackage
  VARIANT:=
  PROVIDES:=
  CONFLICTS:=
  TITLE:=
  $$(eval $$(Package/$(1)))
  $$(info package $(1) variant=$$(VARIANT) provides=$$(PROVIDES) conflicts=$$(CONFLICTS) title=$$(strip $$(TITLE)))
  $$(info description $(1): $$(strip $$(Package/$(1)/description)))
  $$(info install $(1): $$(if $$(filter $$(Package/nodeportd/install),$$(Package/$(1)/install)),same,other))
endef
compile: ; $(Build/Compile)
MK
cat >"$top/feeds/packages/lang/rust/rust-package.mk" <<'MK'
define Build/Compile/Cargo
	@echo "cargo install$(if $(strip $(RUST_PKG_FEATURES)), --features $(strip $(RUST_PKG_FEATURES)))$(if $(2), $(strip $(2)))"
endef
Build/Compile=$(call Build/Compile/Cargo)
RustBinPackage=
MK
mk_out() { make -s --no-print-directory -C "$pkg/nodeportd" TOPDIR="$top" BUILD_VARIANT="$1" compile 2>&1; }
base_out=$(mk_out base)
cluster_out=$(mk_out cluster)
check "Makefile: nodeportd is the default variant, without PROVIDES or CONFLICTS" \
	grep -qx 'package nodeportd variant=base provides= conflicts= title=Kubernetes NodePort and ClusterIP Services on the router' <<<"$base_out"
check "Makefile: nodeportd-cluster is the variant cluster, provides and conflicts with nodeportd" \
	grep -qx 'package nodeportd-cluster variant=cluster provides=nodeportd conflicts=nodeportd title=.* (cluster mode)' <<<"$base_out"
check "Makefile: both install the same files" bash -c "
	grep -qx 'install nodeportd: same' <<<'$base_out' && grep -qx 'install nodeportd-cluster: same' <<<'$base_out'"
check "Makefile: the base builds without default features (no pod routes, no cluster mode)" \
	grep -qx 'cargo install --no-default-features' <<<"$base_out"
check "Makefile: the cluster variant builds with --features cluster" \
	grep -qx 'cargo install --features cluster' <<<"$cluster_out"
check "ipk and apk: the variant's description is the Makefile's" bash -c "
	want=\$(sed -n 's/^description nodeportd-cluster: //p' <<<'$base_out' | tr -s ' ')
	got=\$(sed -n '/^Description:/,\$p' '$c' | sed 's/^Description: //; s/^ //' | paste -sd' ' - | tr -s ' ')
	[ \"\$want\" = \"\$got\" ] && jq -e --arg d \"\$want\" '.info.description == \$d' '$j' >/dev/null"

# --- refusals ---
mkdir -p "$work/wrong/cluster/$t"
cp "$d/$t/nodeportd" "$work/wrong/cluster/$t/nodeportd"
if out=$(DIST_DIR="$work/wrong" NODEPORTD_VARIANT=cluster "$pkg/build-ipk.sh" x86_64 2>&1); then
	not_ok "a build without cluster mode is refused for nodeportd-cluster" "$out"
else
	check "a build without cluster mode is refused for nodeportd-cluster, saying how to build it" \
		grep -q "has no cluster mode: build it with NODEPORTD_FEATURES=cluster" <<<"$out"
fi
check "nothing was written for the refused binary" test ! -e "$work/wrong/ipk/nodeportd-cluster_${ipk_version}_x86_64.ipk"
if out=$(DIST_DIR="$d" NODEPORTD_VARIANT=tiny "$pkg/build-ipk.sh" x86_64 2>&1); then
	not_ok "an unknown variant is refused" "$out"
else
	check "an unknown variant is refused, naming the known one" grep -q "NODEPORTD_VARIANT 'tiny' is unknown (known: cluster)" <<<"$out"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
