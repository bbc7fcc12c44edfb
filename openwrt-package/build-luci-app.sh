#!/usr/bin/env bash
# Pack luci-app-nodeportd (architecture-independent) without the SDK:
#
#   openwrt-package/build-luci-app.sh
#
# Output: dist/ipk/luci-app-nodeportd_VERSION-RELEASE_all.ipk and, when the apk v3
# writer openwrt-package/apkv3.py is there, dist/apk/noarch/luci-app-nodeportd-VERSION-rRELEASE.apk.
# VERSION, RELEASE, title, description, license and depends come from
# openwrt-package/luci-app-nodeportd/Makefile; the tree is what luci.mk installs:
# htdocs/ into /www and root/ into /. The postinst is the Makefile's
# Package/luci-app-nodeportd/postinst, run by default_postinst as the buildroot's
# packages do. Archives are owned by 0:0, sorted and dated SOURCE_DATE_EPOCH (default:
# the last commit), so a rebuild is byte-identical.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
pkg=luci-app-nodeportd
pkgdir="$here/$pkg"
makefile="$pkgdir/Makefile"
dist="${DIST_DIR:-$root/dist}"

die() {
	echo "build-luci-app: $*" >&2
	exit 1
}

# A `VAR:=value` of the Makefile, with its backslash-continued lines joined.
mk_var() {
	awk -v name="$1" '
		!found && index($0, name ":=") == 1 { found = 1; line = substr($0, length(name) + 3) }
		found && !done {
			if (line == "") line = $0
			cont = sub(/\\$/, "", line)
			gsub(/^[ \t]+|[ \t]+$/, "", line)
			out = out (out == "" ? "" : " ") line
			line = ""
			if (!cont) done = 1
		}
		END { print out }
	' "$makefile"
}

mk_define() {
	awk -v name="$1" '
		$0 == "define " name { inside = 1; next }
		inside && $0 == "endef" { exit }
		inside { print }
	' "$makefile"
}

# `+pkg` entries of LUCI_DEPENDS, one a line.
depends_list() {
	local dep
	for dep in $(mk_var LUCI_DEPENDS); do
		case "$dep" in
		+*) echo "${dep#+}" ;;
		*) die "unsupported LUCI_DEPENDS entry '$dep'" ;;
		esac
	done
}

tar_det() {
	tar --format=gnu --numeric-owner --owner=0 --group=0 --sort=name --mtime="@$epoch" "$@"
}

# What luci.mk installs: htdocs/* under /www, root/* under /; directories 0755, files 0644.
stage_tree() {
	local dest=$1
	install -d -m0755 "$dest" "$dest/www"
	cp -R "$pkgdir/htdocs/." "$dest/www/"
	cp -R "$pkgdir/root/." "$dest/"
	find "$dest" -type d -exec chmod 0755 {} +
	find "$dest" -type f -exec chmod 0644 {} +
}

build_ipk() {
	local work data ctrl size file
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	data="$work/data"
	ctrl="$work/control"
	stage_tree "$data"
	install -d -m0755 "$ctrl"

	tar_det -C "$data" -cf "$work/data.tar" .
	size=$(wc -c <"$work/data.tar")
	gzip -9n <"$work/data.tar" >"$work/data.tar.gz"
	{
		echo "Package: $pkg"
		echo "Version: $version-$release"
		echo "Depends: $(depends_list | paste -sd, - | sed 's/,/, /g')"
		echo "Source: feeds/luci/applications/$pkg"
		echo "SourceName: $pkg"
		echo "License: $(mk_var PKG_LICENSE)"
		echo "Section: luci"
		echo "SourceDateEpoch: $epoch"
		echo "Maintainer: $(mk_var PKG_MAINTAINER)"
		echo "Architecture: all"
		echo "Installed-Size: $size"
		echo "Description: $(mk_var LUCI_DESCRIPTION)"
	} >"$ctrl/control"

	# The buildroot's wrappers (package-ipkg.mk): default_postinst and default_prerm
	# from /lib/functions.sh, which run postinst-pkg and prerm-pkg.
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
	mk_define "Package/$pkg/postinst" | sed 's/\$\$/$/g' >"$ctrl/postinst-pkg"
	[ -s "$ctrl/postinst-pkg" ] || die "no Package/$pkg/postinst in $makefile"
	chmod 0644 "$ctrl/control"
	chmod 0755 "$ctrl/postinst" "$ctrl/prerm" "$ctrl/postinst-pkg"

	tar_det -C "$ctrl" -cf - . | gzip -9n >"$work/control.tar.gz"
	printf '2.0\n' >"$work/debian-binary"
	mkdir -p "$dist/ipk"
	file="$dist/ipk/${pkg}_${version}-${release}_all.ipk"
	tar_det -C "$work" -cf - ./debian-binary ./data.tar.gz ./control.tar.gz | gzip -9n >"$file.tmp"
	mv "$file.tmp" "$file"
	echo "$file"
}

# The .apk as package-pack.mk builds it with CONFIG_USE_APK: arch noarch, the file
# list under /lib/apk/packages/, post-install = the default preamble, default_postinst,
# then our postinst; post-upgrade the same with PKG_UPGRADE=1; pre-deinstall = default_prerm.
build_apk() {
	local work data meta file
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	data="$work/data"
	meta="$work/scripts"
	stage_tree "$data"
	install -d -m0755 "$meta" "$data/lib" "$data/lib/apk" "$data/lib/apk/packages"
	(cd "$data" && find . \( -type f -o -type l \) | sed 's|^\.||' | LC_ALL=C sort) >"$work/$pkg.list"
	install -m0644 "$work/$pkg.list" "$data/lib/apk/packages/$pkg.list"
	{
		cat <<EOS
#!/bin/sh
[ "\${IPKG_NO_SCRIPT}" = "1" ] && exit 0
[ -s \${IPKG_INSTROOT}/lib/functions.sh ] || exit 0
. \${IPKG_INSTROOT}/lib/functions.sh
export root="\${IPKG_INSTROOT}"
export pkgname="$pkg"
add_group_and_user
default_postinst
EOS
		mk_define "Package/$pkg/postinst" | sed -e 's/\$\$/$/g' -e '/^[[:space:]]*#!/d'
	} >"$meta/post-install"
	{
		echo '#!/bin/sh'
		echo 'export PKG_UPGRADE=1'
		sed '/^[[:space:]]*#!/d' "$meta/post-install"
	} >"$meta/post-upgrade"
	cat >"$meta/pre-deinstall" <<EOS
#!/bin/sh
[ -s \${IPKG_INSTROOT}/lib/functions.sh ] || exit 0
. \${IPKG_INSTROOT}/lib/functions.sh
export root="\${IPKG_INSTROOT}"
export pkgname="$pkg"
default_prerm
EOS
	mkdir -p "$dist/apk/noarch"
	file="$dist/apk/noarch/$pkg-$version-r$release.apk"
	python3 "$apkv3" build --files "$data" --output "$file" --mtime "$epoch" \
		--info "name:$pkg" \
		--info "version:$version-r$release" \
		--info "description:$(mk_var LUCI_TITLE)" \
		--info "arch:noarch" \
		--info "license:$(mk_var PKG_LICENSE)" \
		--info "origin:feeds/luci/applications/$pkg" \
		--info "maintainer:$(mk_var PKG_MAINTAINER)" \
		--script "post-install:$meta/post-install" \
		--script "post-upgrade:$meta/post-upgrade" \
		--script "pre-deinstall:$meta/pre-deinstall" \
		--info "depends:$(depends_list | paste -sd' ' -)" ||
		die "apkv3.py could not write $file"
	echo "$file"
}

[ -f "$makefile" ] || die "missing $makefile"
version=$(mk_var PKG_VERSION)
release=$(mk_var PKG_RELEASE)
case "$version" in '' | *[!0-9.]*) die "PKG_VERSION '$version' in $makefile" ;; esac
case "$release" in '' | *[!0-9]*) die "PKG_RELEASE '$release' in $makefile" ;; esac

if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
	epoch=$SOURCE_DATE_EPOCH
else
	epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
fi
case "$epoch" in '' | *[!0-9]*) die "SOURCE_DATE_EPOCH '$epoch' is not a number" ;; esac

build_ipk
apkv3="${APKV3:-$here/apkv3.py}"
if [ -f "$apkv3" ]; then
	command -v python3 >/dev/null || die "python3 is needed for the .apk"
	build_apk
else
	echo "build-luci-app: no $apkv3 (the apk v3 writer): no .apk written" >&2
fi
