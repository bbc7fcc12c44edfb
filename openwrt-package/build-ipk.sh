#!/usr/bin/env bash
# Build OpenWrt packages from the static release binaries, without the SDK: an
# .ipk (opkg, OpenWrt 24.10 and older) and an .apk (apk v3, OpenWrt 25.12 and
# later) for each OpenWrt architecture of each target.
#
#   openwrt-package/build-ipk.sh [TARGET...]
#
# TARGET is a short name (mips, mipsel, armv7, aarch64, x86_64, s390x), an alias
# or a Rust triple (cross/targets.sh) with a binary at dist/TRIPLE/nodeportd (what
# cross/build.sh produces); without arguments every target found in dist/ is
# packed. Output, with VERSION from Cargo.toml and RELEASE from the Makefile:
#   dist/ipk/nodeportd_VERSION-RELEASE_ARCH.ipk
#   dist/apk/ARCH/nodeportd-VERSION-rRELEASE.apk   (apk names carry no arch:
#                                                   OpenWrt keeps one directory per arch)
#
# NODEPORTD_VARIANT=cluster packs the cluster-mode build (`NODEPORTD_FEATURES=cluster
# cross/build.sh`, binaries at dist/cluster/TRIPLE/nodeportd) as the package
# nodeportd-cluster, which provides and conflicts with nodeportd (docs/cluster.md):
#   dist/ipk/nodeportd-cluster_VERSION-RELEASE_ARCH.ipk, dist/apk/ARCH/nodeportd-cluster-VERSION-rRELEASE.apk
#
# The file list is not repeated here: the install section of the feed Makefile
# (openwrt-package/nodeportd/Makefile) is executed with the meaning the OpenWrt
# buildroot gives its $(INSTALL_*) and $(LN) macros, so the packages hold exactly
# what the SDK build would install. Like OpenWrt's ipkg-build, the .ipk archives
# are gzip-compressed tars (opkg reads no ar archive), owned by 0:0, sorted, and
# dated SOURCE_DATE_EPOCH (default: the last commit). The .apk is what
# include/package-pack.mk has `apk mkpkg` write (info fields, scripts,
# /lib/apk/packages/nodeportd.{list,conffiles,conffiles_static}), written by
# apkv3.py beside this script. Rebuilds are byte-identical.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
pkgdir="$here/nodeportd"
makefile="$pkgdir/Makefile"
dist="${DIST_DIR:-$root/dist}"
out="$dist/ipk"
apkout="$dist/apk"
# shellcheck source=cross/targets.sh
. "$root/cross/targets.sh"

die() {
	echo "build-ipk: $*" >&2
	exit 1
}

# Refuse a binary for the wrong CPU: on a router that is a package that installs
# and then fails to start.
check_elf() {
	local file=$1 target=$2 want class data machine
	want=$(np_elf "$target")
	[ "$(head -c 4 "$file" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] || die "$file is not an ELF binary"
	class=$(od -An -tu1 -j4 -N1 "$file" | tr -d ' ')
	data=$(od -An -tu1 -j5 -N1 "$file" | tr -d ' ')
	if [ "$data" = 1 ]; then
		machine=$(od -An -tu1 -j18 -N2 "$file" | awk '{ print $1 + 256 * $2 }')
	else
		machine=$(od -An -tu1 -j18 -N2 "$file" | awk '{ print 256 * $1 + $2 }')
	fi
	[ "$class $data $machine" = "$want" ] ||
		die "$file is ELF class/byte order/machine '$class $data $machine', $target needs '$want'"
}

cargo_version() {
	awk '
		/^\[/ { in_pkg = ($0 == "[package]") }
		in_pkg && /^version[[:space:]]*=/ { gsub(/^[^"]*"|".*$/, ""); print; exit }
	' "$root/Cargo.toml"
}

# A `VAR:=value` line of the Makefile.
mk_var() {
	sed -n "s/^$1:=[[:space:]]*//p" "$makefile" | head -n 1
}

# The body of `define NAME` ... `endef`.
mk_define() {
	awk -v name="$1" '
		$0 == "define " name { inside = 1; next }
		inside && $0 == "endef" { exit }
		inside { print }
	' "$makefile"
}

# `KEY:=value` lines of `define Package/NAME` (SECTION, TITLE, DEPENDS, ...).
pkg_field_of() {
	mk_define "Package/$1" | sed -n "s/^[[:space:]]*$2:=[[:space:]]*//p"
}

# The fields both packages share (Package/nodeportd/Default).
pkg_field() {
	pkg_field_of nodeportd/Default "$1"
}

# Depends: the `+pkg` entries of DEPENDS, after the buildroot's PKG_FIXUP_DEPENDS
# (include/package-defaults.mk), which puts `+libc` first for every package but
# kernel modules. `$(...)` and `@...` are build-time conditions of the buildroot
# and have no place in a package. One name a line.
depends_list() {
	local dep
	echo libc
	for dep in $(pkg_field DEPENDS); do
		case "$dep" in
		+libc) ;;
		+*) echo "${dep#+}" ;;
		\$\(* | @*) ;;
		*) die "unsupported DEPENDS entry '$dep' in $makefile" ;;
		esac
	done
}

# The description as the buildroot's $(strip ...) leaves it: one line.
description_line() {
	mk_define Package/nodeportd/description | tr '\n\t' '  ' | sed -e 's/  */ /g' -e 's/^ //' -e 's/ $//'
}

# Package/nodeportd/NAME (postinst, prerm) with make's $$ unescaped, if defined.
pkg_script() {
	grep -qx "define Package/nodeportd/$1" "$makefile" || return 1
	mk_define "Package/nodeportd/$1" | sed 's/\$\$/$/g'
}

# Run the Makefile's install section into $1 with the buildroot's macros:
# INSTALL_DIR = install -d -m0755, INSTALL_BIN = install -m0755,
# INSTALL_DATA = install -m0644, INSTALL_CONF = install -m0600, LN = ln -sf.
run_install() {
	local dest=$1 bindir=$2 line macro args a
	local -a argv
	while IFS= read -r line; do
		line="${line#"${line%%[![:space:]]*}"}"
		[ -z "$line" ] && continue
		macro=${line%% *}
		args=${line#"$macro"}
		args=${args//\$(1)/$dest}
		args=${args//\$(PKG_INSTALL_DIR)\/bin/$bindir}
		args=${args//.\/files\//$pkgdir/files/}
		case "$args" in
		*"\$("*) die "unsupported make variable in install line: $line" ;;
		esac
		read -r -a argv <<<"$args"
		for a in "${argv[@]}"; do
			case "$a" in
			/* | nodeportd) ;;
			*) die "unexpected argument '$a' in install line: $line" ;;
			esac
		done
		case "$macro" in
		"\$(INSTALL_DIR)") install -d -m0755 "${argv[@]}" ;;
		"\$(INSTALL_BIN)") install -m0755 "${argv[@]}" ;;
		"\$(INSTALL_DATA)") install -m0644 "${argv[@]}" ;;
		"\$(INSTALL_CONF)") install -m0600 "${argv[@]}" ;;
		"\$(LN)") ln -sf "${argv[@]}" ;;
		*) die "unsupported install line (only \$(INSTALL_*) and \$(LN)): $line" ;;
		esac
	done < <(mk_define Package/nodeportd/install)
}

tar_det() {
	# Deterministic tar: names sorted, owner 0:0, one timestamp, gnu format as ipkg-build.
	tar --format=gnu --numeric-owner --owner=0 --group=0 --sort=name \
		--mtime="@$epoch" "$@"
}

# The package tree of one binary (what the buildroot's IDIR holds): the install
# section, then keep.d for the conffiles entries that are not files (the state
# directory), which sysupgrade keeps, as package-pack.mk does.
stage_tree() {
	local data=$1 bin=$2 keep="" entry
	mkdir -p "$data" "$data.bin"
	chmod 0755 "$data"
	cp "$bin" "$data.bin/nodeportd"
	run_install "$data" "$data.bin"
	rm -rf "$data.bin"
	while IFS= read -r entry; do
		entry="${entry#"${entry%%[![:space:]]*}"}"
		[ -z "$entry" ] && continue
		[ -f "$data$entry" ] || keep="$keep$entry"$'\n'
	done < <(mk_define Package/nodeportd/conffiles)
	if [ -n "$keep" ]; then
		install -d -m0755 "$data/lib" "$data/lib/upgrade" "$data/lib/upgrade/keep.d"
		printf '%s' "$keep" >"$data/lib/upgrade/keep.d/$pkg"
		chmod 0644 "$data/lib/upgrade/keep.d/$pkg"
	fi
}

build_ipk() {
	local arch=$1 bin=$2 work data ctrl size file script
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	data="$work/data"
	ctrl="$work/control"
	stage_tree "$data" "$bin"
	mkdir -p "$ctrl"
	chmod 0755 "$ctrl"

	# conffiles: the regular files among Package/nodeportd/conffiles (opkg cannot
	# keep a directory; keep.d does that over sysupgrade).
	: >"$ctrl/conffiles"
	local entry
	while IFS= read -r entry; do
		entry="${entry#"${entry%%[![:space:]]*}"}"
		[ -n "$entry" ] && [ -f "$data$entry" ] && echo "$entry" >>"$ctrl/conffiles"
	done < <(mk_define Package/nodeportd/conffiles)
	[ -s "$ctrl/conffiles" ] || rm -f "$ctrl/conffiles"

	tar_det -C "$data" -cf "$work/data.tar" .
	size=$(wc -c <"$work/data.tar")
	gzip -9n <"$work/data.tar" >"$work/data.tar.gz"

	{
		echo "Package: $pkg"
		echo "Version: $ipk_version"
		echo "Depends: $(depends_list | paste -sd, - | sed 's/,/, /g')"
		[ -z "$variant_conflicts" ] || echo "Conflicts: $variant_conflicts"
		[ -z "$variant_provides" ] || echo "Provides: $variant_provides"
		echo "Source: $source"
		echo "SourceName: nodeportd"
		echo "License: $(mk_var PKG_LICENSE)"
		echo "LicenseFiles: $(mk_var PKG_LICENSE_FILES)"
		echo "Section: $(pkg_field SECTION)"
		echo "SourceDateEpoch: $epoch"
		echo "URL: $(pkg_field URL)"
		echo "Maintainer: $(mk_var PKG_MAINTAINER)"
		echo "Architecture: $arch"
		echo "Installed-Size: $size"
		printf 'Description: '
		{
			mk_define Package/nodeportd/description
			[ -z "$variant_description" ] || echo "  $variant_description"
		} | sed -e 's/^[[:space:]]*/ /' -e '1s/^ //'
	} >"$ctrl/control"
	chmod 0644 "$ctrl/control"

	# The maintainer scripts OpenWrt packages carry: everything is in
	# /lib/functions.sh (enable and start the init script on install; stop and
	# disable it on removal), which runs the package's own steps, postinst-pkg
	# and prerm-pkg (Package/nodeportd/postinst and /prerm).
	cat >"$ctrl/postinst" <<'EOS'
#!/bin/sh
[ "${IPKG_NO_SCRIPT}" = "1" ] && exit 0
[ -s ${IPKG_INSTROOT}/lib/functions.sh ] || exit 0
. ${IPKG_INSTROOT}/lib/functions.sh
default_postinst $0 $@
EOS
	cat >"$ctrl/prerm" <<'EOS'
#!/bin/sh
[ -s ${IPKG_INSTROOT}/lib/functions.sh ] || exit 0
. ${IPKG_INSTROOT}/lib/functions.sh
default_prerm $0 $@
EOS
	chmod 0755 "$ctrl/postinst" "$ctrl/prerm"
	for script in postinst prerm; do
		if pkg_script "$script" >"$ctrl/$script-pkg"; then
			chmod 0755 "$ctrl/$script-pkg"
		else
			rm -f "$ctrl/$script-pkg"
		fi
	done

	tar_det -C "$ctrl" -cf - . | gzip -9n >"$work/control.tar.gz"
	printf '2.0\n' >"$work/debian-binary"

	file="$out/${pkg}_${ipk_version}_${arch}.ipk"
	tar_det -C "$work" -cf - ./debian-binary ./data.tar.gz ./control.tar.gz | gzip -9n >"$file.tmp"
	mv "$file.tmp" "$file"
	echo "$file"
}

# The .apk, as package-pack.mk builds it for CONFIG_USE_APK: the package's own
# files under /lib/apk/packages/, the three scripts assembled from OpenWrt's
# defaults and ours, then `apk mkpkg` with the same --info fields.
build_apk() {
	local arch=$1 bin=$2 work data meta apkdb file entry sum
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	data="$work/data"
	meta="$work/scripts"
	stage_tree "$data" "$bin"
	mkdir -p "$meta"
	apkdb="$data/lib/apk/packages"
	install -d -m0755 "$data/lib" "$data/lib/apk" "$apkdb"

	# Every file and link, before the .list itself and the conffiles are added.
	(cd "$data" && find . \( -type f -o -type l \) | sed 's|^\.||' | LC_ALL=C sort) >"$work/$pkg.list"
	install -m0644 "$work/$pkg.list" "$apkdb/$pkg.list"
	# apk has no conffiles: /etc is protected instead. The list is what
	# default_postinst and sysupgrade read; .conffiles_static holds the shipped
	# checksums, against which sysupgrade tells a changed file.
	mk_define Package/nodeportd/conffiles >"$apkdb/$pkg.conffiles"
	: >"$apkdb/$pkg.conffiles_static"
	while IFS= read -r entry; do
		[ -f "$data$entry" ] || continue
		sum=$(sha256sum "$data$entry" | cut -d' ' -f1)
		echo "$entry $sum" >>"$apkdb/$pkg.conffiles_static"
	done <"$apkdb/$pkg.conffiles"
	[ -s "$apkdb/$pkg.conffiles_static" ] || rm -f "$apkdb/$pkg.conffiles_static"
	chmod 0644 "$apkdb"/*

	{
		cat <<'EOS'
#!/bin/sh
[ "${IPKG_NO_SCRIPT}" = "1" ] && exit 0
[ -s ${IPKG_INSTROOT}/lib/functions.sh ] || exit 0
. ${IPKG_INSTROOT}/lib/functions.sh
export root="${IPKG_INSTROOT}"
EOS
		echo "export pkgname=\"$pkg\""
		printf '%s\n' add_group_and_user default_postinst
		pkg_script postinst | sed '/^\s*#!/d' || true
	} >"$meta/post-install"
	{
		echo '#!/bin/sh'
		echo 'export PKG_UPGRADE=1'
		sed '/^\s*#!/d' "$meta/post-install"
	} >"$meta/post-upgrade"
	{
		cat <<'EOS'
#!/bin/sh
[ -s ${IPKG_INSTROOT}/lib/functions.sh ] || exit 0
. ${IPKG_INSTROOT}/lib/functions.sh
export root="${IPKG_INSTROOT}"
EOS
		echo "export pkgname=\"$pkg\""
		echo default_prerm
		pkg_script prerm | sed '/^\s*#!/d' || true
	} >"$meta/pre-deinstall"

	mkdir -p "$apkout/$arch"
	file="$apkout/$arch/$pkg-$apk_version.apk"
	python3 "$here/apkv3.py" build --files "$data" --output "$file" --mtime "$epoch" \
		--info "name:$pkg" \
		--info "version:$apk_version" \
		--info "description:$(description_line)${variant_description:+ $variant_description}" \
		--info "arch:$arch" \
		--info "license:$(mk_var PKG_LICENSE)" \
		--info "origin:$source" \
		--info "url:$(pkg_field URL)" \
		--info "maintainer:$(mk_var PKG_MAINTAINER)" \
		${variant_provides:+--info "provides:$variant_provides=$apk_version"} \
		--script "post-install:$meta/post-install" \
		--script "post-upgrade:$meta/post-upgrade" \
		--script "pre-deinstall:$meta/pre-deinstall" \
		--info "depends:$(depends_list | paste -sd' ' -)" ||
		die "apkv3.py could not write $file"
	echo "$file"
}

# --- the package variant (NODEPORTD_VARIANT) ---------------------------------
# Package/nodeportd-cluster of the Makefile, packed as the buildroot packs a
# variant: its PROVIDES and CONFLICTS (nodeportd) go into the .ipk as
# "Provides:" and "Conflicts:", into the .apk as "provides: nodeportd=VERSION"
# (package-pack.mk passes no conflicts to apk mkpkg: a versioned provide lets
# only one package own the name); its description is the base one (the
# `$(call Package/nodeportd/description)` line) and its own lines. A build
# without cluster mode says so in a message (src/daemon/run.rs): such a binary
# is refused for nodeportd-cluster.
pkg=nodeportd
variant_provides=""
variant_conflicts=""
variant_description=""
case "${NODEPORTD_VARIANT:-}" in
"") ;;
cluster)
	pkg=nodeportd-cluster
	grep -qx "define Package/$pkg" "$makefile" || die "$makefile has no Package/$pkg"
	variant_provides=$(pkg_field_of "$pkg" PROVIDES)
	variant_conflicts=$(pkg_field_of "$pkg" CONFLICTS)
	# shellcheck disable=SC2016 # make's $(call ...), literally
	variant_description=$(mk_define "Package/$pkg/description" |
		grep -vxF '$(call Package/nodeportd/description)' | sed 's/^[[:space:]]*//' | paste -sd' ' -)
	if [ -z "$variant_provides" ] || [ -z "$variant_description" ]; then
		die "Package/$pkg in $makefile has no PROVIDES or no description of its own"
	fi
	dist="$dist/cluster"
	;;
*) die "NODEPORTD_VARIANT '$NODEPORTD_VARIANT' is unknown (known: cluster)" ;;
esac
check_build() {
	[ "$pkg" = nodeportd-cluster ] || return 0
	if grep -qaF "this build has no cluster mode" "$1"; then
		die "$1 has no cluster mode: build it with NODEPORTD_FEATURES=cluster cross/build.sh"
	fi
}

[ -f "$makefile" ] || die "missing $makefile"
command -v python3 >/dev/null || die "python3 is needed for the .apk files"
version=$(cargo_version)
[ -n "$version" ] || die "no version in $root/Cargo.toml"
mk_version=$(mk_var PKG_VERSION)
[ "$mk_version" = "$version" ] ||
	die "PKG_VERSION $mk_version in $makefile differs from version $version in Cargo.toml"
release=$(mk_var PKG_RELEASE)
case "$release" in
'' | *[!0-9]*) die "PKG_RELEASE '$release' in $makefile is not a number" ;;
esac
# The buildroot's VERSION: PKG_VERSION-PKG_RELEASE for opkg, -rPKG_RELEASE for apk.
ipk_version="$version-$release"
apk_version="$version-r$release"
# $(SOURCE): the package's directory under the buildroot's TOPDIR, for a feed
# named nodeportd.
source=feeds/nodeportd/nodeportd

if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
	epoch=$SOURCE_DATE_EPOCH
else
	epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
fi
case "$epoch" in
'' | *[!0-9]*) die "SOURCE_DATE_EPOCH '$epoch' is not a number" ;;
esac

triples=()
if [ $# -eq 0 ]; then
	for bin in "$dist"/*/nodeportd; do
		[ -f "$bin" ] || continue
		t=$(basename "$(dirname "$bin")")
		np_target_row "$t" >/dev/null && triples+=("$t")
	done
	[ ${#triples[@]} -gt 0 ] || die "no binaries in $dist/TARGET/nodeportd (run cross/build.sh first)"
	for t in $(np_default_targets); do
		t=$(np_triple "$t")
		[ -f "$dist/$t/nodeportd" ] || echo "build-ipk: no $dist/$t/nodeportd, skipping $t" >&2
	done
else
	for t in "$@"; do
		tr=$(np_triple "$t") || die "unknown target '$t' (known: $(np_all_targets), their aliases or Rust triples)"
		# s390x: the musl and the gnu (static) binary both serve the test guest.
		[ -f "$dist/$tr/nodeportd" ] || [ ! -f "$dist/$t/nodeportd" ] || tr=$t
		triples+=("$tr")
	done
fi

mkdir -p "$out" "$apkout"
for t in "${triples[@]}"; do
	bin="$dist/$t/nodeportd"
	[ -f "$bin" ] || die "missing $bin (run cross/build.sh $(np_short "$t") first)"
	check_elf "$bin" "$t"
	check_build "$bin"
	for arch in $(np_archs "$t"); do
		build_ipk "$arch" "$bin"
		build_apk "$arch" "$bin"
	done
done
