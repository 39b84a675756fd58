#!/usr/bin/env python3
"""gguf_read.py — an independent, validating GGUF (v2/v3) reader.

Deliberately shares no code with gguf_write.py: it is the check that the
writer produced what the format spec says, so it re-derives every constant
and walks the file with its own cursor. It validates bounds on every read,
tensor offsets (aligned, in order, non-overlapping, inside the file) and
each tensor's byte size from its type and shape.

As a program it prints a summary of each file and exits non-zero when one
is malformed:  python3 train/gguf_read.py models/*.gguf
"""
import struct
import sys

import numpy as np

# GGUF metadata value type -> (struct format, byte size); 8 string, 9 array.
_SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4),
            5: ("<i", 4), 6: ("<f", 4), 7: ("<B", 1), 10: ("<Q", 8), 11: ("<q", 8),
            12: ("<d", 8)}
_T_STRING, _T_ARRAY = 8, 9
# ggml type -> (elements per block, bytes per block, name)
_LAYOUT = {0: (1, 4, "F32"), 1: (1, 2, "F16"), 8: (32, 34, "Q8_0"), 30: (1, 2, "BF16")}


class GGUFError(ValueError):
    pass


class _Cursor:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"truncated at byte {self.pos} (need {n} more)")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, vtype):
        fmt, size = _SCALARS[vtype]
        v = struct.unpack(fmt, self.take(size))[0]
        if vtype == 7:
            if v > 1:
                raise GGUFError(f"bool value {v} at byte {self.pos - 1}")
            return bool(v)
        return v

    def string(self):
        n = self.scalar(10)
        if n > len(self.buf) - self.pos:
            raise GGUFError(f"string length {n} runs past the end")
        return bytes(self.take(n)).decode("utf-8")

    def value(self, vtype, depth=0):
        if vtype in _SCALARS:
            return self.scalar(vtype)
        if vtype == _T_STRING:
            return self.string()
        if vtype == _T_ARRAY:
            if depth > 3:
                raise GGUFError("arrays nested too deeply")
            etype, count = self.scalar(4), self.scalar(10)
            if etype in _SCALARS:
                size = _SCALARS[etype][1]
                if count * size > len(self.buf) - self.pos:
                    raise GGUFError(f"array of {count} runs past the end")
                # struct's format letters are valid numpy dtype strings too.
                raw = np.frombuffer(self.take(count * size), dtype=np.dtype(_SCALARS[etype][0]))
                if etype == 7 and raw.size and raw.max() > 1:
                    raise GGUFError("bool array holds a value other than 0 or 1")
                return ("array", etype, raw.astype(bool) if etype == 7 else raw.copy())
            if count > len(self.buf) - self.pos:
                raise GGUFError(f"array of {count} runs past the end")
            return ("array", etype, [self.value(etype, depth + 1) for _ in range(count)])
        raise GGUFError(f"unknown value type {vtype}")


class GGUFFile:
    """Parsed file: .version, .kv {key: value}, .kv_types {key: type},
    .tensors {name: dict(ne, type, offset, nbytes)} in file order, .data_start."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.raw = f.read()
        self.path = path
        self._parse()

    def _parse(self):
        c = _Cursor(memoryview(self.raw))
        if bytes(c.take(4)) != b"GGUF":
            raise GGUFError("bad magic")
        self.version = c.scalar(4)
        if self.version not in (2, 3):
            raise GGUFError(f"unsupported version {self.version}")
        n_tensors, n_kv = c.scalar(10), c.scalar(10)
        self.kv, self.kv_types = {}, {}
        for _ in range(n_kv):
            key = c.string()
            if key in self.kv:
                raise GGUFError(f"duplicate key {key}")
            vtype = c.scalar(4)
            self.kv_types[key] = vtype
            self.kv[key] = c.value(vtype)
        align = self.kv.get("general.alignment", 32)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise GGUFError(f"bad general.alignment {align}")
        self.alignment = align
        self.tensors = {}
        for _ in range(n_tensors):
            name = c.string()
            if name in self.tensors:
                raise GGUFError(f"duplicate tensor {name}")
            n_dims = c.scalar(4)
            if not 1 <= n_dims <= 4:
                raise GGUFError(f"{name}: {n_dims} dims")
            ne = [c.scalar(10) for _ in range(n_dims)]
            gtype, offset = c.scalar(4), c.scalar(10)
            if gtype not in _LAYOUT:
                raise GGUFError(f"{name}: unknown type {gtype}")
            per, size, _ = _LAYOUT[gtype]
            if ne[0] % per or any(n <= 0 for n in ne):
                raise GGUFError(f"{name}: shape {ne} does not fit type {gtype}")
            n = int(np.prod(ne, dtype=np.int64))
            self.tensors[name] = {"ne": ne, "type": gtype, "offset": offset, "nbytes": n // per * size}
        self.data_start = c.pos + (-c.pos) % align
        self._check_ranges()

    def _check_ranges(self):
        end_prev = 0
        for name, t in self.tensors.items():
            if t["offset"] % self.alignment:
                raise GGUFError(f"{name}: offset {t['offset']} not aligned")
            if t["offset"] < end_prev:
                raise GGUFError(f"{name}: overlaps the previous tensor")
            end_prev = t["offset"] + t["nbytes"]
            if self.data_start + end_prev > len(self.raw):
                raise GGUFError(f"{name}: data runs past end of file")

    def tensor(self, name):
        """Dequantized float32 array, row-major shape (ne[n-1], ..., ne0)."""
        t = self.tensors[name]
        start = self.data_start + t["offset"]
        raw = self.raw[start:start + t["nbytes"]]
        shape = tuple(reversed(t["ne"]))
        if t["type"] == 0:
            return np.frombuffer(raw, dtype="<f4").reshape(shape).copy()
        if t["type"] == 1:
            return np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(shape)
        if t["type"] == 30:
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            return u.view(np.float32).reshape(shape)
        blk = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
        d = blk[:, :2].copy().view("<f2").astype(np.float32)      # [n_blocks, 1]
        q = blk[:, 2:].view(np.int8).astype(np.float32)           # [n_blocks, 32]
        return (d * q).reshape(shape)

    def type_name(self, name):
        return _LAYOUT[self.tensors[name]["type"]][2]


def summary(g):
    lines = [f"{g.path}: GGUF v{g.version}, {len(g.kv)} keys, {len(g.tensors)} tensors, "
             f"data at {g.data_start}, {len(g.raw)} bytes"]
    for k, v in g.kv.items():
        if isinstance(v, tuple):
            v = f"array[{len(v[2])}] of type {v[1]}"
        lines.append(f"  {k} = {v}")
    counts = {}
    for name in g.tensors:
        counts[g.type_name(name)] = counts.get(g.type_name(name), 0) + 1
    lines.append(f"  tensor types: {counts}")
    return "\n".join(lines)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: gguf_read.py FILE.gguf...")
        return 0 if argv else 2
    rc = 0
    for path in argv:
        try:
            print(summary(GGUFFile(path)))
        except (GGUFError, OSError, UnicodeDecodeError) as e:
            print(f"gguf_read.py: {path}: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
