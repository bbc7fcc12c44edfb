#!/usr/bin/env bash
# luci-app-nodeportd packages (openwrt-package/build-luci-app.sh), part of tests/luci/run.sh:
# the .ipk's archives, control fields and tree (what luci.mk installs from htdocs/ and
# root/), a byte-identical rebuild, the postinst (run for real in a mount namespace with
# a /tmp of its own: it clears LuCI's caches on a router, not in an image build), and the
# .apk, read back with apkv3.py, when that writer is there. Root (unshare -m).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
app="$root/openwrt-package/luci-app-nodeportd"
apkv3="${APKV3:-$root/openwrt-package/apkv3.py}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}
ok() { echo "ok - $*"; }

mkvar() { sed -n "s/^$1:=//p" "$app/Makefile"; }
version="$(mkvar PKG_VERSION)-$(mkvar PKG_RELEASE)"

DIST_DIR="$work/a" APKV3="$apkv3" "$root/openwrt-package/build-luci-app.sh" >/dev/null 2>"$work/build.err" ||
	fail "build: $(cat "$work/build.err")"
DIST_DIR="$work/b" APKV3="$apkv3" "$root/openwrt-package/build-luci-app.sh" >/dev/null 2>&1
ipk="$work/a/ipk/luci-app-nodeportd_${version}_all.ipk"
[ -f "$ipk" ] || fail "no $ipk"
cmp "$ipk" "$work/b/ipk/${ipk##*/}" || fail "a rebuild differs"
ok "dist/ipk/${ipk##*/}, byte-identical on a rebuild"

x="$work/x"
mkdir -p "$x/data" "$x/ctrl"
[ "$(tar tzf "$ipk" | tr '\n' ' ')" = "./debian-binary ./data.tar.gz ./control.tar.gz " ] || fail "ipk members: $(tar tzf "$ipk")"
tar xzf "$ipk" -C "$x"
[ "$(cat "$x/debian-binary")" = 2.0 ] || fail "debian-binary"
tar xzf "$x/data.tar.gz" -C "$x/data"
tar xzf "$x/control.tar.gz" -C "$x/ctrl"

# The tree: htdocs/ under /www, root/ under /, the same bytes, files 0644, dirs 0755.
want=$( (cd "$app/htdocs" && find . -type f | sed 's|^\./|/www/|'; cd "$app/root" && find . -type f | sed 's|^\.||') | LC_ALL=C sort)
got=$(cd "$x/data" && find . -type f | sed 's|^\.||' | LC_ALL=C sort)
[ "$want" = "$got" ] || fail "tree: want
$want
got
$got"
while IFS= read -r f; do
	case "$f" in /www/*) src="$app/htdocs/${f#/www/}" ;; *) src="$app/root$f" ;; esac
	cmp -s "$src" "$x/data$f" || fail "$f differs from its source"
	[ "$(stat -c %a "$x/data$f")" = 644 ] || fail "$f mode $(stat -c %a "$x/data$f")"
done <<<"$got"
[ -z "$(find "$x/data" -type d ! -perm 0755)" ] || fail "directories not 0755"
[ -z "$(tar tzvf "$x/data.tar.gz" | awk '$2 != "0/0"')" ] || fail "owners not 0:0"
ok "ipk tree: $(echo "$got" | wc -l) files as luci.mk installs them, modes 0644/0755, owner 0:0"

c="$x/ctrl/control"
field() { sed -n "s/^$1: //p" "$c"; }
[ "$(field Package)" = luci-app-nodeportd ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version)"
[ "$(field Architecture)" = all ] || fail "Architecture: $(field Architecture)"
[ "$(field Depends)" = "luci-base, nodeportd" ] || fail "Depends: $(field Depends)"
[ "$(field Section)" = luci ] || fail "Section: $(field Section)"
[ -n "$(field Description)" ] || fail "no Description"
for s in postinst prerm postinst-pkg; do
	[ -x "$x/ctrl/$s" ] || fail "no executable $s"
	sh -n "$x/ctrl/$s" || fail "$s: syntax"
	busybox ash -n "$x/ctrl/$s" || fail "$s: busybox ash syntax"
done
shellcheck -s sh -e SC2068,SC2086,SC1091 "$x/ctrl/postinst" "$x/ctrl/prerm" "$x/ctrl/postinst-pkg"
ok "control: $version, Architecture all, Depends luci-base, nodeportd; scripts pass sh -n, ash -n, shellcheck"

# The postinst on a running router clears the caches; in an image build it does nothing.
cat >"$work/postinst-test.sh" <<EOS
set -e
script=\$(cat "$x/ctrl/postinst-pkg")
mount -t tmpfs tmpfs /tmp
mkdir /tmp/luci-modulecache && touch /tmp/luci-modulecache/x /tmp/luci-indexcache /tmp/luci-indexcache.0 /tmp/other
IPKG_INSTROOT=/nonexistent sh -c "\$script"
[ -e /tmp/luci-indexcache ] && [ -e /tmp/luci-modulecache/x ] || { echo "image build: caches touched"; exit 1; }
env -u IPKG_INSTROOT sh -c "\$script"
[ ! -e /tmp/luci-indexcache ] && [ ! -e /tmp/luci-indexcache.0 ] && [ ! -e /tmp/luci-modulecache ] || { echo "caches left: \$(ls /tmp)"; exit 1; }
[ -e /tmp/other ] || { echo "removed more than the caches"; exit 1; }
EOS
unshare -m --propagation private sh "$work/postinst-test.sh" || fail "postinst"
[ -d "$work/x" ] || fail "the test's /tmp was hidden outside its namespace"
ok "postinst clears /tmp/luci-indexcache* and /tmp/luci-modulecache on a router, nothing in an image build"

apk="$work/a/apk/noarch/luci-app-nodeportd-$(mkvar PKG_VERSION)-r$(mkvar PKG_RELEASE).apk"
if [ ! -f "$apkv3" ]; then
	echo "SKIP - .apk: the apk v3 writer ($apkv3) is not in this tree"
	exit 0
fi
[ -f "$apk" ] || fail "no $apk"
cmp "$apk" "$work/b/apk/noarch/${apk##*/}" || fail "an apk rebuild differs"
python3 "$apkv3" show "$apk" >"$work/apk.json"
python3 "$apkv3" extract "$apk" "$work/apkx"
python3 - "$work/apk.json" "$version" <<'EOS' || fail "apk info"
import json, sys
d = json.load(open(sys.argv[1]))
i = d["info"]
want_version = sys.argv[2].rsplit("-", 1)
assert i["name"] == "luci-app-nodeportd", i
assert i["version"] == want_version[0] + "-r" + want_version[1], i["version"]
assert i["arch"] == "noarch", i["arch"]
assert sorted(i["depends"]) == ["luci-base", "nodeportd"], i["depends"]
s = d["scripts"]
assert "default_postinst" in s["post-install"] and "rm -rf /tmp/luci-modulecache" in s["post-install"], s
assert s["post-upgrade"].startswith("#!/bin/sh\nexport PKG_UPGRADE=1\n"), s["post-upgrade"]
assert "default_prerm" in s["pre-deinstall"], s
EOS
got_apk=$(cd "$work/apkx" && find . -type f | sed 's|^\.||' | grep -v '^/lib/apk/packages/' | LC_ALL=C sort)
[ "$got_apk" = "$got" ] || fail "apk tree differs from the ipk's: $got_apk"
[ "$(cat "$work/apkx/lib/apk/packages/luci-app-nodeportd.list")" = "$got" ] || fail "the .list is not the file list"
while IFS= read -r f; do
	cmp -s "$x/data$f" "$work/apkx$f" || fail "apk $f differs"
done <<<"$got"
ok "dist/apk/noarch/${apk##*/}: noarch, same files as the ipk, .list, post-install/post-upgrade/pre-deinstall"
