#!/usr/bin/env python3
"""A test client: COUNT requests to HOST:PORT over tcp (HTTP GET) or udp, each on a new
connection or socket (so each is a new conntrack entry and a fresh endpoint choice).

Usage: probe.py tcp|udp HOST PORT COUNT [TIMEOUT_SECONDS]
Prints one line per request: the server's answer ("NAME CLIENT_IP"), or
"ERR <reason> <milliseconds>" (reason: refused, timeout, or the error's name).

       probe.py udp-hold HOST PORT
One UDP socket (one conntrack entry) for the whole run: sends a datagram for every line
read from stdin and prints the answer, until stdin ends.
"""
import errno
import socket
import sys
import time


def one(proto, host, port, timeout):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(family, kind)
    s.settimeout(timeout)
    try:
        s.connect((host, port))
        if proto == "tcp":
            s.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            body = data.split(b"\r\n\r\n", 1)[-1]
        else:
            s.send(b"ping")
            body = s.recv(2048)
        return body.decode().strip()
    finally:
        s.close()


def hold(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(2.0)
    s.connect((host, port))
    for _ in sys.stdin:
        try:
            s.send(b"ping")
            line = s.recv(2048).decode().strip()
        except socket.timeout:
            line = "ERR timeout"
        except OSError as e:
            line = f"ERR {errno.errorcode.get(e.errno, e.errno)}"
        print(line, flush=True)


def main():
    if sys.argv[1] == "udp-hold":
        hold(sys.argv[2], int(sys.argv[3]))
        return
    proto, host, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 2.0
    for _ in range(count):
        start = time.monotonic()
        try:
            line = one(proto, host, port, timeout)
        except socket.timeout:
            line = "ERR timeout"
        except OSError as e:
            line = "ERR refused" if e.errno == errno.ECONNREFUSED else f"ERR {errno.errorcode.get(e.errno, e.errno)}"
        if line.startswith("ERR"):
            line += f" {int((time.monotonic() - start) * 1000)}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
