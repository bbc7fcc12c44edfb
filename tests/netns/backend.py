#!/usr/bin/env python3
"""A test backend: answers every TCP (HTTP) request and UDP datagram with its own name
and the client address it saw, so the tests can tell which endpoint served a request
and whether the source was masqueraded.

Usage: backend.py NAME PORT [PORT...]   (each port serves HTTP on TCP and echoes on UDP)
Prints "ready" once every socket listens.
"""
import http.server
import socket
import socketserver
import sys
import threading


def answer(name, peer):
    host = peer[0]
    if host.startswith("::ffff:"):
        host = host[len("::ffff:"):]
    return f"{name} {host}\n".encode()


class DualStackTCP(socketserver.ThreadingTCPServer):
    address_family = socket.AF_INET6
    allow_reuse_address = True
    daemon_threads = True

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def serve_tcp(name, port):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = answer(name, self.client_address)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = DualStackTCP(("::", port), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()


def serve_udp(name, port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))

    def loop():
        while True:
            _, peer = s.recvfrom(2048)
            s.sendto(answer(name, peer), peer)

    threading.Thread(target=loop, daemon=True).start()


def main():
    name, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
    for p in ports:
        serve_tcp(name, p)
        serve_udp(name, p)
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
