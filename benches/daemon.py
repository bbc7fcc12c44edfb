#!/usr/bin/env python3
"""Helper of benches/daemon.sh (a benchmark, not a test): generates the objects, talks
JSON-RPC to the daemon's Unix socket, and takes the timings. Standard library only.

Subcommands (each prints one JSON object on stdout):
  load  --socket S --n N [--affinity P] [--ranges P]
                                          load N Services + N EndpointSlices over one connection;
                                          P % of them with sessionAffinity: ClientIP (--affinity)
                                          or LoadBalancers with loadBalancerSourceRanges (--ranges)
  run   --netns NS --bin B --config C --socket S --n N --changes K
                                          start the daemon in NS, time its first full sync
                                          and `status` meanwhile, read its RSS, then time K
                                          one-endpoint changes to their nf_tables commit (with
                                          --affinity/--ranges as at load: alternately of a plain
                                          service and of one of those, summed up apart)
  dryrun --netns NS --bin B --config C --socket S --out FILE
                                          start `nodeportd --dry-run`, keep the first ruleset
  kp    --out FILE --n N                  the same services as nft text in the kube-proxy shape (the anchor)
  nftf  --netns NS --file F --repeat R --label kp|ours
                                          time `nft -f F` into the (fresh) namespace NS
  report RESULTS.jsonl                    the markdown tables for docs/benchmarks.md
  costreport RESULTS.jsonl                the tables of benches/percost.sh (per-service objects)
"""

import argparse
import ctypes
import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

CLONE_NEWNET = 0x40000000
NAMESPACE = "default"
# Endpoints live in 198.18.16.0 + k; replacement endpoints from 198.18.192.0 on, so an
# address seen after a change can only come from that change (both inside 198.18.0.0/15).
EP_BASE = (198 << 24) | (18 << 16) | (16 << 8)
NEW_EP_BASE = (198 << 24) | (18 << 16) | (192 << 8)
EP_PORT = 8080
NODEPORT_EVERY = 10  # every 10th service is a NodePort (the range holds 2768 ports)
# --ranges: LoadBalancer ingress IPs from 198.18.140.0 on (past the endpoints' 198.18.133.x).
LB_BASE = (198 << 24) | (18 << 16) | (140 << 8)
SOURCE_RANGES = ["198.18.0.0/16", "10.0.0.0/8"]


def ip4(n):
    return ".".join(str((n >> s) & 255) for s in (24, 16, 8, 0))


def enter_netns(name):
    """Moves this process (still single-threaded) into a named network namespace, so
    the daemon and every `nft` it starts run there without `ip netns exec`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


def svc_name(i):
    return f"bench-{i:05d}"


def in_share(i, pct):
    """Whether service i is among the `pct` % (0-100) that get a behaviour: i + 1 = 0..pct-1
    modulo 100, so 1 % is i = 99, 199, ... and 10 % holds one NodePort in ten, as the rest."""
    return (i + 1) % 100 < pct


def service(i, affinity=0, ranges=0):
    s = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": svc_name(i), "namespace": NAMESPACE},
        "spec": {
            "type": "NodePort" if i % NODEPORT_EVERY == 0 else "ClusterIP",
            "selector": {"app": svc_name(i)},
            "ports": [{"name": "http", "port": 80, "targetPort": EP_PORT, "protocol": "TCP"}],
        },
    }
    if in_share(i, affinity):
        s["spec"]["sessionAffinity"] = "ClientIP"
    if in_share(i, ranges):
        # A LoadBalancer with the ingress its controller assigned (the one part of `status`
        # the daemon takes from a request); NodePorts only where the service had one.
        s["spec"].update(type="LoadBalancer", loadBalancerSourceRanges=SOURCE_RANGES,
                         allocateLoadBalancerNodePorts=i % NODEPORT_EVERY == 0)
        s["status"] = {"loadBalancer": {"ingress": [{"ip": ip4(LB_BASE + i)}]}}
    return s


def slice_(i, addrs):
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{svc_name(i)}-abcde",
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": svc_name(i)},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": EP_PORT, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [a], "conditions": {"ready": True, "serving": True, "terminating": False},
             "nodeName": "bench-node"}
            for a in addrs
        ],
    }


def initial_endpoints(i):
    return [ip4(EP_BASE + 3 * i + j) for j in range(3)]


class Rpc:
    """One connection; several requests per line stream."""

    def __init__(self, path, timeout=120.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.next_id = 1

    def _line(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def send_many(self, calls):
        """Sends every request at once, then reads every answer; raises on an error."""
        lines = []
        for method, params in calls:
            lines.append(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                     "params": params}, separators=(",", ":")))
            self.next_id += 1
        self.sock.sendall(("\n".join(lines) + "\n").encode())
        out = []
        for (method, _), _l in zip(calls, lines):
            r = self._line()
            if "error" in r:
                raise RuntimeError(f"{method}: {r['error']}")
            out.append(r["result"])
        return out

    def call(self, method, params=None):
        return self.send_many([(method, params or {})])[0]

    def close(self):
        self.sock.close()


def connect_retry(path, deadline):
    while True:
        try:
            return Rpc(path)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def wait_settled(rpc, quiet=0.5, limit=1800.0):
    """Waits until the data plane is in sync and no sync ran for `quiet` seconds."""
    end = time.monotonic() + limit
    last, since = None, time.monotonic()
    while time.monotonic() < end:
        dp = rpc.call("status")["dataplane"]
        if dp.get("lastError"):
            raise RuntimeError(f"sync failed: {dp['lastError']}")
        if dp["generation"] != last:
            last, since = dp["generation"], time.monotonic()
        elif dp["inSync"] and dp["generation"] >= 1 and time.monotonic() - since >= quiet:
            return dp
        time.sleep(0.05)
    raise TimeoutError("the data plane did not settle")


def cmd_load(a):
    rpc = connect_retry(a.socket, time.monotonic() + 600)
    rpc.sock.settimeout(600.0)
    t0 = time.perf_counter()
    batch = 200
    for start in range(0, a.n, batch):
        idx = range(start, min(a.n, start + batch))
        rpc.send_many([("service.apply", {"object": service(i, a.affinity, a.ranges)}) for i in idx])
        rpc.send_many([("endpoints.apply", {"object": slice_(i, initial_endpoints(i))}) for i in idx])
    t_api = time.perf_counter() - t0
    dp = wait_settled(rpc)
    st = rpc.call("status")
    rpc.close()
    json.dump({"n": a.n, "affinity": a.affinity, "ranges": a.ranges, "load_api_s": t_api, "load_generations": dp["generation"],
               "services": st["objects"]["services"], "endpointSlices": st["objects"]["endpointSlices"]},
              sys.stdout)
    print()


def rss_kib(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
    return out


def start_daemon(bin_, config, extra, out, log):
    return subprocess.Popen([bin_, "--config", config, *extra], stdout=out, stderr=log)


def stop_daemon(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def pct(xs, q):
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(round(q / 100.0 * len(s) + 0.5)) - 1))]


class Commits:
    """Times nf_tables commits: a netlink socket in the NFNLGRP_NFTABLES group gets a
    NEWGEN message at the end of every transaction (the daemon mutes its own event
    socket, not this one). `after(t)` waits for the first commit seen after `t`."""

    NETLINK_NETFILTER = 12
    NFNLGRP_NFTABLES = 7
    NEWGEN = (10 << 8) | 15

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, self.NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((0, 1 << (self.NFNLGRP_NFTABLES - 1)))
        self.times = []
        self.lock = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        import struct
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except OSError:
                continue  # ENOBUFS: events lost; NEWGENs after it still come
            now = time.perf_counter()
            off = 0
            while off + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if kind == self.NEWGEN:
                    with self.lock:
                        self.times.append(now)
                        self.lock.notify_all()
                off += max((length + 3) & ~3, 16)

    def after(self, t, limit=120.0):
        end = time.perf_counter() + limit
        with self.lock:
            while True:
                later = [x for x in self.times if x > t]
                if later:
                    return later[0]
                if time.perf_counter() > end:
                    return None
                self.lock.wait(0.05)


def cmd_run(a):
    enter_netns(a.netns)
    log = open(a.log, "ab")
    t0 = time.perf_counter()
    p = start_daemon(a.bin, a.config, [], log, log)
    try:
        rpc = connect_retry(a.socket, time.monotonic() + 600)
        t_socket = time.perf_counter() - t0
        # `status` as fast as one client asks, while the first sync runs.
        status_ms = []
        while True:
            ts = time.perf_counter()
            dp = rpc.call("status")["dataplane"]
            status_ms.append((time.perf_counter() - ts) * 1e3)
            if dp.get("lastError"):
                raise RuntimeError(f"first sync failed: {dp['lastError']}")
            if dp["inSync"] and dp["generation"] >= 1:
                break
            if time.perf_counter() - t0 > 600:
                raise TimeoutError("the daemon did not sync its restored objects within 600 s")
        t_sync = time.perf_counter() - t0
        first = dict(dp)
        # Anything the start caused on its own (an event overrun resync) ends first.
        settled = wait_settled(rpc, quiet=1.0, limit=600.0)
        time.sleep(2.0)  # idle
        mem = rss_kib(p.pid)

        # One-endpoint changes, spread over the services, each timed to its commit;
        # alternately of a plain service and of one with affinity or source ranges.
        commits = Commits()
        rounds = []
        eps = {}
        plain, special = [], []
        for i in range(a.n):
            (special if in_share(i, a.affinity) or in_share(i, a.ranges) else plain).append(i)
        kinds = [k for k in (plain, special) if k]
        for c in range(a.changes):
            kind = kinds[c % len(kinds)]
            i = kind[(c * 7919 + 13) % len(kind)]
            cur = eps.setdefault(i, initial_endpoints(i))
            cur[c % 3] = ip4(NEW_EP_BASE + c)
            g0 = wait_settled(rpc, quiet=0.3, limit=600.0)["generation"]
            ts = time.perf_counter()
            res = rpc.call("endpoints.apply", {"object": slice_(i, cur)})
            t_answer = time.perf_counter()
            if res["action"] != "configured":
                raise RuntimeError(f"endpoints.apply of {svc_name(i)}: {res['action']}")
            t_commit = commits.after(ts)
            if t_commit is None:
                raise RuntimeError(f"no nf_tables commit after the change of {svc_name(i)}")
            while True:
                dp = rpc.call("status")["dataplane"]
                if dp["generation"] > g0:
                    break
                time.sleep(0.0005)
            rounds.append({"service": i, "special": kind is special, "rtt_ms": (t_answer - ts) * 1e3,
                           "commit_ms": (t_commit - ts) * 1e3,
                           "answer_to_commit_ms": (t_commit - t_answer) * 1e3,
                           "sync_ms": dp["lastSyncMillis"], "messages": dp["lastMessages"],
                           "full": dp["fullSyncs"] != settled["fullSyncs"]})
        st = rpc.call("status")
        mem_after = rss_kib(p.pid)
        rpc.close()
    finally:
        stop_daemon(p)

    def summary(key, which=None):
        xs = [r[key] for r in rounds if which is None or r["special"] == which]
        if not xs:  # --changes 0: the start only (benches/start.sh)
            return None
        return {"p50": pct(xs, 50), "p95": pct(xs, 95), "max": max(xs)}

    json.dump({
        "n": a.n, "affinity": a.affinity, "ranges": a.ranges,
        "start_to_socket_ms": t_socket * 1e3,
        "start_to_in_sync_ms": t_sync * 1e3,
        "first_sync_ms": first["lastSyncMillis"],
        "first_messages": first["lastMessages"],
        "status_during_sync_ms": {"n": len(status_ms), "p50": pct(status_ms, 50), "p99": pct(status_ms, 99),
                                  "max": max(status_ms)},
        "rss_idle_kib": mem["VmRSS"], "hwm_kib": mem["VmHWM"],
        "rss_after_kib": mem_after["VmRSS"], "hwm_after_kib": mem_after["VmHWM"],
        "changes": len(rounds),
        "rtt_ms": summary("rtt_ms"), "commit_ms": summary("commit_ms"),
        "answer_to_commit_ms": summary("answer_to_commit_ms"),
        "sync_ms": summary("sync_ms"),
        "messages": sorted({r["messages"] for r in rounds}),
        "by_kind": {name: {"changes": sum(r["special"] == w for r in rounds),
                           "answer_to_commit_ms": summary("answer_to_commit_ms", w),
                           "commit_ms": summary("commit_ms", w), "sync_ms": summary("sync_ms", w),
                           "messages": sorted({r["messages"] for r in rounds if r["special"] == w})}
                    for name, w in (("plain", False), ("special", True))},
        "syncs_at_start": settled["generation"], "full_syncs_at_start": settled["fullSyncs"],
        "last_start_sync_ms": settled["lastSyncMillis"],
        "full_syncs_during_changes": st["dataplane"]["fullSyncs"] - settled["fullSyncs"],
        "rounds": rounds,
    }, sys.stdout)
    print()


def kp_ruleset(n):
    """The anchor: the same services in today's kube-proxy nftables shape (what nodeportd
    programmed before data plane v2): a `service-ips` verdict map to one chain per
    service, an anonymous `numgen` verdict map per service to one chain per endpoint."""
    o = ["table inet nodeportd {",
         "\tmap service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }",
         "\tmap service-nodeports { type inet_proto . inet_service : verdict; }",
         "\tchain mark-for-masquerade { meta mark set meta mark | 0x00004000; }",
         "\tchain masquerading {\n\t\tmeta mark & 0x00004000 == 0x00000000 return\n"
         "\t\tmeta mark set meta mark & 0xffffbfff\n\t\tmasquerade fully-random\n\t}"]
    svc_ips, nodeports = [], []
    for i in range(n):
        base = f"default/{svc_name(i)}/tcp/http"
        eps = initial_endpoints(i)
        for ip in eps:
            o.append(f"\tchain ep4-{base}__{ip}/{EP_PORT} {{\n\t\tip saddr {ip} jump mark-for-masquerade\n"
                     f"\t\tct mark set ct mark | 0x00008000\n\t\tmeta l4proto tcp dnat ip to {ip}:{EP_PORT}\n\t}}")
        vm = ", ".join(f"{j} : goto ep4-{base}__{ip}/{EP_PORT}" for j, ip in enumerate(eps))
        o.append(f"\tchain svc4-{base} {{\n\t\tnumgen random mod {len(eps)} vmap {{ {vm} }}\n\t}}")
        cip = ip4((198 << 24) | (19 << 16) | (i + 1))
        svc_ips.append(f"{cip} . tcp . 80 : goto svc4-{base}")
        if i % NODEPORT_EVERY == 0:
            o.append(f"\tchain ext4-{base} {{\n\t\tjump mark-for-masquerade\n\t\tgoto svc4-{base}\n\t}}")
            nodeports.append(f"tcp . {30000 + i // NODEPORT_EVERY} : goto ext4-{base}")
    o.append("\tchain services {\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n"
             "\t\tmeta l4proto . th dport vmap @service-nodeports\n\t}")
    o.append("\tchain nat-prerouting { type nat hook prerouting priority dstnat; policy accept; jump services; }")
    o.append("\tchain nat-output { type nat hook output priority -100; policy accept; jump services; }")
    o.append("\tchain nat-postrouting { type nat hook postrouting priority srcnat; policy accept; jump masquerading; }")
    o.append("}")
    for name, els in (("service-ips", svc_ips), ("service-nodeports", nodeports)):
        for k in range(0, len(els), 1000):
            o.append(f"add element inet nodeportd {name} {{ {', '.join(els[k:k + 1000])} }}")
    return "\n".join(o) + "\n"


def cmd_kp(a):
    with open(a.out, "w") as f:
        f.write(kp_ruleset(a.n))
    json.dump({"n": a.n, "kp_bytes": os.path.getsize(a.out)}, sys.stdout)
    print()


def cmd_dryrun(a):
    enter_netns(a.netns)
    with open(a.out, "wb") as out, open(a.log, "ab") as log:
        p = start_daemon(a.bin, a.config, ["--dry-run"], out, log)
        try:
            rpc = connect_retry(a.socket, time.monotonic() + 600)
            wait_settled(rpc, quiet=0.2, limit=600.0)
            rpc.close()
        finally:
            stop_daemon(p)
    # Keep the first ruleset only (a later sync would print another).
    with open(a.out) as f:
        lines = f.read().splitlines(keepends=True)
    start = next(k for k, line in enumerate(lines) if line.startswith("table "))
    end = next(k for k in range(start, len(lines)) if lines[k] == "}\n")
    with open(a.out, "w") as f:
        f.writelines(lines[start:end + 1])
    json.dump({"n": a.n, "lines": end + 1 - start}, sys.stdout)
    print()


def cmd_nftf(a):
    enter_netns(a.netns)
    times = []
    for _ in range(a.repeat):
        subprocess.run(["nft", "delete", "table", "inet", "nodeportd"], capture_output=True, check=False)
        t = time.perf_counter()
        r = subprocess.run(["nft", "-f", a.file], capture_output=True, text=True, check=False)
        times.append((time.perf_counter() - t) * 1e3)
        if r.returncode != 0:
            raise RuntimeError(f"nft -f {a.file}: {r.stderr[:2000]}")
    # Same table again, replaced in one transaction (kube-proxy's full resync shape).
    with open(a.file) as f:
        body = f.read()
    replace = a.file + ".replace"
    with open(replace, "w") as f:
        f.write("table inet nodeportd\ndelete table inet nodeportd\n" + body)
    t = time.perf_counter()
    r = subprocess.run(["nft", "-f", replace], capture_output=True, text=True, check=False)
    t_replace = (time.perf_counter() - t) * 1e3
    if r.returncode != 0:
        raise RuntimeError(f"nft -f {replace}: {r.stderr[:2000]}")
    maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = a.label + "_"
    json.dump({"n": a.n, p + "nft_f_ms": sorted(times), p + "nft_f_replace_ms": t_replace, p + "nft_maxrss_kib": maxrss,
               p + "bytes": os.path.getsize(a.file)}, sys.stdout)
    print()


def cmd_report(a):
    rows = [json.loads(line) for line in open(a.results) if line.strip()]
    by_n = {}
    for r in rows:
        by_n.setdefault(r["n"], {}).update(r)
    ns = sorted(by_n)
    f1 = lambda x: f"{x:.1f}"  # noqa: E731
    f2 = lambda x: f"{x:.2f}"  # noqa: E731
    print("Full sync from process start (state read from disk) against `nft -f` of the same services in the"
          " kube-proxy shape (the anchor), one run:\n")
    print("| services | start → in sync (ms) | `nft -f` kube-proxy shape (ms, median) | ratio |"
          " `nft -f` of our ruleset (ms) | daemon's lastSyncMillis | messages | `status` during the sync p50 / p99 / max (ms) |"
          " RSS at rest (KiB) | per service (KiB) | peak RSS (KiB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in ns:
        r = by_n[n]
        kp = statistics.median(r["kp_nft_f_ms"])
        ours = statistics.median(r["ours_nft_f_ms"])
        st = r["status_during_sync_ms"]
        print(f"| {n} | {f1(r['start_to_in_sync_ms'])} | {f1(kp)} | {kp / r['start_to_in_sync_ms']:.1f}× |"
              f" {f1(ours)} | {r['first_sync_ms']} | {r['first_messages']} |"
              f" {f2(st['p50'])} / {f2(st['p99'])} / {f2(st['max'])} ({st['n']} calls) |"
              f" {r['rss_idle_kib']} | {r['rss_idle_kib'] / n:.2f} | {r['hwm_kib']} |")
    print("\nOne endpoint of one service changed with `endpoints.apply`, "
          f"{by_n[ns[0]]['changes']} changes per size, milliseconds, p50 / p95 (max); the commit is the"
          " kernel's NEWGEN notification:\n")
    print("| services | API round trip | call → committed | API answer → committed | daemon's lastSyncMillis |"
          " lastMessages |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in ns:
        r = by_n[n]
        s = lambda k: f"{f2(r[k]['p50'])} / {f2(r[k]['p95'])} ({f2(r[k]['max'])})"  # noqa: E731
        msgs = ", ".join(str(m) for m in r["messages"])
        print(f"| {n} | {s('rtt_ms')} | {s('commit_ms')} | {s('answer_to_commit_ms')} | {s('sync_ms')} | {msgs} |")


def cmd_costreport(a):
    """benches/percost.sh's tables: one row per (services, behaviour, share), the rounds of
    a row side by side; ratios against the 0 % row of the same size and round."""
    runs = [json.loads(line) for line in open(a.results) if line.strip()]
    runs = [r for r in runs if "first_sync_ms" in r]
    rows = {}
    for r in runs:
        what = "affinity" if r["affinity"] else "ranges" if r["ranges"] else "none"
        rows.setdefault((r["n"], what, r["affinity"] or r["ranges"]), []).append(r)
    base = {n: rs for (n, what, _), rs in rows.items() if what == "none"}
    order = lambda kv: (-kv[0][0], kv[0][1] != "none", kv[0][1], kv[0][2])  # noqa: E731
    j = lambda xs, f="{:.0f}": " / ".join(f.format(x) for x in xs)  # noqa: E731
    print("Full sync from process start (state read from disk); rounds separated by /:\n")
    print("| services | per-service objects for | share | start → in sync (ms) | worker's full sync (ms) |"
          " × the 0 % row | messages |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for (n, what, share), rs in sorted(rows.items(), key=order):
        ratio = [r["first_sync_ms"] / max(1, x["first_sync_ms"]) for r, x in zip(rs, base.get(n, []))]
        print(f"| {n} | {what} | {share} % | {j(r['start_to_in_sync_ms'] for r in rs)} |"
              f" {j(r['first_sync_ms'] for r in rs)} | {j(ratio, '{:.2f}') + '×' if ratio else '—'} |"
              f" {j(r['first_messages'] for r in rs)} |")
    print("\nOne endpoint of one service changed (`endpoints.apply`), API answer → kernel commit (NEWGEN),"
          " ms, p50 / p95 (max), all rounds together; a plain service and one with the behaviour:\n")
    print("| services | objects for | share | plain: answer → commit | plain: messages |"
          " with it: answer → commit | with it: messages | with it: worker's sync p50 (ms) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for (n, what, share), rs in sorted(rows.items(), key=order):
        cells = []
        for kind in ("plain", "special"):
            xs = [x for r in rs for x in r["rounds"] if x["special"] == (kind == "special")]
            if not xs:
                cells += ["—", "—"] + (["—"] if kind == "special" else [])
                continue
            t = [x["answer_to_commit_ms"] for x in xs]
            cells += [f"{pct(t, 50):.2f} / {pct(t, 95):.2f} ({max(t):.2f})",
                      ", ".join(str(m) for m in sorted({x["messages"] for x in xs}))]
            if kind == "special":
                cells.append(f"{pct([x['sync_ms'] for x in xs], 50)}")
        print(f"| {n} | {what} | {share} % | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    shares = argparse.ArgumentParser(add_help=False)
    shares.add_argument("--affinity", type=int, default=0, help="%% of services with sessionAffinity: ClientIP")
    shares.add_argument("--ranges", type=int, default=0, help="%% LoadBalancers with loadBalancerSourceRanges")
    p = sub.add_parser("load", parents=[shares])
    p.add_argument("--socket", required=True)
    p.add_argument("--n", type=int, required=True)
    p = sub.add_parser("run", parents=[shares])
    for k in ("--netns", "--bin", "--config", "--socket", "--log"):
        p.add_argument(k, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--changes", type=int, default=25)
    p = sub.add_parser("dryrun")
    for k in ("--netns", "--bin", "--config", "--socket", "--out", "--log"):
        p.add_argument(k, required=True)
    p.add_argument("--n", type=int, required=True)
    p = sub.add_parser("kp")
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, required=True)
    p = sub.add_parser("nftf")
    p.add_argument("--netns", required=True)
    p.add_argument("--file", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--label", default="kp", help="kp: the kube-proxy shape (the anchor); ours: the dry-run text")
    p = sub.add_parser("report")
    p.add_argument("results")
    p = sub.add_parser("costreport")
    p.add_argument("results")
    a = ap.parse_args()
    {"load": cmd_load, "run": cmd_run, "kp": cmd_kp, "dryrun": cmd_dryrun, "nftf": cmd_nftf, "report": cmd_report,
     "costreport": cmd_costreport}[a.cmd](a)


if __name__ == "__main__":
    main()
