#!/bin/bash
# Emulated-router tests: boot Debian kernels of router-class architectures under
# full-system QEMU with the contents of our .ipk in a busybox initramfs, wire
# two NICs (WAN, LAN) to host network namespaces, drive the daemon in the guest
# through the serial console, and check NodePorts with real traffic from the
# host.  Usage: tests/qemu/run.sh [ARCH...]   ARCH: mipsel aarch64 armhf s390x
#
# Environment:
#   NP_QEMU_WORK          cache and scratch dir (default: <repo>/.build/qemu)
#   NP_QEMU_BOOT_TIMEOUT  seconds to wait for the guest to come up (default 300)
#   NP_QEMU_REBUILD=1     rebuild the daemon and the ipk even if dist/ has them
#   NP_QEMU_BENCH=0       skip the 1 000-service benchmark
#   NP_QEMU_MEM           guest RAM in MiB (default 256: with 1 000 services x 3
#                         endpoints the kernel's nf_tables commit ran a 128 MiB
#                         guest out of memory)
#   NP_QEMU_BENCH_SERVICES, NP_QEMU_BENCH_BATCH  size of the benchmark (1000, in
#                         batches of 100 services with 3 endpoints each)
#   NP_QEMU_BENCH_OUT     file the benchmark table rows are appended to
#                         (default: <work>/bench.md)
#   NP_QEMU_CHAOS=N       test aid for the console channel: the first copy of
#                         about one line in N sent to the guest is dropped,
#                         loses bytes or loses its newline (it must be resent)
#   NP_QEMU_PLUGIN        a TCG plugin and its arguments for QEMU's -plugin
#                         (benches/qemu-prof: the guest's instructions by function)
#
# qemu-user cannot run these checks: it refuses NETLINK_NETFILTER sockets.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/tests/qemu
WORK=${NP_QEMU_WORK:-$ROOT/.build/qemu}
BOOT_TIMEOUT=${NP_QEMU_BOOT_TIMEOUT:-300}
BENCH=${NP_QEMU_BENCH:-1}
GUEST_MEM=${NP_QEMU_MEM:-256}
BENCH_OUT=${NP_QEMU_BENCH_OUT:-$WORK/bench.md}
ALL_ARCHES=(mipsel aarch64 armhf s390x)
# shellcheck source=cross/targets.sh
. "$ROOT/cross/targets.sh"

# Test network (RFC 2544 benchmarking range only).
CLIENT_IP=198.18.0.1
WAN_IP=198.18.0.2
WAN_IP_NEW=198.18.0.3
WAN_IP_OUTSIDE=198.18.0.200 # on the WAN, but outside nodeport_addresses
NODEPORT_CIDR=198.18.0.0/25
LAN_IP=198.18.1.1
BE1_IP=198.18.1.11
BE2_IP=198.18.1.12
CLUSTER_CIDR=198.19.0.0/16
# IPv6 (documentation range), the same layout.
CLIENT_IP6=2001:db8:4e:1::1
WAN_IP6=2001:db8:4e:1::2
NODEPORT_CIDR6=2001:db8:4e:1::/64
LAN_IP6=2001:db8:4e:2::1
BE1_IP6=2001:db8:4e:2::11
BE2_IP6=2001:db8:4e:2::12
CLUSTER_CIDR6=2001:db8:96::/112
WAN_MAC=52:54:00:4e:50:01
LAN_MAC=52:54:00:4e:50:02

log() { printf '%s [%s] %s\n' "$(date +%H:%M:%S)" "${ARCH:-qemu}" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# ---------------------------------------------------------------- architectures

arch_vars() {
	ARCH=$1
	QEMU_OPTS=()
	NIC_OPTS=""
	case $ARCH in
	mipsel)
		DEB_ARCH=mipsel KMETA=linux-image-4kc-malta QEMU_BIN=qemu-system-mipsel
		QEMU_PKG=qemu-system-mips QEMU_OPTS=(-M malta -cpu 24Kc -vga none)
		CONSOLE=ttyS0 NIC=pcnet NIC_OPTS=",romfile="
		MODS_NIC="pcnet32" MODS_EXTRA="crc32c_generic"
		TARGET=mipsel PAYLOAD=ipk PKG_ARCH=mipsel_24kc
		;;
	aarch64)
		DEB_ARCH=arm64 KMETA=linux-image-cloud-arm64 QEMU_BIN=qemu-system-aarch64
		QEMU_PKG=qemu-system-arm QEMU_OPTS=(-M virt -cpu cortex-a53)
		CONSOLE=ttyAMA0 NIC=virtio-net-pci NIC_OPTS=",romfile="
		MODS_NIC="virtio_pci virtio_net" MODS_EXTRA=""
		TARGET=aarch64 PAYLOAD=apk PKG_ARCH=aarch64_generic
		;;
	armhf)
		# The armmp kernel is not LPAE: keep PCI below 4 GiB.
		DEB_ARCH=armhf KMETA=linux-image-armmp QEMU_BIN=qemu-system-arm
		QEMU_PKG=qemu-system-arm QEMU_OPTS=(-M "virt,highmem=off" -cpu cortex-a15)
		CONSOLE=ttyAMA0 NIC=virtio-net-pci NIC_OPTS=",romfile="
		MODS_NIC="virtio_pci virtio_net" MODS_EXTRA="crc32c_generic"
		TARGET=armv7 PAYLOAD=apk PKG_ARCH=arm_cortex-a7_neon-vfpv4
		;;
	s390x)
		# Big-endian stand-in for ath79 (Debian has no big-endian MIPS kernel).
		DEB_ARCH=s390x KMETA=linux-image-s390x QEMU_BIN=qemu-system-s390x
		QEMU_PKG=qemu-system-misc QEMU_OPTS=(-M s390-ccw-virtio)
		CONSOLE=ttysclp0 NIC=virtio-net-ccw NIC_OPTS=""
		MODS_NIC="virtio_net" MODS_EXTRA=""
		TARGET=s390x PAYLOAD=ipk PKG_ARCH=s390x
		;;
	*) die "unknown architecture '$ARCH' (want one of: ${ALL_ARCHES[*]})" ;;
	esac
	RUST_TARGET=$(np_triple "$TARGET")
}

# Modules the data plane needs; missing or built-in ones are fine.
MODS_NF="nfnetlink nf_tables nf_conntrack nf_nat nf_conntrack_netlink nft_nat nft_chain_nat
nft_ct nft_numgen nft_masq nft_redir nft_reject nft_reject_inet nft_reject_ipv4 nft_reject_ipv6
nft_fib nft_fib_inet nft_fib_ipv4 nft_fib_ipv6 nft_hash nft_limit nft_objref nft_quota nft_counter"

# ------------------------------------------------------------------ host tools

install_host_tools() {
	local need=() cmd pkg
	for pair in cpio:cpio depmod:kmod ip:iproute2 curl:curl socat:socat nft:nftables; do
		cmd=${pair%%:*} pkg=${pair#*:}
		command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
	done
	[ -x /bin/busybox ] || need+=(busybox-static)
	for a in "${ARCHES[@]}"; do
		arch_vars "$a"
		command -v "$QEMU_BIN" >/dev/null 2>&1 || need+=("$QEMU_PKG")
	done
	ARCH=""
	[ ${#need[@]} -eq 0 ] && return 0
	log "installing host packages: ${need[*]}"
	# A foreign-arch index that is mid-sync makes update exit 100; the rest is usable.
	apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null 2>&1 || true
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
		--no-install-recommends "${need[@]}" >&2
}

# -------------------------------------------------------- guest packages (apt)

apt_guest() {
	local d=$WORK/apt-$DEB_ARCH
	apt-get -q -o APT::Architecture="$DEB_ARCH" -o APT::Architectures::="$DEB_ARCH" \
		-o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" \
		-o Dir::State::Status="$d/status" -o Debug::NoLocking=1 \
		-o APT::Sandbox::User=root -o Acquire::Languages=none "$@"
}

apt_cache_guest() {
	local d=$WORK/apt-$DEB_ARCH
	apt-cache -o APT::Architecture="$DEB_ARCH" -o APT::Architectures::="$DEB_ARCH" \
		-o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" \
		-o Dir::State::Status="$d/status" "$@"
}

apt_guest_update() {
	local d=$WORK/apt-$DEB_ARCH
	mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
	[ -e "$d/status" ] || : >"$d/status"
	# Lists younger than a day are good enough: kernels move slowly.
	if [ -n "$(find "$d/lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null | head -n1)" ]; then
		return 0
	fi
	log "apt-get update for $DEB_ARCH"
	apt_guest update >"$d/update.log" 2>&1 || log "apt-get update exited $? (tolerated; see $d/update.log)"
	[ -n "$(find "$d/lists" -maxdepth 1 -name '*_Packages*' | head -n1)" ] ||
		die "no package lists for $DEB_ARCH (see $d/update.log)"
}

# Download packages into $WORK/debs-$DEB_ARCH unless a .deb of that name is there.
fetch_debs() {
	local dir=$WORK/debs-$DEB_ARCH p want=()
	mkdir -p "$dir"
	for p in "$@"; do
		compgen -G "$dir/${p}_*_${DEB_ARCH}.deb" >/dev/null ||
			compgen -G "$dir/${p}_*_all.deb" >/dev/null || want+=("$p")
	done
	[ ${#want[@]} -eq 0 ] && return 0
	log "downloading ${want[*]}"
	(cd "$dir" && apt_guest download "${want[@]}" >/dev/null)
}

deb_of() { compgen -G "$WORK/debs-$DEB_ARCH/${1}_*.deb" | sort -V | tail -n1; }

fetch_guest() {
	apt_guest_update
	KPKG=$(apt_cache_guest depends "$KMETA" | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
	[ -n "$KPKG" ] || die "cannot resolve $KMETA to a kernel package"
	NFT_PKGS=$(apt_cache_guest depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances nftables | grep -E '^[a-z0-9]' | sort -u | tr '\n' ' ')
	# shellcheck disable=SC2086 # word splitting of the package list is wanted
	fetch_debs "$KPKG" busybox-static $NFT_PKGS

	KDIR=$WORK/kernel-$DEB_ARCH/$KPKG
	if [ ! -e "$KDIR/.done" ]; then
		log "extracting $KPKG"
		rm -rf "$KDIR" && mkdir -p "$KDIR"
		dpkg -x "$(deb_of "$KPKG")" "$KDIR"
		KVER=$(basename "$(find "$KDIR/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)")
		# Debian ships no modules.dep.
		depmod -b "$KDIR" "$KVER"
		touch "$KDIR/.done"
	fi
	KVER=$(basename "$(find "$KDIR/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)")
	KERNEL=$(find "$KDIR/boot" -name 'vmlinu*' | head -n1)
	[ -f "$KERNEL" ] || die "no kernel image in $KPKG"

	USERLAND=$WORK/userland-$DEB_ARCH
	local stamp="busybox-static $NFT_PKGS"
	if [ "$(cat "$USERLAND/.done" 2>/dev/null)" != "$stamp" ]; then
		rm -rf "$USERLAND" && mkdir -p "$USERLAND"
		for p in busybox-static $NFT_PKGS; do dpkg -x "$(deb_of "$p")" "$USERLAND"; done
		printf '%s' "$stamp" >"$USERLAND/.done"
	fi
}

# ------------------------------------------------------------- the daemon (ipk)

# Lay out what installing the package puts on the router into $1: the .ipk's
# data.tar.gz, or the .apk's files unpacked by openwrt-package/apkv3.py (which
# checks the whole package first: structure, hashes of the metadata and of
# every file), with the modes the package records.
daemon_payload() {
	local dest=$1 pkg tmp
	if [ "${NP_QEMU_REBUILD:-0}" = 1 ] || ! find_pkg >/dev/null; then
		build_daemon
	fi
	pkg=$(find_pkg) || die "no $PAYLOAD package for $PKG_ARCH in dist/ after building it"
	log "payload: $pkg"
	if [ "$PAYLOAD" = apk ]; then
		python3 "$ROOT/openwrt-package/apkv3.py" extract "$pkg" "$dest" || die "apkv3.py extract $pkg failed"
	else
		tmp=$(mktemp -d "$RUN/ipk.XXXX")
		tar -xzf "$pkg" -C "$tmp"
		tar -xzf "$tmp"/data.tar.gz -C "$dest"
	fi
	chmod 0755 "$dest"
	[ -x "$dest/usr/sbin/nodeportd" ] || die "payload has no /usr/sbin/nodeportd"
	[ -L "$dest/usr/sbin/nodeportctl" ] || die "payload has no nodeportctl link"
}

find_pkg() {
	if [ "$PAYLOAD" = apk ]; then
		compgen -G "$ROOT/dist/apk/$PKG_ARCH/nodeportd-*.apk" | sort -V | tail -n1 | grep .
	else
		compgen -G "$ROOT/dist/ipk/nodeportd_*_${PKG_ARCH}.ipk" | sort -V | tail -n1 | grep .
	fi
}

build_daemon() {
	if [ "${NP_QEMU_REBUILD:-0}" = 1 ] || [ ! -x "$ROOT/dist/$RUST_TARGET/nodeportd" ]; then
		log "building the daemon: cross/build.sh $TARGET"
		bash "$ROOT/cross/build.sh" "$TARGET" >&2 || die "cross/build.sh $TARGET failed"
	fi
	log "packaging: openwrt-package/build-ipk.sh $TARGET"
	bash "$ROOT/openwrt-package/build-ipk.sh" "$TARGET" >&2 ||
		die "openwrt-package/build-ipk.sh $TARGET failed"
}

# ---------------------------------------------------------------- initramfs

build_initramfs() {
	local tree=$RUN/$ARCH/initramfs mod line seen=" " f
	rm -rf "$tree" && mkdir -p "$tree"/{bin,sbin,etc/qemu,lib,usr/sbin,usr/bin,qemu}
	cp "$USERLAND/bin/busybox" "$tree/bin/busybox"
	install -m 0755 "$HERE/guest-init.sh" "$tree/init"
	install -m 0755 "$HERE/guest-bench.sh" "$tree/qemu/bench.sh"

	# nft and its shared libraries, for checking the ruleset from inside.
	if [ -x "$USERLAND/usr/sbin/nft" ]; then
		cp "$USERLAND/usr/sbin/nft" "$tree/usr/sbin/nft"
		for d in lib lib64 usr/lib; do
			[ -d "$USERLAND/$d" ] || continue
			(cd "$USERLAND" && find "$d" \( -name '*.so' -o -name '*.so.*' \) \( -type f -o -type l \) \
				-not -path '*/gconv/*' -not -path '*/audit/*') |
				while read -r f; do
					mkdir -p "$tree/$(dirname "$f")"
					cp -a "$USERLAND/$f" "$tree/$f"
				done
		done
	fi

	# Modules in load order, as modprobe would insert them.
	: >"$tree/etc/qemu/modules"
	for mod in $MODS_NIC $MODS_NF $MODS_EXTRA; do
		modprobe -d "$KDIR" -S "$KVER" --show-depends "$mod" 2>/dev/null | while read -r line; do
			case $line in
			insmod\ *)
				f=${line#insmod }
				f=${f%% *}
				f=${f#"$KDIR/lib/modules/$KVER/"}
				printf '%s\n' "$f"
				;;
			esac
		done >>"$tree/etc/qemu/modules.all" || true
	done
	while read -r f; do
		case $seen in *" $f "*) continue ;; esac
		seen="$seen$f "
		printf '%s\n' "$f" >>"$tree/etc/qemu/modules"
		mkdir -p "$tree/lib/modules/$KVER/$(dirname "$f")"
		cp "$KDIR/lib/modules/$KVER/$f" "$tree/lib/modules/$KVER/$f"
	done <"$tree/etc/qemu/modules.all"
	rm -f "$tree/etc/qemu/modules.all"
	cp "$KDIR/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$tree/lib/modules/$KVER/" 2>/dev/null || true
	depmod -b "$tree" "$KVER"
	log "initramfs: $(wc -l <"$tree/etc/qemu/modules") modules"

	if [ "${NP_QEMU_NO_DAEMON:-0}" != 1 ]; then
		daemon_payload "$tree"
	fi

	(cd "$tree" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | gzip -6 >"$RUN/$ARCH/initrd.gz"
	log "initramfs: $(du -k "$RUN/$ARCH/initrd.gz" | cut -f1) KiB gzipped"
}

# ------------------------------------------------------- host network + guest

TAG=""
QEMU_PID=""
CAT_PID=""
BG_PIDS=()
NSES=()
TAPS=()

cleanup_arch() {
	local p ns t
	for p in "${BG_PIDS[@]}" $QEMU_PID $CAT_PID; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${BG_PIDS[@]}" $QEMU_PID $CAT_PID; do
		wait "$p" 2>/dev/null || true
	done
	for ns in "${NSES[@]}"; do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
	done
	for t in "${TAPS[@]}"; do
		ip link del "$t" 2>/dev/null || true
	done
	BG_PIDS=() NSES=() TAPS=() QEMU_PID="" CAT_PID=""
	if [ -n "${CONFD:-}" ]; then
		exec {CONFD}>&- || true
		CONFD=""
	fi
}

cleanup_all() {
	cleanup_arch
	if [ -n "${RUN:-}" ] && [ "${NP_QEMU_KEEP:-0}" != 1 ]; then
		rm -rf "$RUN"
	fi
}

start_guest() {
	local d=$RUN/$ARCH
	TAG=$(printf 'nq%s%d' "${ARCH:0:2}" $(($$ % 100000)))
	TAP_WAN=${TAG}w TAP_LAN=${TAG}l
	NS_CLIENT=${TAG}-client NS_LAN=${TAG}-lan NS_BE1=${TAG}-be1 NS_BE2=${TAG}-be2
	for t in "$TAP_WAN" "$TAP_LAN"; do
		ip tuntap add dev "$t" mode tap
		TAPS+=("$t")
		ip link set "$t" up
	done
	mkfifo "$d/con.in" "$d/con.out"
	: >"$d/console.log"
	cat "$d/con.out" >>"$d/console.log" &
	CAT_PID=$!

	local append="console=$CONSOLE quiet panic=-1 np_wan_mac=$WAN_MAC np_lan_mac=$LAN_MAC"
	append+=" np_wan_cidr=$WAN_IP/24 np_lan_cidr=$LAN_IP/24"
	append+=" np_wan_cidr6=$WAN_IP6/64 np_lan_cidr6=$LAN_IP6/64"
	log "booting $(basename "$KERNEL") ($KVER)"
	BOOT_T0=$(date +%s.%N)
	# timeout: a guest must never outlive a CI job, whatever happens to us.
	timeout -k 10 3000 "$QEMU_BIN" "${QEMU_OPTS[@]}" ${NP_QEMU_PLUGIN:+-plugin "$NP_QEMU_PLUGIN"} -m "$GUEST_MEM" -smp 1 \
		-nodefaults -display none -monitor none -no-reboot \
		-kernel "$KERNEL" -initrd "$d/initrd.gz" -append "$append" \
		-chardev "pipe,id=con,path=$d/con" -serial chardev:con \
		-netdev "tap,id=wan,ifname=$TAP_WAN,script=no,downscript=no" \
		-device "$NIC,netdev=wan,mac=$WAN_MAC$NIC_OPTS" \
		-netdev "tap,id=lan,ifname=$TAP_LAN,script=no,downscript=no" \
		-device "$NIC,netdev=lan,mac=$LAN_MAC$NIC_OPTS" \
		>"$d/qemu.log" 2>&1 &
	QEMU_PID=$!
	# Read-write: never blocks on open, and no SIGPIPE if QEMU goes away.
	exec {CONFD}<>"$d/con.in"

	# The taps get carrier once QEMU holds them; only then move them.
	for _ in $(seq 300); do
		[ "$(cat "/sys/class/net/$TAP_WAN/carrier" 2>/dev/null)" = 1 ] &&
			[ "$(cat "/sys/class/net/$TAP_LAN/carrier" 2>/dev/null)" = 1 ] && break
		kill -0 "$QEMU_PID" 2>/dev/null || die "QEMU exited: $(cat "$d/qemu.log")"
		sleep 0.1
	done
	setup_netns

	for _ in $(seq $((BOOT_TIMEOUT * 5))); do
		grep -q '^@@READY' "$d/console.log" 2>/dev/null && break
		if ! kill -0 "$QEMU_PID" 2>/dev/null; then
			tail -n 30 "$d/console.log" >&2
			die "QEMU exited during boot: $(cat "$d/qemu.log")"
		fi
		sleep 0.2
	done
	if ! grep -q '^@@READY' "$d/console.log"; then
		tail -n 30 "$d/console.log" >&2
		die "guest not ready after ${BOOT_TIMEOUT}s"
	fi
	BOOT_SECS=$(awk -v a="$BOOT_T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	grep '^@@LOG' "$d/console.log" >&2 || true
	log "guest ready in ${BOOT_SECS}s: $(grep '^@@READY' "$d/console.log" | tr -d '\r')"
}

setup_netns() {
	local d=$RUN/$ARCH n ip ip6 ns
	for ns in "$NS_CLIENT" "$NS_LAN" "$NS_BE1" "$NS_BE2"; do
		ip netns add "$ns"
		NSES+=("$ns")
		ip -n "$ns" link set lo up
	done
	# WAN: the client alone on the other end of the tap.
	ip link set "$TAP_WAN" netns "$NS_CLIENT"
	ip -n "$NS_CLIENT" addr add "$CLIENT_IP/24" dev "$TAP_WAN"
	ip -n "$NS_CLIENT" addr add "$CLIENT_IP6/64" dev "$TAP_WAN" nodad
	ip -n "$NS_CLIENT" link set "$TAP_WAN" up
	# LAN: a bridge with the tap and two backends.  The backends get no route
	# beyond their /24: a reply reaches the client only if the router masquerades.
	ip link set "$TAP_LAN" netns "$NS_LAN"
	ip -n "$NS_LAN" link add br0 type bridge
	ip -n "$NS_LAN" link set "$TAP_LAN" master br0
	ip -n "$NS_LAN" link set "$TAP_LAN" up
	ip -n "$NS_LAN" link set br0 up
	for n in 1 2; do
		ns=$NS_BE1 ip=$BE1_IP ip6=$BE1_IP6
		[ "$n" = 2 ] && ns=$NS_BE2 ip=$BE2_IP ip6=$BE2_IP6
		ip -n "$NS_LAN" link add "be$n" type veth peer name eth0 netns "$ns"
		ip -n "$NS_LAN" link set "be$n" master br0
		ip -n "$NS_LAN" link set "be$n" up
		ip -n "$ns" addr add "$ip/24" dev eth0
		ip -n "$ns" addr add "$ip6/64" dev eth0 nodad
		ip -n "$ns" link set eth0 up
		mkdir -p "$d/www-be$n"
		echo "be$n" >"$d/www-be$n/index.html"
		ip netns exec "$ns" /bin/busybox httpd -f -p 8080 -h "$d/www-be$n" &
		BG_PIDS+=($!)
		ip netns exec "$ns" socat UDP4-RECVFROM:5353,fork SYSTEM:"read -r _; echo be$n" &
		BG_PIDS+=($!)
	done
	# A backend must be listening before the first request.
	for n in 1 2; do
		ns=$NS_BE1 ip=$BE1_IP
		[ "$n" = 2 ] && ns=$NS_BE2 ip=$BE2_IP
		for _ in $(seq 50); do
			[ "$(ip netns exec "$ns" curl -s --max-time 1 "http://$ip:8080/" 2>/dev/null)" = "be$n" ] && break
			sleep 0.1
		done
	done
}

# send_acked LINE ANSWER...: write LINE to the guest's console until one of the
# ANSWER lines shows in the console log (the serial line may drop or garble
# it: the guest checks each line's MD5 and ignores a bad one). Up to 40 tries,
# 3 s apart at first, 10 s on a busy guest; fails if the guest is gone.
send_acked() {
	local line=$1 d=$RUN/$ARCH try wait pat
	shift
	pat=$(printf '^(%s)\r?$' "$(printf '%s|' "$@" | sed 's/|$//; s/\./\\./g')")
	for try in $(seq 40); do
		[ "$try" -gt 1 ] && echo "$((try - 1)) $line" | cut -c1-60 >>"$d/resends"
		if [ "$try" = 1 ] && [ "${NP_QEMU_CHAOS:-0}" -gt 0 ] && [ $((RANDOM % NP_QEMU_CHAOS)) = 0 ]; then
			# Test aid: lose this first copy the ways a serial line does.
			case $((RANDOM % 3)) in
			0) echo "chaos: dropped" >>"$d/chaos" ;;
			1) printf '%s\n' "${line:0:20}${line:22}" >&"$CONFD" && echo "chaos: 2 bytes lost" >>"$d/chaos" ;;
			2) printf '%s' "${line:0:30}" >&"$CONFD" && echo "chaos: cut, no newline" >>"$d/chaos" ;;
			esac
		else
			printf '%s\n' "$line" >&"$CONFD"
		fi
		wait=$((try < 3 ? 30 : 100))
		for _ in $(seq "$wait"); do
			grep -a -q -E "$pat" "$d/console.log" 2>/dev/null && return 0
			kill -0 "$QEMU_PID" 2>/dev/null || return 1
			sleep 0.1
		done
	done
	return 1
}

md5_of() { printf '%s' "$1" | md5sum | cut -c1-32; }

# guest SECS <<'EOF' ... EOF  — run a shell script in the guest; prints its
# output, returns its exit status (124/137 on timeout, 255 on a lost guest).
guest() {
	local secs=${1:-60} d=$RUN/$ARCH id chunk end=""
	# A counter in a file: callers often run us in a $(...) subshell.
	id=$(($(cat "$d/seq" 2>/dev/null || echo 0) + 1))
	echo "$id" >"$d/seq"
	local k=0 xline
	# One line in flight: the guest's tty drops what overflows its buffer.
	while read -r chunk; do
		k=$((k + 1))
		if ! send_acked "@@D $id.$k $(md5_of "$chunk") $chunk" "@@A $id.$k"; then
			log "guest command $id: chunk $k not acknowledged"
			return 255
		fi
	done < <(base64 -w 600)
	xline="$id $secs $k"
	if ! send_acked "@@X $xline $(md5_of "$xline")" "@@R $id"; then
		log "guest command $id: run request not acknowledged"
		return 255
	fi
	for _ in $(seq $(((secs + 30) * 10))); do
		end=$(grep -a -m1 "^@@END $id " "$d/console.log" 2>/dev/null | tr -d '\r' || true)
		[ -n "$end" ] && break
		kill -0 "$QEMU_PID" 2>/dev/null || break
		sleep 0.1
	done
	if [ -z "$end" ]; then
		log "guest command $id got no answer"
		return 255
	fi
	tr -d '\r' <"$d/console.log" | awk -v id="$id" '
		$0 == "@@BEGIN " id { on = 1; next }
		index($0, "@@END " id " ") == 1 { exit }
		on { buf = buf $0 "\n" }
		END { sub(/\n\n$/, "\n", buf); printf "%s", buf }'
	return "${end##* }"
}

# ------------------------------------------------------------------ checks

# Results go to a file: each architecture runs in a subshell of its own.
pass() {
	echo "PASS $ARCH $1" >>"$RUN/results"
	log "PASS $1"
}
fail() {
	echo "FAIL $ARCH $1${2:+: $2}" >>"$RUN/results"
	log "FAIL $1${2:+: $2}"
}

np_crate_version() { sed -n '/^\[package\]/,/^\[/s/^version[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$ROOT/Cargo.toml" | head -n1; }

in_client() { ip netns exec "$NS_CLIENT" "$@"; }

http_get() { in_client curl -s --max-time "${3:-3}" "http://$1:$2/" 2>/dev/null; }

udp_ask() {
	in_client sh -c "echo ping | socat -T 2 - UDP4:$1:$2" 2>/dev/null | head -n1
}

# Names answering N requests to ADDR:PORT, e.g. "be1 be2" (sorted, unique).
spread() {
	local addr=$1 port=$2 n=$3 proto=${4:-tcp} out="" r
	for _ in $(seq "$n"); do
		if [ "$proto" = udp ]; then r=$(udp_ask "$addr" "$port"); else r=$(http_get "$addr" "$port"); fi
		out+="${r:-none} "
	done
	echo "$out" | tr ' ' '\n' | grep . | sort | uniq -c | awk '{ printf "%s=%s ", $2, $1 }'
}

# Wait up to SECS for ADDR:PORT to answer with a backend name.
wait_answer() {
	local addr=$1 port=$2 secs=$3 r
	for _ in $(seq "$secs"); do
		r=$(http_get "$addr" "$port" 1)
		case $r in be1 | be2) return 0 ;; esac
		sleep 1
	done
	return 1
}

# The package's files reached the guest with the modes it records (the .apk's
# through our own reader, the .ipk's through tar).
check_payload() {
	local r want
	want="755 regular file /usr/sbin/nodeportd
777 symbolic link /usr/sbin/nodeportctl
755 regular file /etc/init.d/nodeportd
600 regular file /etc/config/nodeportd
755 directory /etc/nodeportd
644 regular file /usr/share/rpcd/acl.d/nodeportd.json
644 regular file /usr/share/nftables.d/chain-pre/forward/10-nodeportd.nft"
	[ "$PAYLOAD" = apk ] && want="$want
644 regular file /lib/apk/packages/nodeportd.list
644 regular file /lib/apk/packages/nodeportd.conffiles_static"
	r=$(guest 30 <<<"stat -c '%a %F %n' $(echo "$want" | awk '{ printf "%s ", $NF }'); readlink /usr/sbin/nodeportctl; nodeportd --version") || true
	if [ "$r" = "$want
nodeportd
nodeportd $(np_crate_version)" ]; then
		pass "package-files-and-modes ($PAYLOAD)"
	else
		fail "package-files-and-modes ($PAYLOAD)" "got: $r"
	fi
}

check_plumbing() {
	# Without any NAT: the guest's own busybox httpd on its WAN address.
	local r
	r=$(http_get "$WAN_IP" 8081 10)
	if [ "$r" = router ]; then pass plumbing-wan; else fail plumbing-wan "got '$r'"; fi
	r=$(http_get "[$WAN_IP6]" 8081 10)
	if [ "$r" = router ]; then pass plumbing-wan-ipv6; else fail plumbing-wan-ipv6 "got '$r'"; fi
	r=$(guest 30 <<EOF
# (busybox wget -T crashes on mipsel)
timeout 10 wget -q -O - http://$BE1_IP:8080/ && timeout 10 wget -q -O - http://$BE2_IP:8080/
EOF
	) || true
	if [ "$(echo "$r" | tr '\n' ' ')" = "be1 be2 " ]; then pass plumbing-lan; else fail plumbing-lan "got '$r'"; fi
	if ip netns exec "$NS_BE1" ping -c1 -W1 "$CLIENT_IP" >/dev/null 2>&1 ||
		ip netns exec "$NS_BE1" ping -6 -c1 -W1 "$CLIENT_IP6" >/dev/null 2>&1; then
		fail backends-isolated "backend reaches the client directly"
	else
		pass backends-isolated
	fi
}

MANIFESTS='{"apiVersion":"v1","kind":"List","items":[
{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default"},
 "spec":{"type":"NodePort","selector":{"app":"web"},"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080}]}},
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"web-1","namespace":"default","labels":{"kubernetes.io/service-name":"web"}},
 "addressType":"IPv4","ports":[{"name":"http","protocol":"TCP","port":8080}],
 "endpoints":[{"addresses":["BE1"],"conditions":{"ready":true}},{"addresses":["BE2"],"conditions":{"ready":true}}]},
{"apiVersion":"v1","kind":"Service","metadata":{"name":"echo","namespace":"default"},
 "spec":{"type":"NodePort","selector":{"app":"echo"},"ports":[{"name":"echo","protocol":"UDP","port":53,"targetPort":5353}]}},
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"echo-1","namespace":"default","labels":{"kubernetes.io/service-name":"echo"}},
 "addressType":"IPv4","ports":[{"name":"echo","protocol":"UDP","port":5353}],
 "endpoints":[{"addresses":["BE1"],"conditions":{"ready":true}},{"addresses":["BE2"],"conditions":{"ready":true}}]},
{"apiVersion":"v1","kind":"Service","metadata":{"name":"minio","namespace":"default"},
 "spec":{"type":"NodePort","selector":{"app":"minio"},"ports":[{"name":"http","protocol":"TCP","port":9000,"targetPort":8080,"nodePort":30009}]}},
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"minio-1","namespace":"default","labels":{"kubernetes.io/service-name":"minio"}},
 "addressType":"IPv4","ports":[{"name":"http","protocol":"TCP","port":8080}],
 "endpoints":[{"addresses":["BE2"],"conditions":{"ready":true}}]},
{"apiVersion":"v1","kind":"Service","metadata":{"name":"web6","namespace":"default"},
 "spec":{"type":"NodePort","ipFamilies":["IPv6"],"ipFamilyPolicy":"SingleStack","selector":{"app":"web6"},"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080}]}},
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"web6-1","namespace":"default","labels":{"kubernetes.io/service-name":"web6"}},
 "addressType":"IPv6","ports":[{"name":"http","protocol":"TCP","port":8080}],
 "endpoints":[{"addresses":["BESIX1"],"conditions":{"ready":true}},{"addresses":["BESIX2"],"conditions":{"ready":true}}]},
{"apiVersion":"v1","kind":"Service","metadata":{"name":"empty","namespace":"default"},
 "spec":{"type":"NodePort","selector":{"app":"none"},"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080,"nodePort":30010}]}}
]}'

# Start the daemon as /etc/init.d/nodeportd would (busybox has no procd): check
# the packaged config, create the socket's directory, run it in the background.
# The packaged config is adjusted for the test network first.
start_daemon() {
	local out rc
	out=$(guest 120 <<EOF
set -e
uci=/etc/config/nodeportd
toml=/etc/nodeportd/nodeportd.toml
if [ -f \$uci ]; then
  cfg=\$uci
  # Our keys replace the packaged ones in the daemon's section.
  awk '
    /^[ \t]*(option|list)[ \t]+(nodeport_addresses|service_cluster_ip_ranges|node_name)[ \t]/ { next }
    { print }
    /^config[ \t]+(nodeportd|main)/ {
      print "\toption node_name '"'"'qemu-$ARCH'"'"'"
      print "\tlist service_cluster_ip_ranges '"'"'$CLUSTER_CIDR'"'"'"
      print "\tlist service_cluster_ip_ranges '"'"'$CLUSTER_CIDR6'"'"'"
      print "\tlist nodeport_addresses '"'"'$NODEPORT_CIDR'"'"'"
      print "\tlist nodeport_addresses '"'"'$NODEPORT_CIDR6'"'"'"
    }' \$uci > /tmp/nodeportd.conf
  cat /tmp/nodeportd.conf > \$uci
else
  cfg=\$toml
  mkdir -p /etc/nodeportd
  {
    echo 'nodeport_addresses = ["$NODEPORT_CIDR", "$NODEPORT_CIDR6"]'
    echo 'service_cluster_ip_ranges = ["$CLUSTER_CIDR", "$CLUSTER_CIDR6"]'
    echo 'node_name = "qemu-$ARCH"'
    # Top-level keys come first in TOML: ours, then the rest of the file.
    [ -f \$toml ] && awk '
      /^[ \t]*(nodeport_addresses|service_cluster_ip_ranges|node_name)[ \t]*=/ { skip = (\$0 ~ /\[/ && \$0 !~ /\]/); next }
      skip { if (\$0 ~ /\]/) skip = 0; next }
      { print }' \$toml
  } > /tmp/nodeportd.conf
  cat /tmp/nodeportd.conf > \$toml
fi
echo "\$cfg" > /tmp/nodeportd.cfgpath
echo "--- \$cfg"; grep -v '^[[:space:]]*#' \$cfg | grep .
nodeportd --check-config --config \$cfg > /tmp/check-config.out 2>&1 || { cat /tmp/check-config.out; exit 1; }
mkdir -p /var/run/nodeportd
# busybox date has no %N: /proc/uptime counts in 10 ms steps.
ms() { read -r up _ < /proc/uptime; echo \$(( \${up%.*}\${up#*.} * 10 )); }
t0=\$(ms)
nodeportd --config \$cfg --log stderr < /dev/null > /tmp/nodeportd.log 2>&1 &
echo \$! > /tmp/nodeportd.pid
i=0
until nodeportctl status > /dev/null 2>&1; do
  i=\$((i + 1)); [ \$i -lt 600 ] || { echo "daemon not answering"; cat /tmp/nodeportd.log; exit 1; }
  kill -0 \$(cat /tmp/nodeportd.pid) 2>/dev/null || { echo "daemon exited"; cat /tmp/nodeportd.log; exit 1; }
  sleep 0.05
done
t1=\$(ms)
echo \$((t1 - t0)) > /tmp/startup_ms
echo "startup_ms=\$((t1 - t0))"
nodeportctl status
EOF
	) && rc=0 || rc=$?
	echo "$out" >&2
	if [ "$rc" = 0 ]; then pass daemon-starts; else fail daemon-starts "status $rc"; return 1; fi
}

node_port_of() {
	guest 30 <<<"nodeportctl get svc $1 -o json" | tr -d ' \n' | grep -o '"nodePort":[0-9]*' | head -n1 | cut -d: -f2
}

check_dataplane() {
	local out np_web np_web6 np_echo np_empty r t0 t1 ms
	local manifests
	manifests=$(printf '%s' "$MANIFESTS" | sed "s/BE1/$BE1_IP/g; s/BE2/$BE2_IP/g; s/BESIX1/$BE1_IP6/g; s/BESIX2/$BE2_IP6/g")
	out=$(guest 60 <<<"$(printf 'cat > /tmp/m.json <<"__EOF__"\n%s\n__EOF__\nnodeportctl apply -f /tmp/m.json\n' "$manifests")") && r=0 || r=$?
	echo "$out" >&2
	if [ "$r" = 0 ]; then pass apply; else fail apply "status $r: $out"; fi
	np_web=$(node_port_of web || true)
	np_echo=$(node_port_of echo || true)
	np_empty=$(node_port_of empty || true)
	np_web6=$(node_port_of web6 || true)
	log "nodePorts: web=$np_web echo=$np_echo empty=$np_empty minio=30009 web6=$np_web6"
	if [ -z "$np_web" ] || [ -z "$np_echo" ] || [ -z "$np_empty" ] || [ -z "$np_web6" ]; then
		fail nodeports-allocated "web=$np_web echo=$np_echo empty=$np_empty web6=$np_web6"
		return 0
	fi
	pass nodeports-allocated

	# Rules follow the apply asynchronously; give the first sync a moment.
	wait_answer "$WAN_IP" "$np_web" 30 || true

	r=$(spread "$WAN_IP" "$np_web" 20)
	log "tcp spread over 20: $r"
	case $r in *be1=*be2=*) pass tcp-spread-both-backends ;; *) fail tcp-spread-both-backends "$r" ;; esac
	case $r in *none=*) fail tcp-every-request-answered "$r" ;; *) pass tcp-every-request-answered ;; esac
	# The backends have no route to the client: any answer proves masquerade.
	case $r in *be1=* | *be2=*) pass masquerade ;; *) fail masquerade "$r" ;; esac

	# 20 new flows, as for TCP: with two backends picked at random, 12 put all on one
	# backend once in 2 048 runs (seen once on aarch64); 20, once in 500 000.
	r=$(spread "$WAN_IP" "$np_echo" 20 udp)
	log "udp spread over 20: $r"
	case $r in *be1=*be2=*) pass udp-both-backends ;; *) fail udp-both-backends "$r" ;; esac

	r=$(http_get "$WAN_IP" 30009)
	if [ "$r" = be2 ]; then pass static-nodeport-30009; else fail static-nodeport-30009 "got '$r'"; fi

	# IPv6: an IPv6 single-stack Service on the router's IPv6 WAN address. The
	# backends have no IPv6 route beyond their /64 either: answers prove NAT66
	# masquerade.
	wait_answer "[$WAN_IP6]" "$np_web6" 30 || true
	# 20 requests, as for IPv4: numgen picks each backend with p = 1/2, so 12 all
	# to one backend (p = 1 in 2048) happened once, in the sixth guest run.
	r=$(spread "[$WAN_IP6]" "$np_web6" 20)
	log "ipv6 tcp spread over 20: $r"
	case $r in *be1=*be2=*) pass ipv6-tcp-spread-both-backends ;; *) fail ipv6-tcp-spread-both-backends "$r" ;; esac
	case $r in *none=*) fail ipv6-every-request-answered "$r" ;; *) pass ipv6-every-request-answered ;; esac
	r=$(http_get "[$WAN_IP6]" "$np_web")
	case $r in be1 | be2) fail ipv4-service-not-on-ipv6 "the IPv4 Service answered on [$WAN_IP6]:$np_web" ;;
	*) pass ipv4-service-not-on-ipv6 ;; esac

	# No endpoints: refused at once, not left to time out.  The router itself
	# listens on that port, so a refusal comes from the daemon's reject and not
	# from a closed port.
	guest 30 <<<"httpd -p $np_empty -h /srv/www && sleep 0.5 && wget -q -O - http://127.0.0.1:$np_empty/" >&2 || true
	t0=$(date +%s%N)
	in_client curl -s --max-time 5 "http://$WAN_IP:$np_empty/" >/dev/null 2>&1 && r=0 || r=$?
	t1=$(date +%s%N)
	ms=$(((t1 - t0) / 1000000))
	if [ "$r" = 7 ] && [ "$ms" -lt 2000 ]; then
		pass "reject-without-endpoints (${ms} ms)"
	else
		fail reject-without-endpoints "curl exit $r after ${ms} ms (want 7, refused, < 2000 ms; 0 means the router's own listener answered)"
	fi

	out=$(guest 30 <<<'nft list table inet nodeportd' 2>&1) && r=0 || r=$?
	echo "$out" >"$RUN/$ARCH/ruleset.nft"
	if [ "$r" = 0 ] && grep -q "$np_web" <<<"$out"; then pass nft-table-present; else fail nft-table-present "nft status $r"; fi

	# Self-healing: flush everything, the daemon must put its table back.
	guest 30 <<<'nft flush ruleset; nft list ruleset | wc -l' >/dev/null || true
	t0=$(date +%s)
	if wait_answer "$WAN_IP" "$np_web" 30; then
		pass "self-heal-after-flush ($(($(date +%s) - t0)) s)"
	else
		fail self-heal-after-flush "no answer 30 s after nft flush ruleset"
	fi

	# Outside nodeport_addresses: no NodePort there.
	guest 30 <<<"ip addr add $WAN_IP_OUTSIDE/24 dev wan" >/dev/null || true
	r=$(http_get "$WAN_IP_OUTSIDE" "$np_web" 3)
	case $r in be1 | be2) fail nodeport-not-on-excluded-address "answered '$r' on $WAN_IP_OUTSIDE" ;;
	*) pass nodeport-not-on-excluded-address ;; esac
	guest 30 <<<"ip addr del $WAN_IP_OUTSIDE/24 dev wan" >/dev/null || true

	# The WAN address moves inside the configured CIDR (as after a DHCP renumbering;
	# removing first, since deleting a primary address also removes its
	# secondaries): NodePorts follow.
	guest 30 <<<"ip addr del $WAN_IP/24 dev wan && ip addr add $WAN_IP_NEW/24 dev wan" >/dev/null || true
	if wait_answer "$WAN_IP_NEW" "$np_web" 30; then pass nodeport-follows-new-address; else
		fail nodeport-follows-new-address "no answer on $WAN_IP_NEW:$np_web"
	fi
	r=$(http_get "$WAN_IP" "$np_web" 2)
	case $r in be1 | be2) fail old-address-stops "still answered '$r' on $WAN_IP" ;; *) pass old-address-stops ;; esac
	guest 30 <<<"ip addr del $WAN_IP_NEW/24 dev wan && ip addr add $WAN_IP/24 dev wan" >/dev/null || true
}

# ------------------------------------------------------------------ benchmark

BENCH_SERVICES=${NP_QEMU_BENCH_SERVICES:-1000}
BENCH_ENDPOINTS=3
BENCH_BATCH=${NP_QEMU_BENCH_BATCH:-100}

# Driven from here one batch at a time: progress shows in the log, and a
# guest that runs out of memory half-way still tells how far it got.
run_bench() {
	local out first=0
	if ! guest 600 <<<"sh /qemu/bench.sh prepare $BENCH_SERVICES $BENCH_ENDPOINTS $BENCH_BATCH" >&2; then
		fail benchmark "prepare failed"
		return 0
	fi
	while [ "$first" -lt "$BENCH_SERVICES" ]; do
		if ! out=$(guest 600 <<<"sh /qemu/bench.sh apply $first"); then
			echo "$out" >&2
			fail benchmark "batch from s$first failed"
			return 0
		fi
		log "bench $out"
		first=$((first + BENCH_BATCH))
	done
	out=$(guest 900 <<<'sh /qemu/bench.sh finish') || true
	echo "$out" >&2
	BENCH_LINE=$(grep '^@@BENCH ' <<<"$out" | tail -n1 | cut -d' ' -f2- || true)
	if [ -n "$BENCH_LINE" ]; then
		pass benchmark
		printf '| %s | %s | %s | %s |\n' "$ARCH" "${BENCH_SERVICES}x$BENCH_ENDPOINTS" "$BENCH_LINE" "$KVER" >>"$BENCH_OUT"
	else
		fail benchmark "no result"
	fi
}

# ------------------------------------------------------------------ main

run_arch() {
	local t0 f line
	t0=$(date +%s)
	# A subshell: its own traps, so a timeout or ^C still removes its guest,
	# namespaces and taps.
	trap cleanup_arch EXIT
	trap 'exit 130' INT TERM
	arch_vars "$1"
	mkdir -p "$RUN/$ARCH"
	fetch_guest
	build_initramfs
	start_guest
	check_plumbing
	[ "${NP_QEMU_NO_DAEMON:-0}" != 1 ] && check_payload
	if [ "${NP_QEMU_NO_DAEMON:-0}" != 1 ] && start_daemon; then
		check_dataplane
		if [ "$BENCH" = 1 ]; then run_bench; fi
	fi
	if [ "${NP_QEMU_HOLD:-0}" = 1 ]; then
		# Development aid: each line written to debug.in runs in the guest.
		mkfifo "$RUN/$ARCH/debug.in"
		log "holding; run guest commands with: echo CMD > $RUN/$ARCH/debug.in; output in debug.out; 'quit' ends"
		while read -r line <"$RUN/$ARCH/debug.in"; do
			[ "$line" = quit ] && break
			{ echo "# $line"; guest 120 <<<"$line"; echo "# status $?"; } >>"$RUN/$ARCH/debug.out" 2>&1
		done
	fi
	guest 30 <<<'cat /tmp/nodeportd.log /tmp/nodeportd.restart.log 2>/dev/null | tail -n 200' >"$RUN/$ARCH/nodeportd.log" 2>&1 || true
	mkdir -p "$WORK/logs"
	for f in console.log nodeportd.log ruleset.nft; do
		[ -f "$RUN/$ARCH/$f" ] && cp "$RUN/$ARCH/$f" "$WORK/logs/$ARCH-$f"
	done
	if grep -q "^FAIL $ARCH " "$RUN/results"; then
		log "last lines of the daemon's log:"
		tail -n 40 "$RUN/$ARCH/nodeportd.log" >&2 || true
	fi
	cleanup_arch
	touch "$RUN/$ARCH/resends" "$RUN/$ARCH/chaos"
	log "console lines resent: $(wc -l <"$RUN/$ARCH/resends") (chaos injected: $(wc -l <"$RUN/$ARCH/chaos"))"
	echo "TIME $ARCH $(($(date +%s) - t0)) boot=${BOOT_SECS:-?} resent=$(wc -l <"$RUN/$ARCH/resends")" >>"$RUN/results"
	log "done in $(($(date +%s) - t0)) s (boot ${BOOT_SECS:-?} s); logs in $WORK/logs/$ARCH-*"
}

main() {
	[ "$(id -u)" = 0 ] || die "needs root (network namespaces, taps)"
	ARCHES=("$@")
	[ ${#ARCHES[@]} -gt 0 ] || ARCHES=("${ALL_ARCHES[@]}")
	for a in "${ARCHES[@]}"; do arch_vars "$a"; done
	ARCH=""
	mkdir -p "$WORK"
	RUN=$(mktemp -d "$WORK/run.XXXXXX")
	trap cleanup_all EXIT
	trap 'exit 130' INT TERM
	install_host_tools
	: >"$RUN/results"
	for a in "${ARCHES[@]}"; do
		# One guest failing to boot must not hide the others' results.
		if ! (run_arch "$a"); then
			echo "FAIL $a run-aborted" >>"$RUN/results"
		fi
	done
	ARCH=""
	echo "== QEMU router tests =="
	grep -E '^(FAIL|TIME)' "$RUN/results" || true
	local passed failed
	passed=$(grep -c '^PASS' "$RUN/results" || true)
	failed=$(grep -c '^FAIL' "$RUN/results" || true)
	echo "qemu: $passed passed, $failed failed"
	[ "$failed" = 0 ]
}

main "$@"
