#!/usr/bin/env python3
"""Sends one TCP SYN as a raw Ethernet frame and reports what comes back: for addresses
a normal socket will not send from this host (e.g. to 127.0.0.1 on another machine).

Usage: syn.py IFACE DST_MAC SRC_IP DST_IP DST_PORT [TIMEOUT_SECONDS]
Prints "synack", "rst" (a TCP answer from DST_IP:DST_PORT to our port) or "timeout".
"""
import random
import socket
import struct
import sys
import time

ETH_P_IP = 0x0800


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def main():
    iface, dst_mac, src_ip, dst_ip, dport = sys.argv[1:6]
    timeout = float(sys.argv[6]) if len(sys.argv) > 6 else 1.0
    dport = int(dport)
    sport = random.randint(20000, 60000)
    seq = random.getrandbits(32)
    src_mac = open(f"/sys/class/net/{iface}/address").read().strip()
    src, dst = socket.inet_aton(src_ip), socket.inet_aton(dst_ip)

    # TCP header: SYN, window 64240, no options.
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = src + dst + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), random.getrandbits(16), 0x4000, 64,
                     socket.IPPROTO_TCP, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    eth = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(src_mac.replace(":", "")) + struct.pack("!H", ETH_P_IP)

    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    rx.bind((iface, ETH_P_IP))
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind((iface, 0))
    tx.send(eth + ip + tcp)

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            print("timeout")
            return
        rx.settimeout(left)
        try:
            frame, addr = rx.recvfrom(65535)
        except socket.timeout:
            print("timeout")
            return
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        pkt = frame[14:]
        if frame[12:14] != b"\x08\x00" or len(pkt) < 40 or pkt[9] != socket.IPPROTO_TCP or pkt[12:16] != dst or pkt[16:20] != src:
            continue
        t = pkt[(pkt[0] & 0x0F) * 4:]
        psrc, pdst = struct.unpack("!HH", t[:4])
        if psrc != dport or pdst != sport:
            continue
        flags = t[13]
        if flags & 0x12 == 0x12:
            print("synack")
            return
        if flags & 0x04:
            print("rst")
            return


if __name__ == "__main__":
    main()
