#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write, check and unpack apk v3 packages (the .apk files of OpenWrt 25.12).

    apkv3.py build --files DIR --output FILE --mtime EPOCH \
                   [--info KEY:VALUE]... [--script TYPE:FILE]...
    apkv3.py show FILE             # check the whole file, print it as JSON
    apkv3.py extract FILE DEST     # check it, then unpack the files with their modes

Written from apk-tools' documentation of the format (apk-v3(5), apk-package(5))
and the layout `apk mkpkg` gives a package, without code from apk-tools:

  file      "ADBd" + raw deflate of the stream below (or "ADB." + the stream)
  stream    "ADB." magic, schema "pckg" (both u32 little endian), then blocks
  block     u32 tag: type << 30 | (4 + payload length); payload; zero padding to 8
            one ADB block, optional SIG blocks, then one DATA block per file
  ADB       adb_hdr (compat 0, version 0, reserved, root value) + values; a value
            is a u32 whose top 4 bits are a type and low 28 bits an integer or
            the offset (from the ADB payload's start) of the data
  DATA      u32 path index, u32 file index (1-based, in the ADB's sorted
            arrays), then the file's bytes

The package object holds info (name, version, ... depends), paths (one entry per
directory, each with its files), and scripts. Directory and file arrays are
sorted by name, as apk expects. info.hashes is the package's unique id: the first
20 bytes of the SHA-256 of the ADB block written with those bytes zeroed.

Everything the build writes comes from its inputs: same tree, same info, same
scripts and same --mtime give the same bytes (owners are root:root, as in a
fakeroot build). Python 3 standard library only.
"""

import argparse
import hashlib
import json
import os
import stat
import struct
import sys
import zlib

# Value types (high 4 bits of a value).
T_SPECIAL, T_INT, T_INT32, T_INT64 = 0x0, 0x1, 0x2, 0x3
T_BLOB8, T_BLOB16, T_BLOB32, T_ARRAY, T_OBJECT = 0x8, 0x9, 0xA, 0xD, 0xE
NULL = 0

BLOCK_ADB, BLOCK_SIG, BLOCK_DATA, BLOCK_EXT = 0, 1, 2, 3
MAGIC = b"ADB."
SCHEMA_PACKAGE = b"pckg"

# Schemas, field index -> (name, kind). Kinds: str, name, version, hex, int,
# oct, time, deps, tags, obj:<schema>, arr:<schema>.
PKGINFO = {
    1: ("name", "name"), 2: ("version", "version"), 3: ("hashes", "hex"),
    4: ("description", "str"), 5: ("arch", "str"), 6: ("license", "str"),
    7: ("origin", "str"), 8: ("maintainer", "str"), 9: ("url", "str"),
    10: ("repo-commit", "hex"), 11: ("build-time", "time"),
    12: ("installed-size", "int"), 13: ("file-size", "int"),
    14: ("provider-priority", "int"), 15: ("depends", "deps"),
    16: ("provides", "deps"), 17: ("replaces", "deps"), 18: ("install-if", "deps"),
    19: ("recommends", "deps"), 20: ("layer", "int"), 21: ("tags", "tags"),
}
PKGINFO_BY_NAME = {v[0]: k for k, v in PKGINFO.items()}
DEPENDENCY = {1: ("name", "str"), 2: ("version", "version"), 3: ("match", "int")}
ACL = {1: ("mode", "oct"), 2: ("user", "str"), 3: ("group", "str"), 4: ("xattrs", "xattrs")}
FILE = {1: ("name", "str"), 2: ("acl", "obj:acl"), 3: ("size", "int"),
        4: ("mtime", "time"), 5: ("hash", "hex"), 6: ("target", "hex")}
DIR = {1: ("name", "str"), 2: ("acl", "obj:acl"), 3: ("files", "arr:file")}
SCRIPTS = {1: "trigger", 2: "pre-install", 3: "post-install", 4: "pre-deinstall",
           5: "post-deinstall", 6: "pre-upgrade", 7: "post-upgrade"}
SCRIPTS_BY_NAME = {v: k for k, v in SCRIPTS.items()}
PACKAGE = {1: ("info", "obj:pkginfo"), 2: ("paths", "arr:dir"), 3: ("scripts", "obj:scripts"),
           4: ("triggers", "strarr"), 5: ("replaces-priority", "int")}

# Characters apk accepts in a package name (apk-package(5)).
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")
VERSION_SUFFIXES = ("alpha", "beta", "pre", "rc", "cvs", "svn", "git", "hg", "p")


class FormatError(Exception):
    pass


def valid_version(v):
    """number{.number}...{letter}{_suffix{number}}...{~hash}{-r#} (apk-package(5))."""
    i, n = 0, len(v)

    def digits(i):
        j = i
        while j < n and v[j].isdigit():
            j += 1
        return j

    j = digits(i)
    if j == i:
        return False
    i = j
    while i < n and v[i] == ".":
        j = digits(i + 1)
        if j == i + 1:
            return False
        i = j
    if i < n and "a" <= v[i] <= "z":
        i += 1
    while i < n and v[i] == "_":
        for s in VERSION_SUFFIXES:
            if v.startswith(s, i + 1):
                i = digits(i + 1 + len(s))
                break
        else:
            return False
    if i < n and v[i] == "~":
        j = i + 1
        while j < n and v[j] in "0123456789abcdef":
            j += 1
        if j == i + 1:
            return False
        i = j
    if i < n and v.startswith("-r", i):
        j = digits(i + 2)
        if j == i + 2:
            return False
        i = j
    return i == n


# ----------------------------------------------------------------- writing


class AdbWriter:
    """The ADB block being built: values appended, identical data stored once."""

    def __init__(self):
        self.buf = bytearray(8)  # adb_hdr: compat 0, version 0, reserved 0, root
        self.cache = {}

    def _raw(self, data, align):
        self.buf += bytes(-len(self.buf) % align)
        offs = len(self.buf)
        self.buf += data
        if offs > 0x0FFFFFFF:
            raise FormatError("package metadata larger than 256 MiB")
        return offs

    def _data(self, data, align, cache=True):
        if cache:
            offs = self.cache.get(data)
            if offs is not None and offs % align == 0:
                return offs
        offs = self._raw(data, align)
        if cache:
            self.cache[data] = offs
        return offs

    def blob(self, b, cache=True):
        if isinstance(b, str):
            b = b.encode()
        if not b:
            return NULL
        if len(b) > 0xFFFF:
            return T_BLOB32 << 28 | self._data(struct.pack("<I", len(b)) + b, 4, cache)
        if len(b) > 0xFF:
            return T_BLOB16 << 28 | self._data(struct.pack("<H", len(b)) + b, 2, cache)
        return T_BLOB8 << 28 | self._data(bytes([len(b)]) + b, 1, cache)

    def int(self, v):
        if v < 0:
            raise FormatError(f"negative integer {v}")
        if v >= 1 << 32:
            return T_INT64 << 28 | self._data(struct.pack("<Q", v), 4)
        if v >= 0x10000000:
            return T_INT32 << 28 | self._data(struct.pack("<I", v), 4)
        return T_INT << 28 | v

    def _slots(self, t, slots):
        while slots and slots[-1] == NULL:
            slots = slots[:-1]
        if not slots:
            return NULL
        return t << 28 | self._data(struct.pack(f"<{len(slots) + 1}I", len(slots) + 1, *slots), 4)

    def obj(self, fields):
        """fields: {index: value}; unset fields are NULL."""
        n = max((i for i, v in fields.items() if v != NULL), default=0)
        return self._slots(T_OBJECT, [fields.get(i, NULL) for i in range(1, n + 1)])

    def arr(self, items):
        # apk mkpkg tags arrays as objects too (its readers take either type).
        return self._slots(T_OBJECT, [v for v in items if v != NULL])

    def set_root(self, v):
        struct.pack_into("<I", self.buf, 4, v)


def block(btype, payload):
    size = 4 + len(payload)
    if size > 0x3FFFFFFF:
        raise FormatError("block larger than 1 GiB")
    return struct.pack("<I", btype << 30 | size) + payload + bytes(-size % 8)


def dependency_array(w, text):
    deps = []
    for word in text.replace(",", " ").split():
        # NAME or NAME=VERSION (what package-pack.mk's provides holds: apk writes the
        # version and no match field for "=").
        name, eq, version = word.partition("=")
        for op in ("<", ">", "=", "~"):
            if op in name or op in version:
                raise FormatError(f"depends: versioned dependency '{word}' is not supported (only NAME=VERSION)")
        if eq and (not version or any(c not in NAME_CHARS for c in version)):
            raise FormatError(f"depends: invalid version in '{word}'")
        if name.startswith("!") or not name or any(c not in NAME_CHARS for c in name):
            raise FormatError(f"depends: invalid package name '{word}'")
        deps.append((name, version))
    # Written in the given order, then sorted by name with repeats dropped
    # (apk's dependency array keeps itself sorted and unique).
    vals = {}
    for name, version in deps:
        fields = {1: w.blob(name)}
        if version:
            fields[2] = w.blob(version)
        vals.setdefault(name, w.obj(fields))
    return w.arr([vals[d] for d in sorted(vals, key=str.encode)])


def scan_tree(root):
    """Directories under root (relative paths, '' first), sorted bytewise."""
    dirs = [""]
    for cur, subdirs, _files in os.walk(root):
        for d in subdirs:
            full = os.path.join(cur, d)
            if os.path.islink(full):
                continue
            dirs.append(os.path.relpath(full, root))
    return sorted(set(dirs), key=lambda p: p.encode())


def build(files_dir, info, scripts, mtime, output):
    w = AdbWriter()
    if "name" not in info or "version" not in info:
        raise FormatError("info: name and version are required")
    if not info["name"] or not info["name"][0].isalnum() or any(c not in NAME_CHARS for c in info["name"]):
        raise FormatError(f"info: name '{info['name']}' is not a valid package name")
    if not valid_version(info["version"]):
        raise FormatError(f"info: version '{info['version']}' is not a valid apk version")

    # Values are written in the order apk mkpkg writes them (info fields by
    # index; per file its name, hash or target, mtime, size, then its acl;
    # per directory its name and acl after its files), so that the layout of
    # the ADB block follows the reference implementation's.
    pkginfo = {}
    for key in info:
        idx = PKGINFO_BY_NAME.get(key)
        if idx is None or key in ("hashes", "installed-size", "file-size", "repo-commit"):
            raise FormatError(f"info: field '{key}' cannot be set")
    for idx in sorted(PKGINFO):
        key, kind = PKGINFO[idx]
        if key not in info:
            continue
        value = info[key]
        if kind == "deps":
            pkginfo[idx] = dependency_array(w, value)
        elif kind in ("int", "time"):
            if not value.isdigit():
                raise FormatError(f"info: {key} '{value}' is not a number")
            pkginfo[idx] = w.int(int(value))
        elif kind == "tags":
            pkginfo[idx] = w.arr([w.blob(t) for t in value.split()])
        else:
            pkginfo[idx] = w.blob(value)

    def acl(mode):
        return w.obj({1: w.int(mode), 2: w.blob("root"), 3: w.blob("root")})

    data_files = []  # (path index, file index, absolute path, size)
    dir_vals = []
    installed = 0
    for pi, rel in enumerate(scan_tree(files_dir), start=1):
        dpath = os.path.join(files_dir, rel) if rel else files_dir
        file_vals = []
        fi = 0
        for name in sorted(os.listdir(dpath), key=str.encode):
            full = os.path.join(dpath, name)
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                continue
            fields = {1: w.blob(name)}
            size = st.st_size
            if stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(full, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                fields[5] = w.blob(h.digest())
                installed += size
            elif stat.S_ISLNK(st.st_mode):
                target = os.readlink(full).encode()
                fields[6] = w.blob(struct.pack("<H", stat.S_IFLNK) + target)
                size = len(target)
            else:
                raise FormatError(f"{full}: only regular files, symlinks and directories can be packed")
            fields[4] = w.int(mtime)
            fields[3] = w.int(size)
            fields[2] = acl(stat.S_IMODE(st.st_mode))
            fi += 1
            file_vals.append(w.obj(fields))
            if stat.S_ISREG(st.st_mode) and size:
                data_files.append((pi, fi, full, size))
        st = os.lstat(dpath)
        name_val = w.blob(rel)
        acl_val = acl(stat.S_IMODE(st.st_mode))
        dir_vals.append(w.obj({1: name_val, 2: acl_val, 3: w.arr(file_vals)}))

    pkginfo[12] = w.int(max(installed, 1))
    uid_val = w.blob(bytes(20), cache=False)
    pkginfo[3] = uid_val
    pkg = {1: w.obj(pkginfo), 2: w.arr(dir_vals)}
    if scripts:
        pkg[3] = w.obj({i: w.blob(scripts[n]) for i, n in sorted(SCRIPTS.items()) if n in scripts})
    w.set_root(w.obj(pkg))

    uid_offs = (uid_val & 0x0FFFFFFF) + 1
    uid = hashlib.sha256(bytes(w.buf)).digest()[:20]
    w.buf[uid_offs:uid_offs + 20] = uid

    stream = bytearray(MAGIC + SCHEMA_PACKAGE)
    stream += block(BLOCK_ADB, bytes(w.buf))
    for pi, fi, full, size in data_files:
        with open(full, "rb") as f:
            content = f.read()
        if len(content) != size:
            raise FormatError(f"{full} changed while packing")
        stream += block(BLOCK_DATA, struct.pack("<II", pi, fi) + content)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15, 8)
    out = b"ADBd" + comp.compress(bytes(stream)) + comp.flush()
    tmp = output + ".tmp"
    with open(tmp, "wb") as f:
        f.write(out)
    os.chmod(tmp, 0o644)
    os.replace(tmp, output)


# ----------------------------------------------------------------- reading


class AdbReader:
    def __init__(self, adb):
        self.adb = adb

    def _deref(self, v, size, what):
        offs = v & 0x0FFFFFFF
        if offs + size > len(self.adb):
            raise FormatError(f"{what}: value at offset {offs} (+{size}) beyond the ADB block ({len(self.adb)} bytes)")
        return offs

    def blob(self, v, what):
        t = v >> 28
        if v == NULL:
            return None
        if t == T_BLOB8:
            o = self._deref(v, 1, what)
            n, o = self.adb[o], o + 1
        elif t == T_BLOB16:
            o = self._deref(v, 2, what)
            n, o = struct.unpack_from("<H", self.adb, o)[0], o + 2
        elif t == T_BLOB32:
            o = self._deref(v, 4, what)
            n, o = struct.unpack_from("<I", self.adb, o)[0], o + 4
        else:
            raise FormatError(f"{what}: expected a blob, found value type {t:#x}")
        if o + n > len(self.adb):
            raise FormatError(f"{what}: blob of {n} bytes runs past the ADB block")
        return bytes(self.adb[o:o + n])

    def int(self, v, what):
        t = v >> 28
        if v == NULL:
            return None
        if t == T_INT:
            return v & 0x0FFFFFFF
        if t == T_INT32:
            return struct.unpack_from("<I", self.adb, self._deref(v, 4, what))[0]
        if t == T_INT64:
            return struct.unpack_from("<Q", self.adb, self._deref(v, 8, what))[0]
        raise FormatError(f"{what}: expected an integer, found value type {t:#x}")

    def slots(self, v, what):
        if v == NULL:
            return []
        if v >> 28 not in (T_OBJECT, T_ARRAY):
            raise FormatError(f"{what}: expected an object or array, found value type {v >> 28:#x}")
        o = self._deref(v, 4, what)
        if o % 4:
            raise FormatError(f"{what}: misaligned object at offset {o}")
        n = struct.unpack_from("<I", self.adb, o)[0]
        if n == 0:
            raise FormatError(f"{what}: object with zero slots")
        self._deref(v, 4 * n, what)
        return list(struct.unpack_from(f"<{n - 1}I", self.adb, o + 4))

    def obj(self, v, schema, what):
        vals = self.slots(v, what)
        if len(vals) > max(schema):
            raise FormatError(f"{what}: {len(vals)} fields, the schema has {max(schema)}")
        return {i: vals[i - 1] for i in range(1, len(vals) + 1) if vals[i - 1] != NULL}

    def arr(self, v, what):
        return self.slots(v, what)

    def text(self, v, what):
        b = self.blob(v, what)
        if b is None:
            return None
        try:
            return b.decode()
        except UnicodeDecodeError:
            raise FormatError(f"{what}: not UTF-8 text") from None


def decompress(raw):
    if raw[:4] == b"ADBd":
        try:
            d = zlib.decompressobj(-15)
            out = d.decompress(raw[4:]) + d.flush()
        except zlib.error as e:
            raise FormatError(f"deflate stream: {e}") from None
        if not d.eof:
            raise FormatError("deflate stream is truncated")
        if d.unused_data:
            raise FormatError(f"{len(d.unused_data)} bytes after the deflate stream")
        return out
    if raw[:4] == MAGIC:
        return raw
    if raw[:4] == b"ADBc":
        if len(raw) < 6 or raw[4] != 1:
            raise FormatError("ADBc: only deflate (algorithm 1) is supported by this reader")
        return decompress(b"ADBd" + raw[6:])
    raise FormatError(f"not an apk v3 file: starts with {raw[:4]!r} (want ADBd, ADBc or ADB.)")


def parse(raw):
    """Check the whole package; return (meta dict, {(path idx, file idx): bytes})."""
    s = decompress(raw)
    if s[:4] != MAGIC:
        raise FormatError(f"stream magic {s[:4]!r}, want {MAGIC!r}")
    if s[4:8] != SCHEMA_PACKAGE:
        raise FormatError(f"schema {s[4:8]!r}, want {SCHEMA_PACKAGE!r} (a package)")
    pos, adb, sigs, datas = 8, None, 0, []
    while pos < len(s):
        if pos + 4 > len(s):
            raise FormatError(f"truncated block header at {pos}")
        tag = struct.unpack_from("<I", s, pos)[0]
        btype, size, hdr = tag >> 30, tag & 0x3FFFFFFF, 4
        if btype == BLOCK_EXT:
            if pos + 16 > len(s):
                raise FormatError(f"truncated extended block header at {pos}")
            btype, size, hdr = tag & 0x3FFFFFFF, struct.unpack_from("<Q", s, pos + 8)[0], 16
        if size < hdr:
            raise FormatError(f"block at {pos}: size {size} smaller than its header")
        padded = size + (-size % 8)
        if pos + padded > len(s):
            raise FormatError(f"block at {pos}: {padded} bytes, only {len(s) - pos} left")
        if any(s[pos + size:pos + padded]):
            raise FormatError(f"block at {pos}: padding is not zero")
        payload = s[pos + hdr:pos + size]
        if adb is None and btype != BLOCK_ADB:
            raise FormatError(f"block at {pos}: type {btype} before the ADB block")
        if btype == BLOCK_ADB:
            if adb is not None:
                raise FormatError(f"block at {pos}: a second ADB block")
            adb = payload
        elif btype == BLOCK_SIG:
            if datas:
                raise FormatError(f"block at {pos}: signature after data")
            sigs += 1
        elif btype == BLOCK_DATA:
            if len(payload) < 8:
                raise FormatError(f"data block at {pos}: shorter than its 8-byte header")
            datas.append((struct.unpack_from("<II", payload), payload[8:]))
        else:
            raise FormatError(f"block at {pos}: unknown type {btype}")
        pos += padded
    if adb is None:
        raise FormatError("no ADB block")
    if len(adb) < 8 or adb[0] != 0:
        raise FormatError("ADB header: too short or compat version not 0")

    r = AdbReader(adb)
    root = struct.unpack_from("<I", adb, 4)[0]
    pkg = r.obj(root, PACKAGE, "package")
    if 1 not in pkg:
        raise FormatError("package: no info")
    info_v = r.obj(pkg[1], PKGINFO, "info")
    info = {}
    uid_val = None
    for idx, v in sorted(info_v.items()):
        name, kind = PKGINFO[idx]
        what = f"info.{name}"
        if kind in ("int", "time"):
            info[name] = r.int(v, what)
        elif kind == "hex":
            info[name] = r.blob(v, what).hex()
            if name == "hashes":
                uid_val = v
        elif kind == "deps":
            deps = []
            for dv in r.arr(v, what):
                d = r.obj(dv, DEPENDENCY, what)
                text = r.text(d.get(1, NULL), what + ".name")
                if d.get(2):
                    text += ("=" if not d.get(3) else f"<op {r.int(d[3], what)}>") + r.text(d[2], what)
                deps.append(text)
            info[name] = deps
        elif kind == "tags":
            info[name] = [r.text(t, what) for t in r.arr(v, what)]
        else:
            info[name] = r.text(v, what)
    for req in ("name", "version"):
        if not info.get(req):
            raise FormatError(f"info: no {req}")
    if not valid_version(info["version"]):
        raise FormatError(f"info.version '{info['version']}' is not a valid apk version")

    # The unique id: SHA-256 of the ADB block with the id bytes zeroed.
    if uid_val is not None and len(info["hashes"]) == 40:
        o = (uid_val & 0x0FFFFFFF) + 1
        zeroed = bytes(adb[:o]) + bytes(20) + bytes(adb[o + 20:])
        if hashlib.sha256(zeroed).digest()[:20].hex() != info["hashes"]:
            raise FormatError("info.hashes does not match the ADB block")
        info["hashes-verified"] = True

    def acl(v, what):
        a = r.obj(v, ACL, what)
        mode = r.int(a.get(1, NULL), what + ".mode") or 0
        if mode & ~0o7777:
            raise FormatError(f"{what}.mode {mode:o} has bits outside 7777")
        return {"mode": f"{mode:04o}", "user": r.text(a.get(2, NULL), what + ".user"),
                "group": r.text(a.get(3, NULL), what + ".group")}

    paths, expect = [], []
    prev = None
    for pi, dv in enumerate(r.arr(pkg.get(2, NULL), "paths"), start=1):
        d = r.obj(dv, DIR, f"paths[{pi}]")
        dname = r.text(d.get(1, NULL), f"paths[{pi}].name") or ""
        if prev is not None and prev.encode() >= dname.encode():
            raise FormatError(f"paths: '{dname}' after '{prev}' (not sorted)")
        prev = dname
        entry = {"name": dname, "acl": acl(d.get(2, NULL), f"paths[{pi}].acl") if 2 in d else None, "files": []}
        fprev = None
        for fi, fv in enumerate(r.arr(d.get(3, NULL), f"paths[{pi}].files"), start=1):
            what = f"{dname or '.'}/[{fi}]"
            f = r.obj(fv, FILE, what)
            fname = r.text(f.get(1, NULL), what + ".name")
            if not fname or "/" in fname or fname in (".", ".."):
                raise FormatError(f"{what}: invalid file name {fname!r}")
            if fprev is not None and fprev.encode() >= fname.encode():
                raise FormatError(f"{dname}: '{fname}' after '{fprev}' (not sorted)")
            fprev = fname
            what = f"/{dname + '/' if dname else ''}{fname}"
            fe = {"name": fname, "acl": acl(f.get(2, NULL), what + ".acl"),
                  "size": r.int(f.get(3, NULL), what + ".size") or 0,
                  "mtime": r.int(f.get(4, NULL), what + ".mtime")}
            h = r.blob(f.get(5, NULL), what + ".hash")
            target = r.blob(f.get(6, NULL), what + ".target")
            if target is not None:
                if len(target) < 2:
                    raise FormatError(f"{what}: target too short")
                tmode = struct.unpack_from("<H", target)[0]
                if tmode == stat.S_IFLNK:
                    fe["type"], fe["target"] = "symlink", target[2:].decode()
                elif tmode == stat.S_IFREG:
                    fe["type"], fe["target"] = "hardlink", target[2:].decode()
                else:
                    raise FormatError(f"{what}: device nodes and fifos are not supported (mode {tmode:o})")
            else:
                if h is None or len(h) != 32:
                    raise FormatError(f"{what}: a regular file needs a 32-byte sha256 hash")
                fe["type"], fe["sha256"] = "file", h.hex()
                if fe["size"]:
                    expect.append((pi, fi, fe))
            entry["files"].append(fe)
        paths.append(entry)

    # The data blocks come in path/file order, one per non-empty regular file.
    if len(datas) != len(expect):
        raise FormatError(f"{len(datas)} data blocks for {len(expect)} non-empty files")
    contents = {}
    for ((pi, fi), body), (epi, efi, fe) in zip(datas, expect):
        if (pi, fi) != (epi, efi):
            raise FormatError(f"data block for path {pi} file {fi}, expected path {epi} file {efi}")
        if len(body) != fe["size"]:
            raise FormatError(f"{fe['name']}: data block has {len(body)} bytes, size says {fe['size']}")
        if hashlib.sha256(body).hexdigest() != fe["sha256"]:
            raise FormatError(f"{fe['name']}: content does not match its sha256")
        contents[(pi, fi)] = body

    scripts = {}
    if 3 in pkg:
        sv = r.obj(pkg[3], {i: (n, "str") for i, n in SCRIPTS.items()}, "scripts")
        for idx, v in sorted(sv.items()):
            scripts[SCRIPTS[idx]] = r.text(v, f"scripts.{SCRIPTS[idx]}")
    triggers = [r.text(t, "triggers") for t in r.arr(pkg.get(4, NULL), "triggers")]
    meta = {"info": info, "paths": paths, "scripts": scripts, "triggers": triggers,
            "signatures": sigs, "data_blocks": len(datas), "adb_bytes": len(adb)}
    return meta, contents


def extract(meta, contents, dest):
    for pi, d in enumerate(meta["paths"], start=1):
        ddir = os.path.join(dest, d["name"]) if d["name"] else dest
        os.makedirs(ddir, exist_ok=True)
        for fi, f in enumerate(d["files"], start=1):
            path = os.path.join(ddir, f["name"])
            if os.path.lexists(path):
                os.unlink(path)
            if f["type"] == "symlink":
                os.symlink(f["target"], path)
                continue
            if f["type"] == "hardlink":
                os.link(os.path.join(dest, f["target"]), path)
                continue
            with open(path, "wb") as out:
                out.write(contents.get((pi, fi), b""))
            os.chmod(path, int(f["acl"]["mode"], 8))
    # Directory modes last, deepest first, so that a read-only one does not stop us.
    for d in sorted(meta["paths"], key=lambda d: -d["name"].count("/")):
        if d["acl"]:
            os.chmod(os.path.join(dest, d["name"]) if d["name"] else dest, int(d["acl"]["mode"], 8))


def main(argv):
    p = argparse.ArgumentParser(prog="apkv3.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="pack a directory tree into an apk v3 package")
    b.add_argument("--files", required=True, help="the tree to pack (its root is /)")
    b.add_argument("--output", required=True)
    b.add_argument("--info", action="append", default=[], metavar="KEY:VALUE")
    b.add_argument("--script", action="append", default=[], metavar="TYPE:FILE")
    b.add_argument("--mtime", type=int, required=True, help="modification time of every file")
    s = sub.add_parser("show", help="check a package and print it as JSON")
    s.add_argument("file")
    e = sub.add_parser("extract", help="check a package and unpack its files")
    e.add_argument("file")
    e.add_argument("dest")
    a = p.parse_args(argv)
    try:
        if a.cmd == "build":
            info, scripts = {}, {}
            for kv in a.info:
                k, sep, v = kv.partition(":")
                if not sep:
                    raise FormatError(f"--info '{kv}': want KEY:VALUE")
                if v:  # an empty value leaves the field out, as apk mkpkg does
                    info[k] = v
            for kv in a.script:
                k, sep, path = kv.partition(":")
                if not sep or k not in SCRIPTS_BY_NAME:
                    raise FormatError(f"--script '{kv}': want TYPE:FILE, TYPE one of {', '.join(SCRIPTS_BY_NAME)}")
                with open(path, encoding="utf-8") as f:
                    scripts[k] = f.read()
            if not os.path.isdir(a.files):
                raise FormatError(f"--files '{a.files}' is not a directory")
            build(a.files, info, scripts, a.mtime, a.output)
            return 0
        with open(a.file, "rb") as f:
            raw = f.read()
        meta, contents = parse(raw)
        if a.cmd == "show":
            json.dump(meta, sys.stdout, indent=1, sort_keys=True)
            print()
        else:
            extract(meta, contents, a.dest)
        return 0
    except (FormatError, OSError) as err:
        print(f"apkv3.py: {getattr(a, 'file', None) or getattr(a, 'output', '')}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
