#!/usr/bin/env python3
"""API load benchmark (a benchmark, not a test; issue 12). Standard library only.

Starts `nodeportd --dry-run` (no root, no kernel changes) with its state in STATE_DIR
(use a tmpfs such as /dev/shm for "apply throughput on tmpfs", a disk directory for the
cost of real fsyncs), then measures over persistent Unix-socket connections:

  1. service.apply requests/s and p50/p99 latency with 1, 10 and 100 clients, each
     client applying its own Services in a loop;
  2. status p50/p99 from one more client (a process of its own) while 100 clients apply;
  3. `nodeportctl apply -f` of one List of N Services + N EndpointSlices, from the
     command's start until it returns (every object durable and answered), until the
     daemon answers `status` after it, and until `status` says `inSync` (the dry run's
     worker has planned and printed the table); and `status` p50/p99 from a process of
     its own while the command runs.

With --netns (root), the daemon runs without --dry-run in a network namespace the script
creates and deletes, so every apply and the List are committed to the real kernel
(ClusterIPs from 198.19.0.0/16, the node's address 198.18.0.1 on a veth link).

Usage:
  benches/api_load.py --bin target/release/nodeportd --state-dir /dev/shm/np-bench \
      [--seconds 5] [--list 10000] [--clients 1,10,100] [--netns]
Prints one JSON object per measurement, then a markdown table.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.f = self.s.makefile("rb")
        self.id = 0

    def call(self, method, params):
        self.id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}) + "\n"
        self.s.sendall(line.encode())
        reply = self.f.readline()
        if not reply:
            raise RuntimeError("connection closed")
        r = json.loads(reply)
        if "error" in r:
            raise RuntimeError(r["error"]["message"])
        return r["result"]

    def close(self):
        self.s.close()


def service(name, port):
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": port, "targetPort": 8080}]}}


def slice_for(name, i):
    a, b = (i >> 8) & 0xFF, i & 0xFF
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name + "-x", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["198.18.%d.%d" % (a, b)], "conditions": {"ready": True}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}


class Daemon:
    def __init__(self, binary, state_dir, workdir, netns=None):
        self.sock = os.path.join(workdir, "np.sock")
        self.netns = netns
        cfg = os.path.join(workdir, "np.toml")
        if netns:
            subprocess.run(["ip", "netns", "add", netns], check=True)
            # A veth pair inside the namespace (not every kernel has the dummy driver).
            for cmd in (["link", "set", "lo", "up"], ["link", "add", "np0", "type", "veth", "peer", "name", "np1"],
                        ["addr", "add", "198.18.0.1/24", "dev", "np0"], ["link", "set", "np0", "up"],
                        ["link", "set", "np1", "up"]):
                r = subprocess.run(["ip", "-n", netns] + cmd)
                if r.returncode:
                    subprocess.run(["ip", "netns", "del", netns])
                    raise RuntimeError("ip %s failed in %s" % (" ".join(cmd), netns))
            addrs, cluster, cmd = '["198.18.0.1/32"]', '["198.19.0.0/16"]', ["ip", "netns", "exec", netns, binary]
        else:
            addrs, cluster, cmd = '["127.0.0.0/8"]', '["10.96.0.0/12"]', [binary, "--dry-run"]
        with open(cfg, "w") as f:
            f.write('node_name = "bench"\nnodeport_addresses = %s\n'
                    'service_cluster_ip_ranges = %s\nlog_level = "warn"\n' % (addrs, cluster))
        self.p = subprocess.Popen(cmd + ["--config", cfg, "--socket", self.sock, "--state-dir", state_dir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                Conn(self.sock).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("daemon did not start")
                time.sleep(0.02)

    def stop(self):
        self.p.terminate()
        self.p.wait()
        if self.netns:
            subprocess.run(["ip", "netns", "del", self.netns])


def apply_load(sock, clients, seconds, tag, status_probe=False):
    """`clients` threads apply Services for `seconds`; returns (count, latencies, status latencies)."""
    stop = threading.Event()
    lat = [[] for _ in range(clients)]
    errors = []
    conns = [Conn(sock) for _ in range(clients)]
    status_lat = []

    def worker(i):
        n = 0
        c = conns[i]
        while not stop.is_set():
            # Alternate the port so every call is a real change (a write), not "unchanged".
            svc = service("%s-c%d-s%d" % (tag, i, n % 50), 80 + (n // 50) % 2)
            t = time.perf_counter()
            try:
                c.call("service.apply", {"object": svc})
            except Exception as e:  # noqa: BLE001 - counted and reported
                errors.append(str(e))
                return
            lat[i].append(time.perf_counter() - t)
            n += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    probe = None
    if status_probe:
        # A process of its own: in this one, 100 busy threads would delay it on the GIL.
        time.sleep(0.2)
        probe = subprocess.Popen([sys.executable, __file__, "--probe", sock, "--seconds", str(seconds - 0.4)],
                                 stdout=subprocess.PIPE)
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    if probe:
        out, _ = probe.communicate()
        status_lat.extend(json.loads(out) if out.strip() else [])
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    all_lat = [x for l in lat for x in l]
    return len(all_lat) / elapsed, all_lat, status_lat, errors


def probe(sock, seconds, until_gone=None):
    """`status` every 10 ms on one connection for `seconds` (or, with `until_gone`, until
    that file is removed, after it first appears); prints the latencies (JSON)."""
    c = Conn(sock)
    lat = []
    end = time.perf_counter() + seconds
    if until_gone:
        while not os.path.exists(until_gone):
            time.sleep(0.001)
    while (os.path.exists(until_gone) if until_gone else time.perf_counter() < end):
        t = time.perf_counter()
        c.call("status", {})
        lat.append(time.perf_counter() - t)
        time.sleep(0.01)
    c.close()
    print(json.dumps(lat))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        if sys.argv[3] == "--until-gone":
            probe(sys.argv[2], 0, until_gone=sys.argv[4])
        else:
            probe(sys.argv[2], float(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--list", type=int, default=10000)
    ap.add_argument("--clients", default="1,10,100")
    ap.add_argument("--netns", action="store_true", help="the real kernel, in a namespace of its own")
    a = ap.parse_args()
    netns = "npal%d" % os.getpid() if a.netns else None
    work = tempfile.mkdtemp(prefix="np-bench-")
    if os.path.exists(a.state_dir):
        shutil.rmtree(a.state_dir)
    results = []
    d = Daemon(a.bin, a.state_dir, work, netns)
    try:
        for n in [int(x) for x in a.clients.split(",")]:
            rps, lat, _, errors = apply_load(d.sock, n, a.seconds, "k%d" % n)
            r = {"what": "service.apply", "clients": n, "requests_per_s": round(rps, 1),
                 "p50_ms": round(pct(lat, 50) * 1000, 2), "p99_ms": round(pct(lat, 99) * 1000, 2),
                 "refused_or_failed": len(errors)}
            results.append(r)
            print(json.dumps(r), flush=True)
        rps, lat, st, errors = apply_load(d.sock, 100, a.seconds, "p", status_probe=True)
        r = {"what": "status while 100 clients apply", "clients": 100, "requests_per_s": round(rps, 1),
             "p50_ms": round(pct(lat, 50) * 1000, 2), "p99_ms": round(pct(lat, 99) * 1000, 2),
             "status_p50_ms": round(pct(st, 50) * 1000, 2), "status_p99_ms": round(pct(st, 99) * 1000, 2),
             "status_max_ms": round(max(st) * 1000, 2) if st else None, "status_calls": len(st),
             "refused_or_failed": len(errors)}
        results.append(r)
        print(json.dumps(r), flush=True)
    finally:
        d.stop()
    if a.list:
        shutil.rmtree(a.state_dir)
        d = Daemon(a.bin, a.state_dir, work, netns)
        try:
            items = []
            for i in range(a.list):
                items.append(service("l%d" % i, 80))
            for i in range(a.list):
                items.append(slice_for("l%d" % i, i))
            path = os.path.join(work, "list.json")
            with open(path, "w") as f:
                json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)
            env = dict(os.environ, NODEPORTD_SOCKET=d.sock)
            # `status` from a process of its own while the List is applied.
            probe_p = subprocess.Popen([sys.executable, __file__, "--probe", d.sock, "--until-gone", path + ".run"],
                                       stdout=subprocess.PIPE)
            open(path + ".run", "w").close()
            t = time.perf_counter()
            out = subprocess.run([a.bin, "ctl", "apply", "-f", path], env=env, capture_output=True)
            applied = time.perf_counter() - t
            os.unlink(path + ".run")
            st_out, _ = probe_p.communicate()
            list_status = json.loads(st_out) if st_out.strip() else []
            c = Conn(d.sock)
            c.call("status", {})
            answered = time.perf_counter() - t
            st = c.call("status", {})
            while not st.get("dataplane", {}).get("inSync"):
                time.sleep(0.01)
                st = c.call("status", {})
            in_sync = time.perf_counter() - t
            c.close()
            lines = out.stdout.decode().count("\n")
            r = {"what": "apply -f List", "services": a.list, "endpointslices": a.list,
                 "exit": out.returncode, "lines_printed": lines, "apply_s": round(applied, 2),
                 "until_status_answers_s": round(answered, 2), "until_in_sync_s": round(in_sync, 2),
                 "status_p50_ms": round(pct(list_status, 50) * 1000, 2),
                 "status_p99_ms": round(pct(list_status, 99) * 1000, 2),
                 "status_max_ms": round(max(list_status) * 1000, 2) if list_status else None,
                 "status_calls": len(list_status),
                 "store_writes": st.get("store", {}).get("writes"),
                 "store_batches": st.get("store", {}).get("batches")}
            results.append(r)
            print(json.dumps(r), flush=True)
        finally:
            d.stop()
    shutil.rmtree(work)
    print()
    print("| measurement | clients | requests/s | p50 ms | p99 ms | status p99 ms | refused/failed |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if r["what"] == "apply -f List":
            continue
        print("| %s | %d | %s | %s | %s | %s | %s |" % (r["what"], r["clients"], r["requests_per_s"], r["p50_ms"],
                                                     r["p99_ms"], r.get("status_p99_ms", ""),
                                                     r["refused_or_failed"]))
    for r in results:
        if r["what"] == "apply -f List":
            print("\napply -f List of %d Services + %d EndpointSlices: %s s (exit %d, %d lines), "
                  "status answers at %s s, in sync at %s s; %s files in %s write batches; status meanwhile p50 %s / p99 %s / "
                  "max %s ms (%d calls)"
                  % (r["services"], r["endpointslices"], r["apply_s"], r["exit"], r["lines_printed"],
                     r["until_status_answers_s"], r["until_in_sync_s"], r["store_writes"], r["store_batches"], r["status_p50_ms"],
                     r["status_p99_ms"], r["status_max_ms"], r["status_calls"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
