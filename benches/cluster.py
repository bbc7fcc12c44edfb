#!/usr/bin/env python3
"""Cluster mode against a real kube-apiserver (issue 16, "Done when"); a benchmark, not a test.

    sudo nice -n 10 python3 benches/cluster.py [--services 1000] [--latency 100] [--restarts 3]

Needs a kube-apiserver binary and etcd (not shipped, not built here), in K8S_DIR
(default /work/k8s):
    K8S_DIR/kube-apiserver
    K8S_DIR/pki/{ca.crt,server.crt,server.key,sa.pub,sa.key}   server cert for 127.0.0.1
    K8S_DIR/tokens.csv, K8S_DIR/admin.token                     a static token in system:masters
and `etcd` on PATH. nodeportd from NODEPORTD_BIN (default target/release/nodeportd, built
with `cargo build --release --features cluster`).

Topology (network namespaces made here, removed at the end):
    cl (198.18.1.2) -- rt (198.18.1.1 | 198.18.2.1) -- be (198.18.2.11-13, port 8080)
etcd and kube-apiserver run inside rt on its loopback (127.0.0.1), nodeportd in rt follows
it ([cluster] token_file). Services get their ClusterIP (198.19.0.0/16) and NodePort
(30000-32767) from the API server; every EndpointSlice lists the 3 real backends, so every
Service carries traffic. "Answers" means: a TCP connection from cl to 198.18.1.1:NODEPORT
gets the backend's reply.

Phases and figures (one JSON line each on stdout, a summary at the end):
  start     N Services x 3 endpoints exist in the cluster; nodeportd starts on an empty
            state (and no table): time to all N mirrored (status.cluster.mirrored), to
            status.dataplane.inSync after that, and to a random sample of 50 NodePorts all
            answering (polled together); then every one of the N is checked once
            (not_answering_after must be 0). --starts times.
  create    one Service + its EndpointSlice POSTed: time from the first POST to the NodePort
            answering (--latency times, with the N Services in place).
  delete    DELETE of a Service and its slice: time from the first DELETE to the NodePort
            refusing (--latency times).
  restart   kube-apiserver SIGKILLed; while it is down, a second kube-apiserver on another
            port (same etcd, unknown to nodeportd) creates K and deletes K Services; it is
            killed and the first one restarted. Times from the restart to the port accepting
            TCP, to the first Service list answered ("serving") and to readyz, and from
            serving and from readyz to the router converged (the K new answering, the K
            deleted refusing; negative: converged before readyz said ok), and a
            connection-rate probe on an unchanged Service through the whole outage: failed
            connections and the longest gap between two answered connections.
"""

import argparse
import ctypes
import http.client
import json
import os
import random
import shutil
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S = os.environ.get("K8S_DIR", "/work/k8s")
BIN = os.environ.get("NODEPORTD_BIN", os.path.join(ROOT, "target/release/nodeportd"))
P = f"npcb{os.getpid()}"
NS = {r: f"{P}-{r}" for r in ("cl", "rt", "be")}
ROUTER = "198.18.1.1"
BACKENDS = ["198.18.2.11", "198.18.2.12", "198.18.2.13"]
SVC_CIDR = "198.19.0.0/16"
API_PORT, API_PORT2, ETCD_PORT = 6443, 6444, 2379

_libc = ctypes.CDLL(None, use_errno=True)


class InNs:
    """Moves the calling thread into a network namespace (sockets made inside stay there)."""

    def __init__(self, name):
        self.path = f"/var/run/netns/{name}"

    def __enter__(self):
        self.back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if _libc.setns(fd, 0x40000000) != 0:
                raise OSError(ctypes.get_errno(), f"setns {self.path}")
        finally:
            os.close(fd)

    def __exit__(self, *a):
        _libc.setns(self.back, 0x40000000)
        os.close(self.back)


def sh(*cmd, ns=None, check=True, **kw):
    full = (["ip", "netns", "exec", NS[ns]] if ns else []) + list(cmd)
    return subprocess.run(full, check=check, capture_output=True, text=True, **kw)


def log(msg):
    print(f"# {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- traffic

LINGER0 = struct.pack("ii", 1, 0)


def answers(port, timeout=0.3):
    """One connection from cl to the router's NodePort: True if the backend replied."""
    with InNs(NS["cl"]):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Reset on close: no TIME_WAIT, so the probes never run out of ports.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER0)
        s.settimeout(timeout)
        s.connect((ROUTER, port))
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        return s.recv(16).startswith(b"ok")
    except OSError:
        return False
    finally:
        s.close()


def wait_until(cond, limit, step=0.005):
    """Seconds until cond() holds (polled every `step`), None after `limit`."""
    t0 = time.monotonic()
    while True:
        if cond():
            return time.monotonic() - t0
        if time.monotonic() - t0 > limit:
            return None
        time.sleep(step)


class RateProbe(threading.Thread):
    """Connections to one NodePort back to back from cl; records every outcome."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.ok, self.failed = port, False, [], []

    def run(self):
        while not self.stop:
            t = time.monotonic()
            (self.ok if answers(self.port, timeout=0.5) else self.failed).append(t)
            time.sleep(0.002)

    def report(self, t_from, t_to):
        ok = [t for t in self.ok if t_from <= t <= t_to]
        bad = [t for t in self.failed if t_from <= t <= t_to]
        pts = [t_from] + ok + [t_to]
        gap = max(b - a for a, b in zip(pts, pts[1:]))
        return {"connections": len(ok) + len(bad), "failed": len(bad), "max_gap_s": round(gap, 4),
                "rate_per_s": round(len(ok) / max(t_to - t_from, 1e-9), 1)}


# ---------------------------------------------------------------- the API server

class Api:
    """HTTPS to kube-apiserver in rt's loopback, keep-alive, one connection per thread."""

    def __init__(self, port, token):
        self.port, self.token = port, token
        self.ctx = ssl.create_default_context(cafile=f"{K8S}/pki/ca.crt")
        self.local = threading.local()

    def req(self, method, path, body=None, ok=(200, 201)):
        for attempt in range(3):
            c = getattr(self.local, "c", None)
            try:
                with InNs(NS["rt"]):
                    if c is None:
                        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=30)
                        c.connect()
                        self.local.c = c
                    hdr = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
                    data = None
                    if body is not None:
                        data = json.dumps(body).encode()
                        hdr["Content-Type"] = "application/json"
                    c.request(method, path, body=data, headers=hdr)
                    r = c.getresponse()
                    out = r.read()
            except (OSError, http.client.HTTPException):
                self.local.c = None
                if attempt == 2:
                    raise
                time.sleep(0.2)
                continue
            if r.status not in ok:
                raise RuntimeError(f"{method} {path}: HTTP {r.status}: {out[:300]!r}")
            return json.loads(out) if out else None

    def ready(self):
        try:
            with InNs(NS["rt"]):
                c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=2)
                c.request("GET", "/readyz", headers={"Authorization": f"Bearer {self.token}"})
                ok = c.getresponse().status == 200
                c.close()
            return ok
        except (OSError, http.client.HTTPException):
            return False

    def serving(self):
        """Whether a list of Services succeeds (before readyz does, after a restart)."""
        try:
            with InNs(NS["rt"]):
                c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=2)
                c.request("GET", "/api/v1/services?limit=1", headers={"Authorization": f"Bearer {self.token}"})
                ok = c.getresponse().status == 200
                c.close()
            return ok
        except (OSError, http.client.HTTPException):
            return False

    def create(self, name):
        """A NodePort Service and its EndpointSlice (3 ready endpoints); returns the nodePort."""
        svc = self.req("POST", "/api/v1/namespaces/default/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": "NodePort", "selector": {"app": name},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}})
        self.req("POST", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in BACKENDS]})
        return svc["spec"]["ports"][0]["nodePort"]

    def delete(self, name):
        self.req("DELETE", f"/api/v1/namespaces/default/services/{name}")
        self.req("DELETE", f"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/{name}-1")


class Cluster:
    """etcd + kube-apiserver processes inside rt."""

    def __init__(self, work):
        self.work, self.etcd, self.api = work, None, {}

    def start_etcd(self):
        d = f"{self.work}/etcd"
        u, peer = f"http://127.0.0.1:{ETCD_PORT}", f"http://127.0.0.1:{ETCD_PORT + 1}"
        self.etcd = subprocess.Popen(
            ["ip", "netns", "exec", NS["rt"], "etcd", "--name", "bench", "--data-dir", d,
             "--listen-client-urls", u, "--advertise-client-urls", u,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"bench={peer}"],
            stdout=subprocess.DEVNULL, stderr=open(f"{self.work}/etcd.log", "a"))

    def start_api(self, port):
        self.api[port] = subprocess.Popen(
            ["ip", "netns", "exec", NS["rt"], f"{K8S}/kube-apiserver",
             f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}", "--bind-address=127.0.0.1",
             f"--secure-port={port}", "--advertise-address=127.0.0.1",
             "--endpoint-reconciler-type=none", f"--service-cluster-ip-range={SVC_CIDR}",
             "--service-node-port-range=30000-32767",
             f"--tls-cert-file={K8S}/pki/server.crt", f"--tls-private-key-file={K8S}/pki/server.key",
             f"--client-ca-file={K8S}/pki/ca.crt", f"--token-auth-file={K8S}/tokens.csv",
             "--authorization-mode=RBAC", f"--service-account-key-file={K8S}/pki/sa.pub",
             f"--service-account-signing-key-file={K8S}/pki/sa.key",
             "--service-account-issuer=https://kubernetes.default.svc",
             "--enable-priority-and-fairness=false"],
            stdout=subprocess.DEVNULL, stderr=open(f"{self.work}/apiserver-{port}.log", "a"))

    def kill_api(self, port):
        p = self.api.pop(port)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop(self):
        for port in list(self.api):
            self.kill_api(port)
        if self.etcd:
            self.etcd.terminate()
            self.etcd.wait()


# ---------------------------------------------------------------- nodeportd

class Daemon:
    def __init__(self, work, token_file):
        self.work, self.proc = work, None
        self.sock = f"{work}/sock"
        self.cfg = f"{work}/nodeportd.toml"
        with open(self.cfg, "w") as f:
            f.write(f'''socket = "{self.sock}"
state_dir = "{work}/state"
node_name = "bench-router"
ubus = "off"
service_cluster_ip_ranges = ["{SVC_CIDR}"]
nodeport_addresses = ["{ROUTER}/32"]
resync_interval_seconds = 86400

[cluster]
server = "https://127.0.0.1:{API_PORT}"
ca_file = "{K8S}/pki/ca.crt"
token_file = "{token_file}"
''')

    def start(self):
        shutil.rmtree(f"{self.work}/state", ignore_errors=True)
        sh("nft", "delete", "table", "inet", "nodeportd", ns="rt", check=False)
        self.proc = subprocess.Popen(["ip", "netns", "exec", NS["rt"], BIN, "--config", self.cfg, "--log", "stderr"],
                                     stderr=open(f"{self.work}/daemon.log", "a"))
        return time.monotonic()

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None

    def status(self):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(self.sock)
            s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"status"}\n')
            buf = b""
            while not buf.endswith(b"\n"):
                d = s.recv(65536)
                if not d:
                    break
                buf += d
            s.close()
            return json.loads(buf)["result"]
        except (OSError, ValueError, KeyError):
            return None


# ---------------------------------------------------------------- the bench

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs) + 0.5) - 1))]


def summary(name, xs):
    return {"phase": name, "n": len(xs), "p50_ms": round(pct(xs, 50) * 1000, 1),
            "p99_ms": round(pct(xs, 99) * 1000, 1), "max_ms": round(max(xs) * 1000, 1),
            "mean_ms": round(statistics.mean(xs) * 1000, 1)}


def emit(obj):
    print(json.dumps(obj), flush=True)


def topology(work):
    for r in NS.values():
        sh("ip", "netns", "add", r)
    for r in NS:
        sh("ip", "link", "set", "lo", "up", ns=r)
    sh("ip", "-n", NS["rt"], "link", "add", "c0", "type", "veth", "peer", "name", "eth0", "netns", NS["cl"])
    sh("ip", "-n", NS["rt"], "link", "add", "b0", "type", "veth", "peer", "name", "eth0", "netns", NS["be"])
    sh("ip", "-n", NS["rt"], "addr", "add", f"{ROUTER}/24", "dev", "c0")
    sh("ip", "-n", NS["rt"], "addr", "add", "198.18.2.1/24", "dev", "b0")
    sh("ip", "-n", NS["cl"], "addr", "add", "198.18.1.2/24", "dev", "eth0")
    for a in BACKENDS:
        sh("ip", "-n", NS["be"], "addr", "add", f"{a}/24", "dev", "eth0")
    for r, links in (("rt", ["c0", "b0"]), ("cl", ["eth0"]), ("be", ["eth0"])):
        for l in links:
            sh("ip", "-n", NS[r], "link", "set", l, "up")
    sh("ip", "-n", NS["cl"], "route", "add", "default", "via", ROUTER)
    sh("ip", "-n", NS["be"], "route", "add", "default", "via", "198.18.2.1")
    sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns="rt")
    sh("sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65000", ns="cl")
    gen = f"{work}/connrate"
    subprocess.run(["gcc", "-O2", "-pthread", "-o", gen, os.path.join(ROOT, "benches/connrate.c")], check=True)
    return subprocess.Popen(["ip", "netns", "exec", NS["be"], gen, "serve", "0.0.0.0", "8080"])


def api_listening(port):
    """Whether the API server accepts TCP on rt's loopback."""
    with InNs(NS["rt"]):
        s = socket.socket()
    try:
        s.settimeout(0.5)
        s.connect(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def create_many(api, names, threads=4):
    ports, errs = {}, []

    def worker(chunk):
        try:
            for n in chunk:
                ports[n] = api.create(n)
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(e)

    ts = [threading.Thread(target=worker, args=(names[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    return ports


def all_answer(ports, limit):
    """Seconds until every port in `ports` has answered once (None after limit)."""
    pending, t0 = set(ports), time.monotonic()
    while pending:
        pending = {p for p in pending if not answers(p, timeout=0.2)}
        if time.monotonic() - t0 > limit:
            return None
        if pending:
            time.sleep(0.01)
    return time.monotonic() - t0


def bench(a):
    work = tempfile.mkdtemp(prefix="npcb.", dir="/dev/shm")
    token = open(f"{K8S}/admin.token").read().strip()
    token_file = f"{work}/token"
    with open(token_file, "w") as f:
        f.write(token + "\n")
    os.chmod(token_file, 0o600)
    cluster, daemon, backend = Cluster(work), Daemon(work, token_file), None
    try:
        backend = topology(work)
        sh("sysctl", "-qw", "net.netfilter.nf_conntrack_tcp_timeout_time_wait=1", ns="rt", check=False)
        emit({"phase": "env", "cpus": os.cpu_count(), "load": open("/proc/loadavg").read().split()[:3],
              "kernel": os.uname().release, "apiserver": sh(f"{K8S}/kube-apiserver", "--version").stdout.strip(),
              "nodeportd": BIN})
        cluster.start_etcd()
        cluster.start_api(API_PORT)
        api = Api(API_PORT, token)
        if wait_until(api.ready, 120, 0.1) is None:
            raise RuntimeError(f"kube-apiserver not ready; see {work}/apiserver-{API_PORT}.log")
        log("kube-apiserver ready")

        # --- start: N Services x 3 endpoints, then nodeportd on an empty state
        names = [f"bulk-{i:04d}" for i in range(a.services)]
        t = time.monotonic()
        ports = create_many(api, names)
        log(f"{a.services} Services + slices created in {time.monotonic() - t:.1f} s")
        for run in range(a.starts):
            daemon.start()

            def mirrored():
                s = daemon.status()
                m = ((s or {}).get("cluster") or {}).get("mirrored") or {}
                return m.get("services", 0) >= a.services and m.get("endpointSlices", 0) >= a.services

            t_m = wait_until(mirrored, 60, 0.02)
            # inSync right after the mirror is complete may still describe the sync before
            # it; the traffic check below is what proves the kernel has every Service.
            t_s = wait_until(lambda: ((daemon.status() or {}).get("dataplane") or {}).get("inSync"), 60, 0.02)
            # A sample of 50 NodePorts polled together times the kernel; then every one of
            # the N is checked once (one pass over N ports takes the probe seconds).
            sample = random.Random(run).sample(sorted(ports.values()), min(50, len(ports)))
            t_a = all_answer(sample, 60)
            t1 = time.monotonic()
            missing = [p for p in ports.values() if not answers(p, timeout=0.3)]
            one_pass = time.monotonic() - t1
            st = daemon.status() or {}
            done = [x for x in (t_m, t_s, t_a) if x is not None]
            emit({"phase": "start", "run": run + 1, "services": a.services,
                  "mirrored_s": round(t_m, 3) if t_m is not None else None,
                  "insync_s": round(t_m + t_s, 3) if len(done) >= 2 else None,
                  "sample_answers_s": round(sum(done), 3) if len(done) == 3 else None,
                  "not_answering_after": len(missing), "check_all_pass_s": round(one_pass, 3),
                  "inSync": st.get("dataplane", {}).get("inSync"),
                  "mirrored": (st.get("cluster") or {}).get("mirrored")})
            if run + 1 < a.starts:
                daemon.stop()

        # --- create -> traffic, delete -> quiet
        created, deleted = [], []
        for i in range(a.latency):
            name = f"lat-{i:04d}"
            t0 = time.monotonic()
            port = api.create(name)
            t = wait_until(lambda: answers(port, timeout=0.2), 30)
            if t is None:
                raise RuntimeError(f"{name} (NodePort {port}) never answered")
            created.append(time.monotonic() - t0)
            time.sleep(0.05)
            t0 = time.monotonic()
            api.delete(name)
            t = wait_until(lambda: not answers(port, timeout=0.2), 30)
            if t is None:
                raise RuntimeError(f"{name} (NodePort {port}) still answers 30 s after its delete")
            deleted.append(time.monotonic() - t0)
        emit(summary("create", created))
        emit(summary("delete", deleted))

        # --- restart
        keep = names[0]
        probe = RateProbe(ports[keep])
        probe.start()
        for r in range(a.restarts):
            t_begin = time.monotonic()
            cluster.kill_api(API_PORT)
            t_down = time.monotonic()
            cluster.start_api(API_PORT2)
            api2 = Api(API_PORT2, token)
            if wait_until(api2.ready, 120, 0.1) is None:
                raise RuntimeError("second kube-apiserver not ready")
            new = [f"rs{r}-{i:03d}" for i in range(a.changes)]
            gone = [names.pop() for _ in range(a.changes)]
            new_ports = create_many(api2, new)
            for n in gone:
                api2.delete(n)
            gone_ports = [ports.pop(n) for n in gone]
            cluster.kill_api(API_PORT2)
            t_start = time.monotonic()
            cluster.start_api(API_PORT)

            def converged():
                return all(answers(p, timeout=0.2) for p in new_ports.values()) and \
                    not any(answers(p, timeout=0.2) for p in gone_ports)

            # Polled together: the port accepting TCP, the first Service list answered,
            # readyz ok, and the router converged (lists are served before readyz says ok).
            at = {}
            while len(at) < 4 and time.monotonic() - t_start < 180:
                now = time.monotonic()
                if "listen" not in at and api_listening(API_PORT):
                    at["listen"] = now
                if "serving" not in at and "listen" in at and api.serving():
                    at["serving"] = time.monotonic()
                if "ready" not in at and "listen" in at and api.ready():
                    at["ready"] = time.monotonic()
                if "conv" not in at and converged():
                    at["conv"] = time.monotonic()
                time.sleep(0.02)
            if len(at) < 4:
                raise RuntimeError(f"restart {r + 1}: not converged within 180 s: {at}")
            t_end = time.monotonic()
            time.sleep(1)
            ports.update(new_ports)
            st = daemon.status() or {}
            emit({"phase": "restart", "run": r + 1, "down_s": round(t_start - t_down, 1),
                  "listening_after_start_s": round(at["listen"] - t_start, 2),
                  "serving_after_start_s": round(at["serving"] - t_start, 2),
                  "ready_after_start_s": round(at["ready"] - t_start, 2),
                  "converged_after_ready_s": round(at["conv"] - at["ready"], 3),
                  "converged_after_serving_s": round(at["conv"] - at["serving"], 3),
                  "probe": probe.report(t_begin, t_end + 1),
                  "relists": (st.get("cluster") or {}).get("relists"),
                  "connected": (st.get("cluster") or {}).get("connected")})
        probe.stop = True
        probe.join()
        return 0
    finally:
        daemon.stop()
        cluster.stop()
        if backend:
            backend.kill()
            backend.wait()
        for r in NS.values():
            subprocess.run(["ip", "netns", "del", r], capture_output=True)
        if os.environ.get("KEEP") == "1":
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--latency", type=int, default=100)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--changes", type=int, default=10)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("benches/cluster.py: run as root (network namespaces, nftables)")
    for tool in ("ip", "nft", "etcd", "gcc"):
        if shutil.which(tool) is None:
            sys.exit(f"benches/cluster.py: {tool} is missing")
    if not os.access(BIN, os.X_OK):
        sys.exit(f"benches/cluster.py: {BIN} missing: cargo build --release --features cluster")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(bench(a))


if __name__ == "__main__":
    main()
