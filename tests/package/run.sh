#!/usr/bin/env bash
# Tests of the OpenWrt package (openwrt-package/): the .ipk archives, the .apk
# (apk v3) packages checked by our own reader (openwrt-package/apkv3.py), the
# shell files, the fw4 include, the init script's procd calls, and the daemon run
# from the extracted x86_64 .ipk with its packaged UCI config, driven through the
# packaged nodeportctl (the native ubus object is tested against a ubusd stand-in in
# tests/ubus_standin.rs). Run as root (CI does): it uses a network namespace of its own.
#
#   tests/package/run.sh
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pkg="$root/openwrt-package"
files="$pkg/nodeportd/files"
makefile="$pkg/nodeportd/Makefile"
dist="$root/dist"
host_target=x86_64-unknown-linux-musl
ns="npdpkg$$"
work=$(mktemp -d)
daemon_pid=""
httpd_pid=""

cleanup() {
	if [ -n "$daemon_pid" ]; then
		kill "$daemon_pid" 2>/dev/null
		wait "$daemon_pid" 2>/dev/null
	fi
	[ -n "$httpd_pid" ] && kill "$httpd_pid" 2>/dev/null
	for n in "$ns" "${ns}r" "${ns}c" "${ns}b"; do
		ip netns del "$n" 2>/dev/null
	done
	rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=tests/package/tap.sh
. "$here/tap.sh"

need() {
	local missing=() tool
	for tool in "$@"; do
		command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	apt-get -o DPkg::Lock::Timeout=600 update -qq || true
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
}

need shellcheck:shellcheck nft:nftables jq:jq busybox:busybox ip:iproute2 curl:curl python3:python3
# shellcheck source=cross/targets.sh
. "$root/cross/targets.sh"
apkv3() { python3 "$pkg/apkv3.py" "$@"; }

cargo_version=$(awk '
	/^\[/ { in_pkg = ($0 == "[package]") }
	in_pkg && /^version[[:space:]]*=/ { gsub(/^[^"]*"|".*$/, ""); print; exit }
' "$root/Cargo.toml")
release=$(sed -n 's/^PKG_RELEASE:=//p' "$makefile")
ipk_version="$cargo_version-$release"
apk_version="$cargo_version-r$release"
check "versions: ipk $ipk_version, apk $apk_version (PKG_RELEASE 1)" test "$release" = 1

# --- the binaries --------------------------------------------------------------
if [ ! -f "$dist/$host_target/nodeportd" ]; then
	echo "# no $dist/$host_target/nodeportd: building it"
	if [ -x "$root/cross/build.sh" ]; then
		"$root/cross/build.sh" "$host_target" || exit 1
	else
		rustup target add "$host_target" >/dev/null 2>&1
		(cd "$root" && cargo build --release --locked --target "$host_target") || exit 1
		install -D -m0755 "$root/target/$host_target/release/nodeportd" "$dist/$host_target/nodeportd"
	fi
fi

# --- building ------------------------------------------------------------------
export SOURCE_DATE_EPOCH=1700000000
rm -rf "$dist/ipk" "$dist/apk"
if ! "$pkg/build-ipk.sh" >"$work/build.log" 2>&1; then
	not_ok "build-ipk.sh builds the packages" "$(cat "$work/build.log")"
	echo "$passed passed, $failed failed"
	exit 1
fi
ok "build-ipk.sh builds the packages"
mapfile -t ipks < <(find "$dist/ipk" -name '*.ipk' | sort)
mapfile -t apks < <(find "$dist/apk" -name '*.apk' | sort)
sha256sum "${ipks[@]}" "${apks[@]}" >"$work/first.sha256"
"$pkg/build-ipk.sh" >/dev/null 2>&1
check "a rebuild gives byte-identical packages (.ipk and .apk)" sha256sum -c --quiet "$work/first.sha256"

# Every target with a binary in dist/ has its packages, per cross/targets.sh.
archs_in_dist() {
	local t
	for t in "$dist"/*/nodeportd; do
		np_archs "$(basename "$(dirname "$t")")" 2>/dev/null | tr ' ' '\n'
	done | sort -u
}
check "one .ipk per architecture of the binaries in dist/" diff \
	<(archs_in_dist | sed "s|.*|$dist/ipk/nodeportd_${ipk_version}_&.ipk|") <(printf '%s\n' "${ipks[@]}")
check "one .apk per architecture, named as the buildroot names it (ARCH/nodeportd-VERSION.apk)" diff \
	<(archs_in_dist | sed "s|.*|$dist/apk/&/nodeportd-${apk_version}.apk|") <(printf '%s\n' "${apks[@]}")
echo "# packages: ${ipks[*]##*/} ${apks[*]#"$dist"/apk/}"

# Short target names work, and give the same packages as the triple.
mkdir -p "$work/shortdist/x86_64-unknown-linux-musl"
cp "$dist/$host_target/nodeportd" "$work/shortdist/x86_64-unknown-linux-musl/nodeportd"
if out=$(DIST_DIR="$work/shortdist" "$pkg/build-ipk.sh" x86_64 2>&1); then
	check "build-ipk.sh x86_64 (short name) gives the same packages" bash -c "
		cmp '$work/shortdist/ipk/nodeportd_${ipk_version}_x86_64.ipk' '$dist/ipk/nodeportd_${ipk_version}_x86_64.ipk' &&
		cmp '$work/shortdist/apk/x86_64/nodeportd-${apk_version}.apk' '$dist/apk/x86_64/nodeportd-${apk_version}.apk'"
else
	not_ok "build-ipk.sh x86_64 (short name) gives the same packages" "$out"
fi
if out=$(DIST_DIR="$work/shortdist" "$pkg/build-ipk.sh" vax 2>&1); then
	not_ok "an unknown target is refused" "$out"
else
	check "an unknown target is refused, naming the known ones" grep -q "unknown target 'vax' (known: mips mipsel armv7" <<<"$out"
fi

# A wrong-CPU binary is refused.
mkdir -p "$work/wrongdist/mipsel-unknown-linux-musl"
cp "$dist/$host_target/nodeportd" "$work/wrongdist/mipsel-unknown-linux-musl/nodeportd"
if out=$(DIST_DIR="$work/wrongdist" "$pkg/build-ipk.sh" mipsel-unknown-linux-musl 2>&1); then
	not_ok "an x86_64 binary is refused for mipsel" "$out"
else
	check "an x86_64 binary is refused for mipsel" grep -q "needs '1 1 8'" <<<"$out"
fi

# --- what the feed Makefile installs, read independently of build-ipk.sh ----------
# One "TYPE MODE PATH" line per file or link; directories as "d 755 PATH".
makefile_tree() {
	awk '
		$0 == "define Package/nodeportd/install" { inside = 1; next }
		inside && $0 == "endef" { exit }
		inside && NF {
			m = $1; dst = $NF; sub(/^\$\(1\)/, "", dst)
			if (m == "$(INSTALL_DIR)") { print "d 755 " dst; next }
			if (dst ~ /\/$/) { n = split($2, p, "/"); dst = dst p[n] }
			if (m == "$(INSTALL_BIN)") print "f 755 " dst
			else if (m == "$(INSTALL_DATA)") print "f 644 " dst
			else if (m == "$(INSTALL_CONF)") print "f 600 " dst
			else if (m == "$(LN)") print "l 777 " dst
			else print "? ? " $0
		}
	' "$makefile"
	# conffiles entries that are not files are kept over sysupgrade through keep.d.
	awk '
		$0 == "define Package/nodeportd/conffiles" { inside = 1; next }
		inside && $0 == "endef" { exit }
		inside && /\/$/ { print "f 644 /lib/upgrade/keep.d/nodeportd" }
	' "$makefile" | sort -u
}

# "TYPE MODE PATH" for each entry of a data.tar.gz, parents included.
tar_tree() {
	tar tvzf "$1" | awk '{
		t = substr($1, 1, 1); t = (t == "-") ? "f" : t
		mode = ""
		for (i = 2; i <= 10; i += 3) {
			v = 0
			if (substr($1, i, 1) == "r") v += 4
			if (substr($1, i + 1, 1) == "w") v += 2
			if (substr($1, i + 2, 1) ~ /[xs]/) v += 1
			mode = mode v
		}
		path = $6; sub(/^\./, "", path); sub(/\/$/, "", path)
		if (path != "") print t " " mode " " path
	}'
}

makefile_tree | sort >"$work/expected.tree"
# The directories above the installed paths are in the archive too.
awk '{ p = $3; while (sub(/\/[^\/]*$/, "", p) && p != "") print "d 755 " p }' "$work/expected.tree" |
	sort -u >"$work/parents.tree"
sort -u "$work/expected.tree" "$work/parents.tree" >"$work/expected.full"
check "the Makefile install section parsed into a tree" test "$(grep -c '^?' "$work/expected.tree")" -eq 0

for ipk in "${ipks[@]}"; do
	name=${ipk##*/}
	arch=${name#nodeportd_"${ipk_version}"_}
	arch=${arch%.ipk}
	x="$work/x-$arch"
	mkdir -p "$x/control" "$x/data"

	check "$name: outer archive is gzip, not ar" test "$(head -c 2 "$ipk" | od -An -tx1 | tr -d ' \n')" = 1f8b
	check "$name: outer tar holds debian-binary, data, control" \
		diff <(tar tzf "$ipk") <(printf '%s\n' ./debian-binary ./data.tar.gz ./control.tar.gz)
	tar xzf "$ipk" -C "$x"
	check "$name: debian-binary is 2.0" test "$(cat "$x/debian-binary")" = 2.0
	check "$name: archives owned by 0:0 and dated SOURCE_DATE_EPOCH" env TZ=UTC bash -c "
		for t in '$ipk' '$x/control.tar.gz' '$x/data.tar.gz'; do
			tar --numeric-owner -tvzf \"\$t\" | awk '\$2 != \"0/0\" { print; bad = 1 } END { exit bad }' || exit 1
			tar --full-time -tvzf \"\$t\" | grep -v ' 2023-11-14 22:13:20 ' && exit 1
		done; exit 0"
	tar xzf "$x/control.tar.gz" -C "$x/control"
	tar xzf "$x/data.tar.gz" -C "$x/data"
	c="$x/control/control"
	field() { sed -n "s/^$1: //p" "$c"; }
	check "$name: Package" test "$(field Package)" = nodeportd
	check "$name: Version from Cargo.toml and PKG_RELEASE" test "$(field Version)" = "$ipk_version"
	check "$name: Architecture $arch" test "$(field Architecture)" = "$arch"
	check "$name: Depends on libc (the buildroot adds it) and the nftables NAT kernel support" \
		test "$(field Depends)" = "libc, kmod-nft-core, kmod-nft-nat"
	check "$name: License, LicenseFiles, Section, Source, SourceName, URL, Maintainer" bash -c \
		"grep -qx 'License: Apache-2.0' '$c' && grep -qx 'LicenseFiles: LICENSE' '$c' && grep -qx 'Section: net' '$c' &&
		 grep -q '^Source: ' '$c' && grep -qx 'SourceName: nodeportd' '$c' && grep -q '^URL: http' '$c' &&
		 grep -q '^Maintainer: ' '$c'"
	check "$name: Installed-Size is the unpacked data size" \
		test "$(field Installed-Size)" = "$(gzip -dc "$x/data.tar.gz" | wc -c)"
	check "$name: Description" grep -q '^Description: nodeportd makes the router' "$c"
	check "$name: conffiles is the UCI config" test "$(cat "$x/control/conffiles")" = /etc/config/nodeportd
	check "$name: postinst and prerm call OpenWrt's defaults" bash -c \
		"test -x '$x/control/postinst' && test -x '$x/control/prerm' &&
		 grep -q '^default_postinst ' '$x/control/postinst' && grep -q '^default_prerm ' '$x/control/prerm'"
	check "$name: postinst-pkg reloads rpcd and fw4 only outside an image build (IPKG_INSTROOT)" bash -c \
		"grep -q 'if \[ -z \"\${IPKG_INSTROOT}\" \]; then' '$x/control/postinst-pkg' &&
		 grep -q 'rpcd reload' '$x/control/postinst-pkg' && grep -q 'fw4 -q reload' '$x/control/postinst-pkg'"
	check "$name: prerm-pkg removes the rules on removal, not on upgrade" bash -c \
		"grep -q 'PKG_UPGRADE}\" = \"1\" ] && exit 0' '$x/control/prerm-pkg' &&
		 grep -q '^/usr/sbin/nodeportd --cleanup' '$x/control/prerm-pkg'"
	check "$name: the data tree is what the Makefile installs" \
		diff "$work/expected.full" <(tar_tree "$x/data.tar.gz" | sort)
	check "$name: nodeportctl links to nodeportd" test "$(readlink "$x/data/usr/sbin/nodeportctl")" = nodeportd
	check "$name: init script is executable; no rpcd plugin (the daemon owns its ubus object)" \
		test -x "$x/data/etc/init.d/nodeportd" -a ! -e "$x/data/usr/libexec/rpcd/nodeportd"
	check "$name: the state directory survives sysupgrade" \
		test "$(cat "$x/data/lib/upgrade/keep.d/nodeportd")" = /etc/nodeportd/
done

# --- the .apk packages, through our own reader (openwrt-package/apkv3.py) --------------------
# "TYPE MODE PATH" for each directory, file and link the package holds.
apk_tree() {
	jq -r '.paths[] | .name as $d |
		(if $d != "" then "d \(.acl.mode[1:]) /\($d)" else empty end),
		(.files[] | "\(if .type == "symlink" then "l" else "f" end) \(.acl.mode[1:]) /\(if $d == "" then "" else $d + "/" end)\(.name)")' "$1"
}
# Package/nodeportd/NAME of the Makefile as the buildroot writes it: $$ unescaped, no #! line.
mk_script() {
	awk -v name="define Package/nodeportd/$1" '$0 == name { on = 1; next } on && $0 == "endef" { exit } on' "$makefile" |
		sed -e 's/\$\$/$/g' -e '/^[[:space:]]*#!/d'
}
printf '%s\n' "d 755 /lib/apk" "d 755 /lib/apk/packages" "f 644 /lib/apk/packages/nodeportd.list" \
	"f 644 /lib/apk/packages/nodeportd.conffiles" "f 644 /lib/apk/packages/nodeportd.conffiles_static" |
	sort -u - "$work/expected.full" >"$work/expected-apk.full"

for apk in "${apks[@]}"; do
	arch=$(basename "$(dirname "$apk")")
	name="apk/$arch/${apk##*/}"
	a="$work/apk-$arch"
	mkdir -p "$a"
	if ! apkv3 show "$apk" >"$a/show.json" 2>"$a/show.err"; then
		not_ok "$name: apkv3.py reads and verifies it" "$(cat "$a/show.err")"
		continue
	fi
	ok "$name: apkv3.py reads and verifies it (block structure, the metadata's hash, every file's sha256)"
	j="$a/show.json"
	check "$name: deflate-compressed ADB, as apk mkpkg writes it (ADBd)" test "$(head -c 4 "$apk")" = ADBd
	# shellcheck disable=SC2016 # $v and $a are jq variables
	check "$name: info fields as package-pack.mk passes them to apk mkpkg" jq -e --arg v "$apk_version" --arg a "$arch" '
		.info.name == "nodeportd" and .info.version == $v and .info.arch == $a
		and .info.license == "Apache-2.0" and .info.origin == "feeds/nodeportd/nodeportd"
		and (.info.url | startswith("http")) and (.info.maintainer | length > 0)
		and (.info.description | startswith("nodeportd makes the router") and (contains("\n") | not) and (contains("  ") | not))
		and .info.depends == ["kmod-nft-core", "kmod-nft-nat", "libc"]
		and .info["hashes-verified"] == true and .signatures == 0 and .triggers == []' "$j"
	check "$name: installed-size is the sum of the file sizes" test "$(jq '.info["installed-size"]' "$j")" = \
		"$(jq '[.paths[].files[] | select(.type == "file") | .size] | add' "$j")"
	check "$name: scripts post-install, post-upgrade and pre-deinstall" \
		jq -e '.scripts | keys == ["post-install", "post-upgrade", "pre-deinstall"]' "$j"
	for sname in post-install post-upgrade pre-deinstall; do
		jq -j --arg s "$sname" '.scripts[$s]' "$j" >"$a/$sname"
	done
	# shellcheck disable=SC2016 # the scripts' literal text
	check "$name: post-install = OpenWrt's preamble, root and pkgname, default_postinst, our postinst" \
		diff <(
			printf '%s\n' '#!/bin/sh' '[ "${IPKG_NO_SCRIPT}" = "1" ] && exit 0' \
				'[ -s ${IPKG_INSTROOT}/lib/functions.sh ] || exit 0' '. ${IPKG_INSTROOT}/lib/functions.sh' \
				'export root="${IPKG_INSTROOT}"' 'export pkgname="nodeportd"' add_group_and_user default_postinst
			mk_script postinst
		) "$a/post-install"
	# shellcheck disable=SC2016 # the scripts' literal text
	check "$name: pre-deinstall = OpenWrt's preamble, root and pkgname, default_prerm, our prerm" \
		diff <(
			printf '%s\n' '#!/bin/sh' '[ -s ${IPKG_INSTROOT}/lib/functions.sh ] || exit 0' \
				'. ${IPKG_INSTROOT}/lib/functions.sh' 'export root="${IPKG_INSTROOT}"' 'export pkgname="nodeportd"' default_prerm
			mk_script prerm
		) "$a/pre-deinstall"
	check "$name: the tree is the Makefile's plus /lib/apk/packages/nodeportd.*" \
		diff "$work/expected-apk.full" <(apk_tree "$j" | sort)
	if apkv3 extract "$apk" "$a/root" 2>"$a/extract.err"; then
		listing() { (cd "$1" && find . -path ./lib/apk -prune -o -printf '%y %m %s %p %l\n' | LC_ALL=C sort); }
		check "$name: unpacked, the same files, modes and contents as the .ipk of $arch" bash -c "
			diff <($(declare -f listing); listing '$work/x-$arch/data') <($(declare -f listing); listing '$a/root') &&
			diff -r -x apk '$work/x-$arch/data' '$a/root'"
		check "$name: nodeportd.list names every file and link (sorted, the list and conffiles excepted)" diff \
			<(cd "$a/root" && find . \( -type f -o -type l \) ! -path './lib/apk/packages/*' | sed 's|^\.||' | LC_ALL=C sort) \
			"$a/root/lib/apk/packages/nodeportd.list"
		check "$name: nodeportd.conffiles is the Makefile's conffiles" diff \
			<(printf '%s\n' /etc/config/nodeportd /etc/nodeportd/) "$a/root/lib/apk/packages/nodeportd.conffiles"
		check "$name: nodeportd.conffiles_static: 'path sha256' of the shipped UCI config" diff \
			<(echo "/etc/config/nodeportd $(sha256sum "$a/root/etc/config/nodeportd" | cut -d' ' -f1)") \
			"$a/root/lib/apk/packages/nodeportd.conffiles_static"
	else
		not_ok "$name: apkv3.py extract" "$(cat "$a/extract.err")"
	fi
done

# The reader finds damage: a byte of a file's contents, a byte of the metadata.
apk64="$dist/apk/x86_64/nodeportd-$apk_version.apk"
damage() {
	# damage IN OUT WHERE: flip one byte of the decompressed stream, compress again.
	python3 - "$1" "$2" "$3" <<'EOF'
import sys, zlib
raw = open(sys.argv[1], "rb").read()
d = zlib.decompressobj(-15)
s = bytearray(d.decompress(raw[4:]) + d.flush())
i = len(s) - 100 if sys.argv[3] == "data" else s.index(b"nodeportd makes")
s[i] ^= 0x20
c = zlib.compressobj(9, zlib.DEFLATED, -15)
open(sys.argv[2], "wb").write(b"ADBd" + c.compress(bytes(s)) + c.flush())
EOF
}
damage "$apk64" "$work/bad-data.apk" data
if out=$(apkv3 show "$work/bad-data.apk" 2>&1); then
	not_ok "a changed byte in a file's data is found" "$out"
else
	check "a changed byte in a file's data is found (sha256 mismatch)" grep -q 'does not match its sha256' <<<"$out"
fi
damage "$apk64" "$work/bad-meta.apk" meta
if out=$(apkv3 show "$work/bad-meta.apk" 2>&1); then
	not_ok "a changed byte in the metadata is found" "$out"
else
	check "a changed byte in the metadata is found (info.hashes)" grep -q 'info.hashes does not match' <<<"$out"
fi
if out=$(apkv3 show "${ipks[0]}" 2>&1); then
	not_ok "an .ipk given to the reader is refused" "$out"
else
	check "an .ipk given to the reader is refused with the reason" grep -q 'not an apk v3 file' <<<"$out"
fi

# The feed CI's test.sh, on the unpacked x86_64 .apk.
r64="$work/apk-x86_64/root"
check "test.sh nodeportd $apk_version passes on the unpacked package" env PATH="$r64/usr/sbin:$PATH" \
	NODEPORTD_CONFIG="$r64/etc/config/nodeportd" sh "$pkg/nodeportd/test.sh" nodeportd "$apk_version"
check "test.sh nodeportd $ipk_version (the opkg form) passes too" env PATH="$r64/usr/sbin:$PATH" \
	NODEPORTD_CONFIG="$r64/etc/config/nodeportd" sh "$pkg/nodeportd/test.sh" nodeportd "$ipk_version"
if env PATH="$r64/usr/sbin:$PATH" NODEPORTD_CONFIG="$r64/etc/config/nodeportd" \
	sh "$pkg/nodeportd/test.sh" nodeportd 9.9.9-r1 >/dev/null 2>&1; then
	not_ok "test.sh fails for another version"
else
	ok "test.sh fails for another version"
fi

# --- shell files -------------------------------------------------------------------
router_sh=("$files/nodeportd.init" "$pkg/nodeportd/test.sh"
	"$work/x-x86_64/control/postinst" "$work/x-x86_64/control/prerm" "$work/x-x86_64/control/postinst-pkg"
	"$work/x-x86_64/control/prerm-pkg" "$work/apk-x86_64/post-install" "$work/apk-x86_64/post-upgrade"
	"$work/apk-x86_64/pre-deinstall")
for f in "${router_sh[@]}"; do
	rel=${f#"$root"/}
	rel=${rel#"$work"/}
	check "sh -n (dash) $rel" sh -n "$f"
	check "busybox ash -n $rel" busybox sh -n "$f"
done
for f in "$pkg/build-ipk.sh" "$pkg/release-tarball.sh" "$here/run.sh" "$here/release-tarball.sh" "$root/cross/targets.sh"; do
	check "bash -n ${f#"$root"/}" bash -n "$f"
done
# The maintainer scripts carry OpenWrt's preambles verbatim (unquoted
# ${IPKG_INSTROOT} and $@, sourcing a file shellcheck cannot see).
check "shellcheck on every shell file" shellcheck -x -e SC1090,SC1091,SC2086,SC2068 "${router_sh[@]}" \
	"$pkg/build-ipk.sh" "$pkg/release-tarball.sh" "$here/run.sh" "$here/release-tarball.sh" "$root/cross/targets.sh"
check "the ACL is JSON with a read and a write group" jq -e '
	(.["nodeportd-read"].read.ubus.nodeportd | sort) == (["endpoints_get","endpoints_list","node_get","node_list","service_get","service_list","status"])
	and (.["nodeportd-write"].write.ubus.nodeportd | sort) == (["endpoints_apply","endpoints_delete","node_apply","node_delete","service_apply","service_delete"])
	and (.["nodeportd-read"] | has("write") | not) and (.["nodeportd-write"] | has("read") | not)' "$files/nodeportd.acl.json"

# --- fw4 includes ----------------------------------------------------------------------
troot="$work/x-x86_64/data"
for chain in forward input; do
	inc="$troot/usr/share/nftables.d/chain-pre/$chain/10-nodeportd.nft"
	cat >"$work/fw4-$chain.nft" <<EOF
table inet nodeportd_fw4_check {
	chain $chain {
		type filter hook $chain priority filter; policy drop;
		include "$inc"
		ct state vmap { established : accept, related : accept }
	}
}
EOF
	check "fw4 chain-pre/$chain include parses (nft -c)" unshare -n nft -c -f "$work/fw4-$chain.nft"
done

# The bit in the include is the daemon's ct_mark_bit default.
if effective=$("$troot/usr/sbin/nodeportd" --check-config --config "$troot/etc/config/nodeportd" 2>&1); then
	ok "the packaged UCI config passes --check-config"
	bit=$(sed -n 's/^ct_mark_bit = //p' <<<"$effective")
	mark=$(printf '0x%08x' $((1 << ${bit:-99})))
	check "fw4 includes match 1 << ct_mark_bit ($mark)" bash -c "
		grep -q 'ct mark & $mark == $mark accept' '$files/nodeportd-forward.nft' &&
		grep -q 'ct mark & $mark == $mark accept' '$files/nodeportd-input.nft'"
	check "the packaged config answers on the LAN only" grep -qx 'nodeport_addresses = \["iface:br-lan"\]' <<<"$effective"
else
	not_ok "the packaged UCI config passes --check-config" "$effective"
fi

# --- the init script's procd calls ----------------------------------------------------------
# rc.common is not here: stand-ins record what start_service and service_triggers ask procd for.
cat >"$work/init-harness.sh" <<EOF
procd_open_instance() { echo "open_instance \$*"; }
procd_set_param() { echo "param \$*"; }
procd_close_instance() { echo "close_instance"; }
procd_add_reload_trigger() { echo "reload_trigger \$*"; }
procd_add_reload_interface_trigger() { echo "interface_trigger \$*"; }
procd_send_signal() { echo "signal \$*"; }
config_load() { echo "config_load \$*"; }
config_get() { eval "\$1=\\\$4"; [ "\$4" = /var/run/nodeportd/nodeportd.sock ] && eval "\$1=$work/run/nodeportd.sock"; }
config_list_foreach() { echo "list_foreach \$1 \$2"; for i in lan wan; do "\$3" "\$i"; done; }
. "$troot/etc/init.d/nodeportd"
PROG="$troot/usr/sbin/nodeportd"
CONF="$troot/etc/config/nodeportd"
start_service
service_triggers
reload_service
EOF
if calls=$(sh "$work/init-harness.sh" 2>&1); then
	ok "init script: start_service, service_triggers and reload_service run"
	cat >"$work/expected.calls" <<EOF
config_load nodeportd
open_instance main
param command $troot/usr/sbin/nodeportd --config $troot/etc/config/nodeportd --log syslog
param file $troot/etc/config/nodeportd
param reload_signal HUP
param respawn
param stdout 1
param stderr 1
close_instance
reload_trigger nodeportd
config_load nodeportd
list_foreach init reload_interface
interface_trigger lan
interface_trigger wan
signal nodeportd main HUP
EOF
	check "init script: procd instance, triggers and HUP reload" diff "$work/expected.calls" <(echo "$calls")
	check "init script: START after fw4 (19)" test "$(sed -n 's/^START=//p' "$files/nodeportd.init")" -gt 19
	check "init script: the socket directory is created" test -d "$work/run"
else
	not_ok "init script: start_service, service_triggers and reload_service run" "$calls"
fi

# A broken config: start_service refuses, says why in the log, and starts no instance.
printf "config nodeportd 'main'\n\toption ct_mark_bit 'fifteen'\n" >"$work/broken.uci"
cat >"$work/init-broken.sh" <<EOF
procd_open_instance() { echo "open_instance \$*"; }
procd_set_param() { :; }
procd_close_instance() { :; }
config_load() { :; }
config_get() { eval "\$1=$work/run/nodeportd.sock"; }
logger() { echo "logger \$*"; }
. "$troot/etc/init.d/nodeportd"
PROG="$troot/usr/sbin/nodeportd"
CONF="$work/broken.uci"
start_service
echo "status \$?"
EOF
broken=$(sh "$work/init-broken.sh" 2>/dev/null)
check "init script: a broken config is refused with the reason in the log" bash -c "
	grep -q '^logger -t nodeportd -p daemon.err not started: .*line 2.*ct_mark_bit' <<<'$broken' &&
	grep -qx 'status 1' <<<'$broken' && ! grep -q open_instance <<<'$broken'"

# --- postinst-pkg, the apk post-install and prerm-pkg -----------------------------------------
# Stand-ins for fw4 and nft record what the scripts ask of them.
mkdir -p "$work/stub"
cat >"$work/stub/fw4" <<EOF
#!/bin/sh
echo "fw4 \$*" >>"$work/stub.log"
EOF
cat >"$work/stub/nft" <<EOF
#!/bin/sh
echo "nft \$*" >>"$work/stub.log"
exit \$NFT_STATUS
EOF
chmod +x "$work/stub/fw4" "$work/stub/nft"
postinst_pkg="$work/x-x86_64/control/postinst-pkg"
: >"$work/stub.log"
check "postinst-pkg: fw4 running -> fw4 reloads (with our include)" bash -c "
	PATH='$work/stub:/usr/bin:/bin' NFT_STATUS=0 sh '$postinst_pkg' &&
	grep -qx 'nft list table inet fw4' '$work/stub.log' && grep -qx 'fw4 -q reload' '$work/stub.log'"
: >"$work/stub.log"
check "postinst-pkg: fw4 not running -> the firewall is left alone" bash -c "
	PATH='$work/stub:/usr/bin:/bin' NFT_STATUS=1 sh '$postinst_pkg' && ! grep -q '^fw4' '$work/stub.log'"
: >"$work/stub.log"
check "postinst-pkg: building an image (IPKG_INSTROOT) -> nothing runs" bash -c "
	PATH='$work/stub:/usr/bin:/bin' NFT_STATUS=0 IPKG_INSTROOT=/tmp/image sh '$postinst_pkg' && test ! -s '$work/stub.log'"
# An image build as 25.12's does it: `apk add --initdb --no-scripts` into the image
# root, then each post-install with IPKG_INSTROOT set, offline. The image's
# /lib/functions.sh is a stand-in recording the defaults' calls.
img="$work/image"
mkdir -p "$img/lib"
cat >"$img/lib/functions.sh" <<EOF
add_group_and_user() { echo "add_group_and_user root=\$root pkgname=\$pkgname" >>"$work/stub.log"; }
default_postinst() { echo "default_postinst root=\$root pkgname=\$pkgname" >>"$work/stub.log"; }
default_prerm() { echo "default_prerm root=\$root pkgname=\$pkgname" >>"$work/stub.log"; }
EOF
: >"$work/stub.log"
check "apk post-install in an image build: OpenWrt's defaults with root and pkgname, nothing else runs" bash -c "
	env -i PATH='$work/stub:/usr/bin:/bin' NFT_STATUS=0 IPKG_INSTROOT='$img' sh '$work/apk-x86_64/post-install' &&
	diff <(printf '%s\n' 'add_group_and_user root=$img pkgname=nodeportd' 'default_postinst root=$img pkgname=nodeportd') '$work/stub.log'"
: >"$work/stub.log"
check "apk post-upgrade: PKG_UPGRADE=1, then the post-install" bash -c "
	head -n 2 '$work/apk-x86_64/post-upgrade' | diff - <(printf '%s\n' '#!/bin/sh' 'export PKG_UPGRADE=1') &&
	diff <(tail -n +3 '$work/apk-x86_64/post-upgrade') <(tail -n +2 '$work/apk-x86_64/post-install')"
: >"$work/stub.log"
check "apk pre-deinstall in an image root: default_prerm, then our prerm does nothing there" bash -c "
	env -i PATH='$work/stub:/usr/bin:/bin' IPKG_INSTROOT='$img' sh '$work/apk-x86_64/pre-deinstall' &&
	diff <(echo 'default_prerm root=$img pkgname=nodeportd') '$work/stub.log'"
check "prerm-pkg: an upgrade keeps the rules (exits before stopping anything)" bash -c "
	out=\$(PKG_UPGRADE=1 sh '$work/x-x86_64/control/prerm-pkg' 2>&1) && test -z \"\$out\""
check "prerm-pkg: building an image (IPKG_INSTROOT) -> nothing runs" bash -c "
	out=\$(IPKG_INSTROOT=/tmp/image sh '$work/x-x86_64/control/prerm-pkg' 2>&1) && test -z \"\$out\""

# --- the daemon from the package, driven through the packaged nodeportctl ---------------------
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add br-lan type bridge
ip -n "$ns" addr add 198.18.77.1/24 dev br-lan
ip -n "$ns" link set br-lan up
mkdir -p "$work/run" "$work/state"
sock="$work/run/nodeportd.sock"
ip netns exec "$ns" "$troot/usr/sbin/nodeportd" --config "$troot/etc/config/nodeportd" \
	--socket "$sock" --state-dir "$work/state" --dry-run --log stderr \
	>"$work/daemon.out" 2>"$work/daemon.err" &
daemon_pid=$!
for _ in $(seq 1 100); do
	[ -S "$sock" ] && break
	sleep 0.1
done
check "the packaged daemon starts in --dry-run with the packaged UCI config" test -S "$sock"

check "the packaged config leaves the native ubus object on auto" bash -c \
	"'$troot/usr/sbin/nodeportd' --check-config --config '$troot/etc/config/nodeportd' | grep -qx 'ubus = \"auto\"'"

# The methods as the ubus object calls them (its names with '.' for '_'), through the
# packaged nodeportctl under busybox's environment: the result on stdout, or the error
# worded as the ubus object words it on stderr.
bb="$work/busybox"
mkdir -p "$bb"
busybox --install -s "$bb"
ctl() {
	ip netns exec "$ns" env -i PATH="$bb" NODEPORTD_SOCKET="$sock" "$troot/usr/sbin/nodeportctl" rpc "$1" -
}

# Calls with the session id uhttpd adds to every call it forwards (ignored).
session='"ubus_rpc_session": "0123456789abcdef0123456789abcdef"'
service='{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default"},"spec":{"type":"NodePort","selector":{"app":"web"},"ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080}]}}'
endpoints='{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"web","namespace":"default"},"subsets":[{"addresses":[{"ip":"198.18.78.2"}],"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}]}'

status=$(echo "{ $session }" | ctl status)
# shellcheck disable=SC2016 # $v is a jq variable
check "call status: version, node addresses on br-lan, dataplane" jq -e --arg v "$cargo_version" '
	.version == $v and (.node.addresses | tostring | contains("198.18.77.1"))
	and (.dataplane | type) == "object" and (.nodePorts.range | tostring | contains("30000"))' <<<"$status"

applied=$(echo "{ \"object\": $service, $session }" | ctl service.apply)
check "call service_apply: created, with a NodePort and a ClusterIP" jq -e '
	.action == "created" and .object.metadata.name == "web"
	and (.object.spec.ports[0].nodePort >= 30000 and .object.spec.ports[0].nodePort <= 32767)
	and (.object.spec.clusterIP | startswith("10.96."))' <<<"$applied"
node_port=$(jq -r '.object.spec.ports[0].nodePort' <<<"$applied" 2>/dev/null)

check "call service_apply again: unchanged" jq -e '.action == "unchanged"' \
	<<<"$(echo "{ \"object\": $service, $session }" | ctl service.apply)"
check "call endpoints_apply: created" jq -e '.action == "created"' \
	<<<"$(echo "{ \"object\": $endpoints, $session }" | ctl endpoints.apply)"
# shellcheck disable=SC2016 # $p is a jq variable
check "call service_get: the stored Service with its NodePort" jq -e --argjson p "${node_port:-0}" '
	.object.metadata.name == "web" and .object.spec.ports[0].nodePort == $p' \
	<<<"$(echo "{ \"namespace\": \"default\", \"name\": \"web\", $session }" | ctl service.get)"
check "call service_list: one item" jq -e '(.items | type) == "array" and (.items | length) == 1' \
	<<<"$(echo "{ $session }" | ctl service.list)"
check "call endpoints_get: the stored Endpoints" jq -e '.object.subsets[0].addresses[0].ip == "198.18.78.2"' \
	<<<"$(echo "{ \"namespace\": \"default\", \"name\": \"web\", \"kind\": \"Endpoints\", $session }" | ctl endpoints.get)"

sleep 1
check "the dry run printed rules for the NodePort and the endpoint" bash -c \
	"grep -q '${node_port:-none}' '$work/daemon.out' && grep -q '198.18.78.2' '$work/daemon.out'"

if out=$(echo "{ \"namespace\": \"default\", \"name\": \"nope\", $session }" | ctl service.get 2>&1); then
	not_ok "call service_get of a missing Service fails" "$out"
else
	check "call service_get of a missing Service: a NotFound error naming it" \
		grep -q 'Error from server (NotFound): .*nope' <<<"$out"
fi
if out=$(echo "{ \"object\": {\"kind\": \"Service\", \"metadata\": {\"name\": \"Bad_Name\"}}, $session }" | ctl service.apply 2>&1); then
	not_ok "call service_apply of an invalid Service fails" "$out"
else
	check "call service_apply of an invalid Service: an Invalid error naming it" \
		grep -q 'Error from server (Invalid): .*Bad_Name' <<<"$out"
fi
if out=$(echo '{}' | ctl no_such_method 2>&1); then
	not_ok "call of an unknown method fails" "$out"
else
	check "call of an unknown method fails, naming it" grep -q 'no_such_method' <<<"$out"
fi
check "call service_delete: the deleted Service" jq -e '.object.metadata.name == "web"' \
	<<<"$(echo "{ \"namespace\": \"default\", \"name\": \"web\", $session }" | ctl service.delete)"
check "call service_list after delete: empty" jq -e '(.items | type) == "array" and (.items | length) == 0' \
	<<<"$(echo '{}' | ctl service.list)"

kill "$daemon_pid" 2>/dev/null
if wait "$daemon_pid"; then
	ok "the daemon stops cleanly on SIGTERM"
else
	not_ok "the daemon stops cleanly on SIGTERM" "$(tail -n 20 "$work/daemon.err")"
fi
daemon_pid=""
if out=$(echo '{}' | ctl status 2>&1); then
	not_ok "call with the daemon stopped fails" "$out"
else
	check "call with the daemon stopped: a message, not a crash" grep -q 'is the daemon running' <<<"$out"
fi

# --- fw4 coexistence, with real traffic --------------------------------------------------
# A router namespace with an fw4-like forward chain (policy drop, established/related
# accepted), a LAN client and a backend. The packaged daemon (not a dry run) programs
# a NodePort; the client reaches it only once the package's include is in the chain.
r="${ns}r" c="${ns}c" b="${ns}b"
for n in "$r" "$c" "$b"; do
	ip netns add "$n"
	ip -n "$n" link set lo up
done
ip -n "$r" link add br-lan type bridge
ip link add npc0 netns "$c" type veth peer name lan0 netns "$r"
ip link add svc0 netns "$r" type veth peer name npb0 netns "$b"
ip -n "$r" link set lan0 master br-lan
for l in br-lan lan0 svc0; do ip -n "$r" link set "$l" up; done
ip -n "$r" addr add 198.18.77.1/24 dev br-lan
ip -n "$r" addr add 198.18.78.1/24 dev svc0
ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1
ip -n "$c" addr add 198.18.77.2/24 dev npc0
ip -n "$c" link set npc0 up
ip -n "$c" route add default via 198.18.77.1
ip -n "$b" addr add 198.18.78.2/24 dev npb0
ip -n "$b" link set npb0 up
ip -n "$b" route add default via 198.18.78.1
mkdir -p "$work/www" "$work/run2" "$work/state2"
echo nodeportd-backend >"$work/www/index.html"
ip netns exec "$b" busybox httpd -f -p 8080 -h "$work/www" &
httpd_pid=$!

fw4_chain() {
	# $1: the include line, or nothing
	cat <<EOF
table inet fw4check {
	chain forward {
		type filter hook forward priority filter; policy drop;
		$1
		ct state vmap { established : accept, related : accept }
	}
}
EOF
}
fw4_load() {
	ip netns exec "$r" nft delete table inet fw4check 2>/dev/null
	fw4_chain "$1" | ip netns exec "$r" nft -f -
}
fw4_load ""

# The packaged config, with ClusterIPs from the test range (traffic stays in 198.18.0.0/15)
# and a status LED.
sed -e "s|list service_cluster_ip_ranges '10.96.0.0/16'|list service_cluster_ip_ranges '198.19.96.0/24'|" \
	-e "s|^config nodeportd 'main'|&\n\toption status_led 'npd:test'|" \
	"$troot/etc/config/nodeportd" >"$work/nodeportd.uci"
check "the traffic test's config differs from the packaged one only in the ClusterIP range and the LED" \
	test "$(diff "$troot/etc/config/nodeportd" "$work/nodeportd.uci" | grep -c '^[<>]')" -eq 3
# A LED class device as sysfs shows it, mounted where the daemon looks (/sys/class/leds)
# in a mount namespace of the daemon's own.
led="$work/leds/npd:test"
mkdir -p "$led"
echo 255 >"$led/max_brightness"
echo 0 >"$led/brightness"
echo "none [heartbeat] timer netdev" >"$led/trigger"
sock2="$work/run2/nodeportd.sock"
# shellcheck disable=SC2016 # expanded by the inner shell
ip netns exec "$r" unshare -m sh -c 'mount -t tmpfs none /sys/class && mkdir /sys/class/leds &&
	mount --bind "$1" /sys/class/leds && shift && exec "$@"' sh "$work/leds" \
	"$troot/usr/sbin/nodeportd" --config "$work/nodeportd.uci" \
	--socket "$sock2" --state-dir "$work/state2" --log stderr >"$work/daemon2.out" 2>"$work/daemon2.err" &
daemon_pid=$!
for _ in $(seq 1 100); do
	[ -S "$sock2" ] && break
	sleep 0.1
done
check "the packaged daemon starts for real in the router namespace" test -S "$sock2"

ctl_r() {
	ip netns exec "$r" env -i PATH="$bb" NODEPORTD_SOCKET="$sock2" "$troot/usr/sbin/nodeportctl" rpc "$1" -
}
applied=$(echo "{ \"object\": $service }" | ctl_r service.apply)
echo "{ \"object\": $endpoints }" | ctl_r endpoints.apply >/dev/null
np=$(jq -r '.object.spec.ports[0].nodePort // empty' <<<"$applied" 2>/dev/null)
cip=$(jq -r '.object.spec.clusterIP // empty' <<<"$applied" 2>/dev/null)

fetch() {
	ip netns exec "$c" curl -s -m 2 "http://$1/"
}
# Wait for the daemon's rules, then check that fw4 without the include drops the traffic:
# otherwise the test below would prove nothing.
for _ in $(seq 1 50); do
	ip netns exec "$r" nft list table inet nodeportd 2>/dev/null | grep -q "${np:-none}" && break
	sleep 0.1
done
check "the daemon programmed NodePort ${np:-?} in its own table" bash -c \
	"ip netns exec '$r' nft list table inet nodeportd | grep -q '${np:-none}'"
if fetch "198.18.77.1:${np:-1}" >/dev/null; then
	not_ok "without the include, fw4's forward policy drops the DNAT'd connection"
else
	ok "without the include, fw4's forward policy drops the DNAT'd connection"
fi

fw4_load "include \"$troot/usr/share/nftables.d/chain-pre/forward/10-nodeportd.nft\""
check "with the include, the LAN client reaches the NodePort" bash -c \
	"$(declare -f fetch); c='$c'; [ \"\$(fetch '198.18.77.1:${np:-1}')\" = nodeportd-backend ]"
check "with the include, the LAN client reaches the ClusterIP" bash -c \
	"$(declare -f fetch); c='$c'; [ \"\$(fetch '${cip:-0.0.0.0}:80')\" = nodeportd-backend ]"

# The include matches on the daemon's mark: the same rule for another bit lets nothing
# through, and taking the include out again drops new connections again.
sed 's/0x00008000/0x00004000/g' "$troot/usr/share/nftables.d/chain-pre/forward/10-nodeportd.nft" >"$work/other-bit.nft"
fw4_load "include \"$work/other-bit.nft\""
if fetch "198.18.77.1:${np:-1}" >/dev/null; then
	not_ok "an include for another conntrack mark bit does not accept the connection"
else
	ok "an include for another conntrack mark bit does not accept the connection"
fi
fw4_load ""
if fetch "198.18.77.1:${np:-1}" >/dev/null; then
	not_ok "without the include again, new connections are dropped again"
else
	ok "without the include again, new connections are dropped again"
fi

# `fw4 reload` replaces its own table only; `firewall stop` can take every table with it.
fw4_load "include \"$troot/usr/share/nftables.d/chain-pre/forward/10-nodeportd.nft\""
check "an fw4 reload leaves the daemon's table in place" bash -c \
	"ip netns exec '$r' nft list table inet nodeportd | grep -q '${np:-none}'"
ip netns exec "$r" nft flush ruleset
for _ in $(seq 1 100); do
	ip netns exec "$r" nft list table inet nodeportd 2>/dev/null | grep -q "${np:-none}" && break
	sleep 0.1
done
fw4_load "include \"$troot/usr/share/nftables.d/chain-pre/forward/10-nodeportd.nft\""
check "after nft flush ruleset the daemon restores its table and the NodePort answers" bash -c \
	"$(declare -f fetch); c='$c'; [ \"\$(fetch '198.18.77.1:${np:-1}')\" = nodeportd-backend ]"

# The status LED: the daemon took it over from the kernel's trigger, it is on while the
# data plane is in sync, and off once the daemon stops.
check "status LED: trigger set to none" test "$(cat "$led/trigger")" = none
check "status LED: steadily on while the data plane is in sync" bash -c "
	$(declare -f ctl_r); r='$r' bb='$bb' troot='$troot' sock2='$sock2'
	echo '{}' | ctl_r status | jq -e '.dataplane.inSync == true' >/dev/null || exit 1
	for i in 1 2 3 4 5 6 7 8 9 10; do [ \"\$(cat '$led/brightness')\" = 255 ] || exit 1; sleep 0.25; done"
kill "$daemon_pid" 2>/dev/null
wait "$daemon_pid" 2>/dev/null
daemon_pid=""
check "status LED: off when the daemon stops" test "$(cat "$led/brightness")" = 0
check "nodeportd --cleanup (the package's prerm) removes the daemon's table" bash -c "
	ip netns exec '$r' '$troot/usr/sbin/nodeportd' --cleanup --config '$work/nodeportd.uci' &&
	! ip netns exec '$r' nft list table inet nodeportd >/dev/null 2>&1"
kill "$httpd_pid" 2>/dev/null
wait "$httpd_pid" 2>/dev/null

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
