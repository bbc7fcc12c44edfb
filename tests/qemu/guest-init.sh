#!/bin/busybox sh
# shellcheck shell=dash
# /init of the emulated router (see tests/qemu/run.sh).
#
# Kernel command-line words key=value reach us as environment variables:
#   np_wan_mac np_lan_mac     MACs of the two NICs (probe order differs per machine)
#   np_wan_cidr np_lan_cidr   IPv4 addresses to put on them
#   np_wan_cidr6 np_lan_cidr6 IPv6 addresses to put on them
#
# After the network is up it prints "@@READY" and serves a command channel on
# the console. The serial line can drop or garble bytes when the guest is slow
# to read (a loaded host), so every line carries the MD5 of its payload, and
# the host sends each line again until it sees the answer:
#   "@@D <id>.<k> <md5> <base64>"  chunk k of script id; stored, answered
#                                  "@@A <id>.<k>" (again on a repeat); a bad
#                                  checksum is answered "@@N <id>.<k>"
#   "@@X <id> <secs> <n> <md5>"    run script id from chunks 1..n (md5 of
#                                  "<id> <secs> <n>"): answered "@@R <id>" at
#                                  once, then "@@BEGIN <id>", its output,
#                                  "@@END <id> <status>"; a repeat of the last
#                                  id is answered "@@R <id>" and not run again;
#                                  missing chunks are answered "@@M <id> <k>"
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
: "${np_wan_cidr6:=}" "${np_lan_cidr6:=}"

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
# IPv6 without duplicate address detection: usable at once (busybox ip has no nodad).
for nic in wan lan; do
	echo 0 > "/proc/sys/net/ipv6/conf/$nic/accept_dad" 2>/dev/null
done
[ -n "$np_wan_cidr6" ] && ip -6 addr add "$np_wan_cidr6" dev wan
[ -n "$np_lan_cidr6" ] && ip -6 addr add "$np_lan_cidr6" dev lan

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

md5() { printf '%s' "$1" | md5sum | cut -c1-32; }
rm -rf /tmp/cmd.d
mkdir -p /tmp/cmd.d
last_run=""
while IFS= read -r line; do
	line=$(printf '%s' "$line" | tr -d '\r')
	# shellcheck disable=SC2086 # split "tag sum data" and "id secs n sum"
	case $line in
	'@@D '*)
		set -- ${line#@@D }
		if [ $# -eq 3 ] && [ "$(md5 "$3")" = "$2" ]; then
			printf '%s\n' "$3" > "/tmp/cmd.d/$1"
			echo "@@A $1"
		else
			echo "@@N ${1:-?}"
		fi
		;;
	'@@X '*)
		set -- ${line#@@X }
		if [ $# -ne 4 ] || [ "$(md5 "$1 $2 $3")" != "$4" ]; then
			echo "@@N X"
			continue
		fi
		id=$1 secs=$2 n=$3
		if [ "$id" = "$last_run" ]; then
			echo "@@R $id"
			continue
		fi
		: > /tmp/cmd.b64
		k=1 missing=""
		while [ "$k" -le "$n" ]; do
			if [ -f "/tmp/cmd.d/$id.$k" ]; then
				cat "/tmp/cmd.d/$id.$k" >> /tmp/cmd.b64
			else
				missing=$k
				break
			fi
			k=$((k + 1))
		done
		if [ -n "$missing" ]; then
			echo "@@M $id $missing"
			continue
		fi
		last_run=$id
		echo "@@R $id"
		rm -f /tmp/cmd.d/*
		base64 -d < /tmp/cmd.b64 > /tmp/cmd.sh 2>/dev/null
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
