#!/bin/sh
# Footprint benchmark, run inside the emulated router by tests/qemu/run.sh:
#   sh /qemu/bench.sh SERVICES ENDPOINTS_PER_SERVICE
# Needs a running daemon whose pid is in /tmp/nodeportd.pid and whose config's
# path is in /tmp/nodeportd.cfgpath.  Prints "@@BENCH <markdown table cells>" last.
set -u
n=${1:-1000}
per=${2:-3}
batch=100

# busybox date has no %N: /proc/uptime counts in 10 ms steps.
ms() {
	read -r up _ </proc/uptime
	echo $((${up%.*}${up#*.} * 10))
}
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$(cat /tmp/nodeportd.pid)/status"; }
avail() { awk '/^MemAvailable:/ { print $2 }' /proc/meminfo; }
fail() {
	echo "bench: $*"
	tail -n 20 /tmp/nodeportd.log
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
	awk -v first="$1" -v last="$2" -v per="$per" 'BEGIN {
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

pid=$(cat /tmp/nodeportd.pid)
kill -0 "$pid" || fail "daemon not running"
wait_in_sync >/dev/null || fail "never in sync before the benchmark"
rss_idle=$(rss)
avail_idle=$(avail)

i=0
while [ "$i" -lt "$n" ]; do
	j=$((i + batch))
	[ "$j" -le "$n" ] || j=$n
	gen "$i" "$j" >"/tmp/bench-$i.json"
	i=$j
done

t0=$(ms)
i=0
while [ "$i" -lt "$n" ]; do
	nodeportctl apply -f "/tmp/bench-$i.json" >/dev/null || fail "apply of batch $i failed"
	i=$((i + batch))
	echo "applied $i services after $(($(ms) - t0)) ms, MemAvailable $(avail) kB, VmRSS $(rss) kB"
done
t1=$(ms)
last=$(wait_in_sync) || fail "not in sync after applying $n services"
t2=$(ms)
rm -f /tmp/bench-*.json
sleep 1
rss_full=$(rss)
avail_full=$(avail)
rules=$(nft list table inet nodeportd 2>/dev/null | wc -l)

# A full sync from scratch: the daemon restarts on its persisted state with no
# table in the kernel, as after a reboot.
kill "$pid"
i=0
while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 300 ]; do
	sleep 0.1
	i=$((i + 1))
done
nft delete table inet nodeportd 2>/dev/null
t3=$(ms)
nodeportd --config "$(cat /tmp/nodeportd.cfgpath)" --log stderr </dev/null >>/tmp/nodeportd.log 2>&1 &
echo $! >/tmp/nodeportd.pid
until nodeportctl status >/dev/null 2>&1; do
	kill -0 "$(cat /tmp/nodeportd.pid)" 2>/dev/null || fail "daemon died on restart"
	sleep 0.05
done
t4=$(ms)
last_restart=$(wait_in_sync) || fail "not in sync after restart"
t5=$(ms)
rss_restart=$(rss)

echo "kernel+daemon: MemAvailable ${avail_idle} kB idle, ${avail_full} kB with ${n}x${per} ($(((avail_idle - avail_full) / 1024)) MiB used)"
echo "idle VmRSS ${rss_idle} kB; ${n}x${per}: VmRSS ${rss_full} kB, apply $((t1 - t0)) ms, in sync after $((t2 - t0)) ms (daemon: ${last} ms), ${rules} nft lines"
echo "restart with state: answering after $((t4 - t3)) ms, in sync after $((t5 - t3)) ms (daemon: ${last_restart} ms), VmRSS ${rss_restart} kB"
startup=$(cat /tmp/startup_ms 2>/dev/null || echo "?")
# Columns: idle RSS | RSS loaded | start-up | apply | in sync (daemon's sync) |
# restart to in sync (daemon's sync) | MemAvailable drop
echo "@@BENCH ${rss_idle} kB | ${rss_full} kB | ${startup} ms | $((t1 - t0)) ms | $((t2 - t0)) ms (${last} ms) | $((t5 - t3)) ms (${last_restart} ms) | $(((avail_idle - avail_full) / 1024)) MiB"
