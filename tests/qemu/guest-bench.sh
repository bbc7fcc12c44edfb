#!/bin/sh
# Footprint benchmark, run inside the emulated router by tests/qemu/run.sh in
# steps, so that the host sees progress and a guest that dies mid-way still
# leaves its partial figures in the log:
#   sh /qemu/bench.sh prepare SERVICES ENDPOINTS_PER_SERVICE BATCH
#   sh /qemu/bench.sh apply FIRST          (one batch of BATCH services)
#   sh /qemu/bench.sh finish               (prints "@@BENCH <table cells>")
# Needs a running daemon whose pid is in /tmp/nodeportd.pid and whose config's
# path is in /tmp/nodeportd.cfgpath.
set -u
state=/tmp/bench.state
n=0 per=0 rss_idle=0 avail_idle=0 slab_idle=0 apply_ms=0

# busybox date has no %N: /proc/uptime counts in 10 ms steps.
ms() {
	read -r up _ </proc/uptime
	echo $((${up%.*}${up#*.} * 10))
}
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$(cat /tmp/nodeportd.pid)/status"; }
# The peak resident size since the daemon started.
hwm() { awk '/^VmHWM:/ { print $2 }' "/proc/$(cat /tmp/nodeportd.pid)/status"; }
avail() { awk '/^MemAvailable:/ { print $2 }' /proc/meminfo; }
slab() { awk '/^Slab:/ { print $2 }' /proc/meminfo; }
fail() {
	echo "bench: $*"
	tail -n 20 /tmp/nodeportd.log /tmp/nodeportd.restart.log 2>/dev/null
	exit 1
}

# Wait until the data plane reports in sync; prints the daemon's lastSyncMillis.
wait_in_sync() {
	i=0
	while [ "$i" -lt 6000 ]; do
		s=$(nodeportctl status -o json 2>/dev/null | tr -d ' \n')
		case $s in *'"inSync":true'*)
			echo "$s" | sed -n 's/.*"lastSyncMillis":\([0-9]*\).*/\1/p'
			return 0
			;;
		esac
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# One List per batch: Services and EndpointSlices, endpoints in 198.18.128.0/17.
gen() {
	awk -v first="$1" -v last="$2" -v per="$3" 'BEGIN {
		printf "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":["
		sep = ""
		for (i = first; i < last; i++) {
			printf "%s{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"s%d\",\"namespace\":\"bench\"},", sep, i
			printf "\"spec\":{\"type\":\"NodePort\",\"selector\":{\"app\":\"s%d\"},\"ports\":[{\"name\":\"http\",\"protocol\":\"TCP\",\"port\":80,\"targetPort\":8080}]}}", i
			printf ",{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\",\"metadata\":{\"name\":\"s%d-1\",\"namespace\":\"bench\",", i
			printf "\"labels\":{\"kubernetes.io/service-name\":\"s%d\"}},\"addressType\":\"IPv4\",", i
			printf "\"ports\":[{\"name\":\"http\",\"protocol\":\"TCP\",\"port\":8080}],\"endpoints\":["
			for (j = 0; j < per; j++) {
				k = i * per + j
				printf "%s{\"addresses\":[\"198.18.%d.%d\"],\"conditions\":{\"ready\":true}}", (j ? "," : ""), 128 + int(k / 250), k % 250 + 1
			}
			printf "]}"
			sep = ","
		}
		printf "]}\n"
	}'
}

case ${1:-} in
prepare)
	n=$2 per=$3 batch=$4
	kill -0 "$(cat /tmp/nodeportd.pid)" || fail "daemon not running"
	wait_in_sync >/dev/null || fail "never in sync before the benchmark"
	i=0
	while [ "$i" -lt "$n" ]; do
		j=$((i + batch))
		[ "$j" -le "$n" ] || j=$n
		gen "$i" "$j" "$per" >"/tmp/bench-$i.json"
		i=$j
	done
	{
		echo "n=$n per=$per batch=$batch"
		echo "rss_idle=$(rss) avail_idle=$(avail) slab_idle=$(slab)"
		echo "apply_ms=0"
	} >"$state"
	echo "idle: VmRSS $(rss) kB, MemAvailable $(avail) kB, Slab $(slab) kB"
	;;
apply)
	# shellcheck source=/dev/null
	. "$state"
	t=$(ms)
	nodeportctl apply -f "/tmp/bench-$2.json" >/dev/null || fail "apply of the batch from s$2 failed"
	d=$(($(ms) - t))
	echo "apply_ms=$((apply_ms + d))" >>"$state"
	rm -f "/tmp/bench-$2.json"
	echo "batch s$2: $d ms; VmRSS $(rss) kB, MemAvailable $(avail) kB, Slab $(slab) kB"
	;;
finish)
	# shellcheck source=/dev/null
	. "$state"
	t1=$(ms)
	last=$(wait_in_sync) || fail "not in sync after applying $n services"
	t2=$(ms)
	sleep 1
	rss_full=$(rss) avail_full=$(avail) slab_full=$(slab)
	rules=$(nft list table inet nodeportd 2>/dev/null | wc -l)

	# A full sync from scratch: the daemon restarts on its persisted state with
	# no table in the kernel, as after a reboot.
	pid=$(cat /tmp/nodeportd.pid)
	kill "$pid"
	i=0
	while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	nft delete table inet nodeportd 2>/dev/null
	t3=$(ms)
	# Its own log: the wait below reads it once a second, and the whole log of the
	# benchmark (~2 000 lines) took busybox grep ~37 M guest instructions a read, ~15 %
	# of the one CPU during the restart it timed (counted by a TCG plugin).
	log=/tmp/nodeportd.restart.log
	nodeportd --config "$(cat /tmp/nodeportd.cfgpath)" --log stderr </dev/null >"$log" 2>&1 &
	pid=$!
	echo "$pid" >/tmp/nodeportd.pid
	# Timed by the daemon's own clock (its log), not by probing its socket: the guest has
	# one CPU, and a `nodeportctl status` every 50 ms took ~40 % of it from the start it
	# timed (answering 4.1 s probed vs 2.5 s unprobed, the same binary and state). The
	# wait looks at the log once a second.
	i=0
	until grep -q "^nodeportd\[$pid\]: INFO: in sync " "$log"; do
		kill -0 "$pid" 2>/dev/null || fail "daemon died on restart"
		i=$((i + 1))
		[ "$i" -lt 600 ] || fail "not in sync after restart"
		sleep 1
	done
	# The process's start, in the 10 ms ticks of /proc/uptime (field 22 of its stat), so
	# that the figures below count from just before exec as t3 does.
	t_exec=$(($(cut -d' ' -f22 "/proc/$pid/stat") * 10))
	answer_ms=$(sed -n "s/^nodeportd\[$pid\]: INFO: nodeportd .* started in \([0-9]*\) ms.*/\1/p" "$log")
	sync_ms=$(sed -n "s/^nodeportd\[$pid\]: INFO: in sync \([0-9]*\) ms after start.*/\1/p" "$log")
	last_restart=$(sed -n "s/^nodeportd\[$pid\]: INFO: in sync .* the last sync \([0-9]*\) ms.*/\1/p" "$log")
	t4=$((t_exec + answer_ms))
	t5=$((t_exec + sync_ms))
	rss_restart=$(rss) hwm_restart=$(hwm)
	# The daemon's CPU time (user + system, its threads included, 10 ms ticks) against
	# the wall time it took: the rest of the restart the CPU ran others or idled.
	ticks=$(cut -d' ' -f14,15 "/proc/$pid/stat")
	utime=${ticks% *} stime=${ticks#* }
	cpu_restart=$(((utime + stime) * 10))
	cpu_split="user $((utime * 10)) ms"
	startup=$(cat /tmp/startup_ms 2>/dev/null || echo "?")
	kernel_mib=$(((avail_idle - avail_full) / 1024))

	echo "loaded ${n}x${per}: VmRSS ${rss_full} kB, MemAvailable ${avail_full} kB (${kernel_mib} MiB less than idle), Slab ${slab_idle} -> ${slab_full} kB, ${rules} lines of nft list"
	echo "applied in ${apply_ms} ms (sum of the batches), then in sync after $((t2 - t1)) ms more (daemon's last sync ${last} ms)"
	echo "restart with state: answering after $((t4 - t3)) ms, in sync after $((t5 - t3)) ms (daemon's sync ${last_restart} ms, its CPU ${cpu_restart} ms, ${cpu_split}), VmRSS ${rss_restart} kB, peak ${hwm_restart} kB"
	# Columns: idle RSS | RSS loaded | start-up | apply | in sync (daemon's sync) |
	# restart to in sync (daemon's sync) | peak RSS of the restarted daemon (its full
	# sync) | MemAvailable drop
	echo "@@BENCH ${rss_idle} kB | ${rss_full} kB | ${startup} ms | ${apply_ms} ms | $((apply_ms + t2 - t1)) ms (${last} ms) | $((t5 - t3)) ms (${last_restart} ms) | ${hwm_restart} kB | ${kernel_mib} MiB"
	;;
*)
	echo "usage: bench.sh prepare N PER BATCH | apply FIRST | finish" >&2
	exit 2
	;;
esac
