#!/bin/busybox sh
# shellcheck shell=dash
# /init of the emulated router (see tests/qemu/run.sh).
#
# Kernel command-line words key=value reach us as environment variables:
#   np_wan_mac np_lan_mac   MACs of the two NICs (probe order differs per machine)
#   np_wan_cidr np_lan_cidr addresses to put on them
#
# After the network is up it prints "@@READY" and serves a command channel on
# the console: "@@D <tag> <base64>" lines accumulate a script (each answered
# "@@A <tag>"), "@@X <id> <secs>" runs it and answers "@@BEGIN <id>", its output, "@@END <id> <status>".
# The console is switched to raw mode without echo so that the host reads only
# what the commands print.

/bin/busybox mkdir -p /proc /sys /dev /tmp /run /var/log /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
ln -s /run /var/run
# Only emergencies on the console: kernel chatter would corrupt command output.
echo 1 > /proc/sys/kernel/printk
hostname router

say() { echo "@@LOG $*"; }
: "${np_wan_mac:=}" "${np_lan_mac:=}" "${np_wan_cidr:=}" "${np_lan_cidr:=}"

kver=$(uname -r)
while read -r ko; do
	[ -n "$ko" ] || continue
	insmod "/lib/modules/$kver/$ko" 2>/tmp/insmod.err || say "insmod $ko failed: $(cat /tmp/insmod.err)"
done < /etc/qemu/modules

# Name the NICs by MAC: wan and lan.
for dev in /sys/class/net/*; do
	name=${dev##*/}
	mac=$(cat "$dev/address")
	if [ "$mac" = "$np_wan_mac" ]; then
		ip link set dev "$name" name wan
	elif [ "$mac" = "$np_lan_mac" ]; then
		ip link set dev "$name" name lan
	fi
done
ip link set lo up
for nic in wan lan; do
	if [ ! -e "/sys/class/net/$nic" ]; then
		say "no $nic NIC; interfaces: $(ls /sys/class/net)"
		continue
	fi
	ip link set "$nic" up
done
[ -n "$np_wan_cidr" ] && ip addr add "$np_wan_cidr" dev wan
[ -n "$np_lan_cidr" ] && ip addr add "$np_lan_cidr" dev lan
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 1 > /proc/sys/net/ipv6/conf/all/forwarding 2>/dev/null

# Carrier first: a packet sent before the link is up is lost.
i=0
while [ "$i" -lt 100 ]; do
	[ "$(cat /sys/class/net/wan/carrier 2>/dev/null)" = 1 ] &&
		[ "$(cat /sys/class/net/lan/carrier 2>/dev/null)" = 1 ] && break
	sleep 0.1
	i=$((i + 1))
done

# A plain listener proves the plumbing before any NAT is involved.
mkdir -p /srv/www
echo router > /srv/www/index.html
httpd -p 8081 -h /srv/www

stty raw -echo 2>/dev/null
echo "@@READY $kver $(cat /sys/class/net/wan/carrier 2>/dev/null)$(cat /sys/class/net/lan/carrier 2>/dev/null)"

rm -f /tmp/cmd.b64
while IFS= read -r line; do
	line=$(printf '%s' "$line" | tr -d '\r')
	# shellcheck disable=SC2086 # split "tag data" and "id secs"
	case $line in
	'@@D '*)
		# "@@D <tag> <base64>": acknowledged, so that the host never has more
		# than one line in flight (the tty drops what overflows its buffer).
		set -- ${line#@@D }
		printf '%s\n' "$2" >> /tmp/cmd.b64
		echo "@@A $1"
		;;
	'@@X '*)
		set -- ${line#@@X }
		id=$1
		secs=${2:-60}
		base64 -d < /tmp/cmd.b64 > /tmp/cmd.sh 2>/dev/null
		rm -f /tmp/cmd.b64
		timeout -s KILL "$secs" sh /tmp/cmd.sh < /dev/null > /tmp/cmd.out 2>&1
		rc=$?
		echo "@@BEGIN $id"
		cat /tmp/cmd.out
		echo ""
		echo "@@END $id $rc"
		;;
	esac
done
say "console closed"
poweroff -f
