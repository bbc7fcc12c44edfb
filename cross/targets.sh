# shellcheck shell=bash
# The router targets, in one table: sourced by cross/build.sh,
# openwrt-package/build-ipk.sh, tests/smoke/run.sh, tests/package/run.sh and
# tests/qemu/run.sh. Every script accepts a target by its short name, an alias
# or its Rust triple.
#
# Columns:
#   short     the name scripts print and accept (cross/build.sh mipsel)
#   aliases   other accepted names, comma-separated (- for none)
#   triple    the Rust target triple; binaries go to dist/<triple>/nodeportd
#   archs     OpenWrt package architectures one binary serves, comma-separated
#   qemu      the qemu-user binary that runs it on the x86_64 host (- = native)
#   elf       ELF class:byte order:machine the binary must have
#   default   yes = built by `cross/build.sh` without arguments and by `all`
#             (s390x is test-only: the big-endian QEMU guest)
NP_TARGET_TABLE='
mips     -          mips-unknown-linux-musl         mips_24kc                          qemu-mips-static    1:2:8   yes
mipsel   mipsle     mipsel-unknown-linux-musl       mipsel_24kc                        qemu-mipsel-static  1:1:8   yes
armv7    armhf,arm  armv7-unknown-linux-musleabihf  arm_cortex-a7_neon-vfpv4           qemu-arm-static     1:1:40  yes
aarch64  arm64      aarch64-unknown-linux-musl      aarch64_cortex-a53,aarch64_generic qemu-aarch64-static 2:1:183 yes
x86_64   amd64      x86_64-unknown-linux-musl       x86_64                             -                   2:1:62  yes
s390x    -          s390x-unknown-linux-gnu         s390x                              qemu-s390x-static   2:2:22  no
'

# np_target_row NAME: the table row whose short name, alias or triple is NAME
# (s390x-unknown-linux-musl is taken for the s390x row too); fails if none.
np_target_row() {
	local name=$1
	[ "$name" = s390x-unknown-linux-musl ] && name=s390x
	awk -v n="$name" '
		NF == 7 {
			split($2, a, ",")
			hit = ($1 == n || $3 == n)
			for (i in a) if (a[i] == n) hit = 1
			if (hit) { print; found = 1; exit }
		}
		END { exit !found }' <<<"$NP_TARGET_TABLE"
}

# np_target_col NAME COLUMN (1-based, see above)
np_target_col() {
	local row
	row=$(np_target_row "$1") || return 1
	awk -v c="$2" '{ print $c }' <<<"$row"
}

np_short() { np_target_col "$1" 1; }
np_triple() { np_target_col "$1" 3; }
# Space-separated OpenWrt architectures.
np_archs() { np_target_col "$1" 4 | tr ',' ' '; }
# The qemu-user binary, or nothing for a native target.
np_qemu() { np_target_col "$1" 5 | sed 's/^-$//'; }
# "class data machine", e.g. "1 1 8" for mipsel.
np_elf() { np_target_col "$1" 6 | tr ':' ' '; }
# Short names built by default.
np_default_targets() { awk 'NF == 7 && $7 == "yes" { printf "%s%s", sep, $1; sep = " " } END { print "" }' <<<"$NP_TARGET_TABLE"; }
# Every short name.
np_all_targets() { awk 'NF == 7 { printf "%s%s", sep, $1; sep = " " } END { print "" }' <<<"$NP_TARGET_TABLE"; }
