#!/usr/bin/env python3
"""Reads qprof.c's counts: where an emulated router's instructions went.

  report.py COUNTS BINARY                    the timeline: instructions every 200 ms
  report.py COUNTS BINARY FROM TO [-n N]     in that window (seconds, as the timeline
                                             prints them): BINARY's functions by
                                             instructions, and the totals
  report.py COUNTS BINARY FROM TO --callers NAME[,NAME...]
                                             the callers of functions whose names begin
                                             with NAME (needs qprof's calls=)
  report.py COUNTS BINARY FROM TO --entered-at VADDR
                                             the blocks that ran just before the block at
                                             VADDR, by function: with VADDR the guest's TLB
                                             refill handler (0x80342000 in the mipsel
                                             guest; its address in calls=), the functions
                                             whose accesses missed the TLB

BINARY is the unstripped build of the binary the guest ran (the same build: the package
holds it stripped, with the same addresses). A block is BINARY's when its first
instruction word is the one at its address in BINARY; the rest is the kernel (at or above
--kernel, default 0x80000000: MIPS32's kseg0) and other processes. Needs llvm-nm (rustup's
llvm-tools, or LLVM) and readelf.
"""
import argparse
import bisect
import collections
import re
import struct
import subprocess
import sys


def read_counts(path):
    """[(time, [(vaddr, insns, word, executions)], [(caller vaddr, caller word, callee vaddr, calls)])]"""
    snaps = []
    for line in open(path):
        f = line.split()
        if f[0] == "T":
            snaps.append((float(f[1]), [], []))
        elif f[0] == "E":
            snaps[-1][2].append((int(f[1], 16), int(f[2], 16), int(f[3], 16), int(f[4])))
        else:
            snaps[-1][1].append((int(f[0], 16), int(f[2]), int(f[3], 16), int(f[4])))
    return snaps


class Binary:
    def __init__(self, path):
        self.data = open(path, "rb").read()
        nm = subprocess.run(["llvm-nm", "-n", "-C", "--defined-only", path],
                            capture_output=True, text=True, check=True).stdout
        self.syms = []
        for line in nm.splitlines():
            p = line.split(" ", 2)
            if len(p) == 3 and p[1] in "tTwW":
                self.syms.append((int(p[0], 16), p[2]))
        self.addrs = [a for a, _ in self.syms]
        self.segments = []
        for line in subprocess.run(["readelf", "-lW", path], capture_output=True, text=True,
                                   check=True).stdout.splitlines():
            m = re.match(r"\s+LOAD\s+0x([0-9a-f]+) 0x([0-9a-f]+) 0x[0-9a-f]+ 0x([0-9a-f]+)", line)
            if m:
                self.segments.append((int(m.group(2), 16), int(m.group(1), 16), int(m.group(3), 16)))
        little = self.data[5] == 1
        self.word_format = "<I" if little else ">I"

    def word(self, vaddr):
        for va, off, size in self.segments:
            if va <= vaddr < va + size - 3:
                at = off + vaddr - va
                return struct.unpack(self.word_format, self.data[at:at + 4])[0]
        return None

    def owns(self, vaddr, word):
        return self.word(vaddr) == word

    def name(self, vaddr):
        i = bisect.bisect_right(self.addrs, vaddr) - 1
        return self.syms[i][1] if i >= 0 else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("counts")
    ap.add_argument("binary")
    ap.add_argument("window", nargs="*", type=float)
    ap.add_argument("-n", type=int, default=40, help="functions to print")
    ap.add_argument("--callers", help="comma-separated function name prefixes")
    ap.add_argument("--entered-at", type=lambda s: int(s, 0), help="a block's address (hex)")
    ap.add_argument("--kernel", type=lambda s: int(s, 0), default=0x80000000)
    a = ap.parse_args()
    snaps = read_counts(a.counts)
    binary = Binary(a.binary)

    if not a.window:
        print("time        binary   kernel   others (millions of instructions)")
        for t, blocks, _ in snaps:
            mine = kern = other = 0
            for vaddr, insns, word, n in blocks:
                if vaddr >= a.kernel:
                    kern += insns * n
                elif binary.owns(vaddr, word):
                    mine += insns * n
                else:
                    other += insns * n
            print(f"{t:10.1f} {mine / 1e6:8.2f} {kern / 1e6:8.2f} {other / 1e6:8.2f}")
        return
    if len(a.window) != 2:
        sys.exit("report.py: give the window as FROM TO")
    lo, hi = a.window
    inside = [s for s in snaps if lo <= s[0] <= hi]
    if a.entered_at is not None:
        by = collections.Counter()
        for _, _, edges in inside:
            for caller, word, callee, n in edges:
                if callee == a.entered_at:
                    if caller >= a.kernel:
                        by["(kernel)"] += n
                    elif binary.owns(caller, word):
                        by[binary.name(caller)] += n
                    else:
                        by["(other processes)"] += n
        print(f"== entered at {a.entered_at:#x}: {sum(by.values())} times")
        for name, n in by.most_common(a.n):
            print(f"  {n:10d}  {name[:160]}")
        return
    if a.callers:
        wanted = a.callers.split(",")
        by = collections.defaultdict(collections.Counter)
        for _, _, edges in inside:
            for caller, word, callee, n in edges:
                name = binary.name(callee)
                for w in wanted:
                    if name.startswith(w) and binary.owns(caller, word):
                        by[w][binary.name(caller)] += n
        for w in wanted:
            print(f"== {w}: {sum(by[w].values())} calls")
            for name, n in by[w].most_common(a.n):
                print(f"  {n:10d}  {name[:160]}")
        return
    funcs = collections.Counter()
    kern = other = 0
    for _, blocks, _ in inside:
        for vaddr, insns, word, n in blocks:
            if vaddr >= a.kernel:
                kern += insns * n
            elif binary.owns(vaddr, word):
                funcs[binary.name(vaddr)] += insns * n
            else:
                other += insns * n
    mine = sum(funcs.values())
    print(f"{inside[0][0]:.1f} .. {inside[-1][0]:.1f}: {a.binary} {mine / 1e6:.1f} M instructions, "
          f"kernel {kern / 1e6:.1f} M, other processes {other / 1e6:.1f} M")
    for name, n in funcs.most_common(a.n):
        print(f"{n / 1e6:9.2f} M {100 * n / max(mine, 1):5.1f} %  {name[:150]}")


if __name__ == "__main__":
    main()
