#!/usr/bin/env bash
# Build OpenWrt .ipk packages from the static release binaries, without the SDK.
#
#   openwrt-package/build-ipk.sh [TARGET...]
#
# TARGET is a Rust target triple with a binary at dist/TARGET/nodeportd (what
# cross/build.sh produces); without arguments every target found in dist/ is
# packed. Output: dist/ipk/nodeportd_VERSION_ARCH.ipk, VERSION from Cargo.toml.
#
# The file list is not repeated here: the install section of the feed Makefile
# (openwrt-package/nodeportd/Makefile) is executed with the meaning the OpenWrt
# buildroot gives its $(INSTALL_*) and $(LN) macros, so the .ipk holds exactly
# what the SDK build would install. Like OpenWrt's ipkg-build, the archives are
# gzip-compressed tars (opkg reads no ar archive), owned by 0:0, sorted, and
# dated SOURCE_DATE_EPOCH (default: the last commit), so rebuilds are identical.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
pkgdir="$here/nodeportd"
makefile="$pkgdir/Makefile"
dist="${DIST_DIR:-$root/dist}"
out="$dist/ipk"

die() {
	echo "build-ipk: $*" >&2
	exit 1
}

# Rust target -> OpenWrt package architectures (one binary can serve several).
archs_for() {
	case "$1" in
	mips-unknown-linux-musl) echo mips_24kc ;;
	mipsel-unknown-linux-musl) echo mipsel_24kc ;;
	armv7-unknown-linux-musleabihf) echo arm_cortex-a7_neon-vfpv4 ;;
	aarch64-unknown-linux-musl) echo aarch64_cortex-a53 aarch64_generic ;;
	x86_64-unknown-linux-musl) echo x86_64 ;;
	# Not a router: the QEMU tests boot an s390x guest to run big-endian 64-bit.
	s390x-unknown-linux-musl | s390x-unknown-linux-gnu) echo s390x ;;
	*) return 1 ;;
	esac
}

# ELF class, byte order and machine each target's binary must have.
elf_for() {
	case "$1" in
	mips-unknown-linux-musl) echo "1 2 8" ;;
	mipsel-unknown-linux-musl) echo "1 1 8" ;;
	armv7-unknown-linux-musleabihf) echo "1 1 40" ;;
	aarch64-unknown-linux-musl) echo "2 1 183" ;;
	x86_64-unknown-linux-musl) echo "2 1 62" ;;
	s390x-unknown-linux-musl | s390x-unknown-linux-gnu) echo "2 2 22" ;;
	esac
}

# Refuse a binary for the wrong CPU: on a router that is a package that installs
# and then fails to start.
check_elf() {
	local file=$1 target=$2 want class data machine
	want=$(elf_for "$target")
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

# Package/nodeportd's `KEY:=value` lines (SECTION, TITLE, DEPENDS, ...).
pkg_field() {
	mk_define Package/nodeportd | sed -n "s/^[[:space:]]*$1:=[[:space:]]*//p"
}

# Depends for the control file: `+pkg` entries; `$(...)` and `@...` are build-time
# conditions of the buildroot and have no place in the control file.
control_depends() {
	local dep deps=""
	for dep in $(pkg_field DEPENDS); do
		case "$dep" in
		+*) deps="${deps:+$deps, }${dep#+}" ;;
		\$\(* | @*) ;;
		*) die "unsupported DEPENDS entry '$dep' in $makefile" ;;
		esac
	done
	echo "$deps"
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

build_one() {
	local target=$1 arch=$2 bin=$3 work data ctrl size file
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	data="$work/data"
	ctrl="$work/control"
	mkdir -p "$data" "$ctrl" "$work/bin"
	chmod 0755 "$data" "$ctrl"
	cp "$bin" "$work/bin/nodeportd"

	run_install "$data" "$work/bin"

	# conffiles lists the regular files among Package/nodeportd/conffiles; the other
	# entries (the state directory) are kept over sysupgrade through keep.d, as the
	# buildroot does.
	: >"$ctrl/conffiles"
	local keep="" entry
	while IFS= read -r entry; do
		entry="${entry#"${entry%%[![:space:]]*}"}"
		[ -z "$entry" ] && continue
		if [ -f "$data$entry" ]; then
			echo "$entry" >>"$ctrl/conffiles"
		else
			keep="$keep$entry"$'\n'
		fi
	done < <(mk_define Package/nodeportd/conffiles)
	if [ -n "$keep" ]; then
		install -d -m0755 "$data/lib" "$data/lib/upgrade" "$data/lib/upgrade/keep.d"
		printf '%s' "$keep" >"$data/lib/upgrade/keep.d/nodeportd"
		chmod 0644 "$data/lib/upgrade/keep.d/nodeportd"
	fi
	[ -s "$ctrl/conffiles" ] || rm -f "$ctrl/conffiles"

	tar_det -C "$data" -cf "$work/data.tar" .
	size=$(wc -c <"$work/data.tar")
	gzip -9n <"$work/data.tar" >"$work/data.tar.gz"

	{
		echo "Package: nodeportd"
		echo "Version: $version"
		depends=$(control_depends)
		[ -n "$depends" ] && echo "Depends: $depends"
		echo "Source: feeds/nodeportd/nodeportd"
		echo "SourceName: nodeportd"
		echo "License: $(mk_var PKG_LICENSE)"
		echo "Section: $(pkg_field SECTION)"
		echo "SourceDateEpoch: $epoch"
		echo "Maintainer: $(mk_var PKG_MAINTAINER)"
		echo "Architecture: $arch"
		echo "Installed-Size: $size"
		printf 'Description: '
		mk_define Package/nodeportd/description | sed -e 's/^[[:space:]]*/ /' -e '1s/^ //'
	} >"$ctrl/control"
	chmod 0644 "$ctrl/control"

	# The maintainer scripts OpenWrt packages carry: everything is in
	# /lib/functions.sh (enable and start the init script, run uci-defaults on
	# install; stop and disable it on removal).
	cat >"$ctrl/postinst" <<'EOS'
#!/bin/sh
[ "${IPKG_NO_SCRIPT}" = "1" ] && exit 0
[ -s "${IPKG_INSTROOT}/lib/functions.sh" ] || exit 0
# shellcheck source=/dev/null
. "${IPKG_INSTROOT}/lib/functions.sh"
default_postinst "$0" "$@"
EOS
	cat >"$ctrl/prerm" <<'EOS'
#!/bin/sh
[ -s "${IPKG_INSTROOT}/lib/functions.sh" ] || exit 0
# shellcheck source=/dev/null
. "${IPKG_INSTROOT}/lib/functions.sh"
default_prerm "$0" "$@"
EOS
	chmod 0755 "$ctrl/postinst" "$ctrl/prerm"

	# Package/nodeportd/postinst and /prerm, if defined, are the package's own
	# steps: the defaults source them as postinst-pkg and prerm-pkg.
	local script
	for script in postinst prerm; do
		if grep -qx "define Package/nodeportd/$script" "$makefile"; then
			mk_define "Package/nodeportd/$script" | sed 's/\$\$/$/g' >"$ctrl/$script-pkg"
			chmod 0755 "$ctrl/$script-pkg"
		fi
	done

	tar_det -C "$ctrl" -cf - . | gzip -9n >"$work/control.tar.gz"
	printf '2.0\n' >"$work/debian-binary"

	file="$out/nodeportd_${version}_${arch}.ipk"
	tar_det -C "$work" -cf - ./debian-binary ./data.tar.gz ./control.tar.gz | gzip -9n >"$file.tmp"
	mv "$file.tmp" "$file"
	echo "$file"
}

[ -f "$makefile" ] || die "missing $makefile"
version=$(cargo_version)
[ -n "$version" ] || die "no version in $root/Cargo.toml"
mk_version=$(mk_var PKG_VERSION)
[ "$mk_version" = "$version" ] ||
	die "PKG_VERSION $mk_version in $makefile differs from version $version in Cargo.toml"

if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
	epoch=$SOURCE_DATE_EPOCH
else
	epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
fi
case "$epoch" in
'' | *[!0-9]*) die "SOURCE_DATE_EPOCH '$epoch' is not a number" ;;
esac

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	for bin in "$dist"/*/nodeportd; do
		[ -f "$bin" ] || continue
		t=$(basename "$(dirname "$bin")")
		archs_for "$t" >/dev/null && targets+=("$t")
	done
	[ ${#targets[@]} -gt 0 ] || die "no binaries in $dist/TARGET/nodeportd (run cross/build.sh first)"
	for t in mips-unknown-linux-musl mipsel-unknown-linux-musl armv7-unknown-linux-musleabihf \
		aarch64-unknown-linux-musl x86_64-unknown-linux-musl; do
		[ -f "$dist/$t/nodeportd" ] || echo "build-ipk: no $dist/$t/nodeportd, skipping $t" >&2
	done
fi

mkdir -p "$out"
for t in "${targets[@]}"; do
	archs=$(archs_for "$t") || die "unknown target '$t' (known: mips, mipsel, armv7 musleabihf, aarch64, x86_64 musl, s390x)"
	bin="$dist/$t/nodeportd"
	[ -f "$bin" ] || die "missing $bin (run cross/build.sh $t first)"
	check_elf "$bin" "$t"
	for arch in $archs; do
		build_one "$t" "$arch" "$bin"
	done
done
