"""gguf_write.py — a small GGUF v3 writer (written from the format spec).

File layout, all little-endian:
  "GGUF" u32 version=3 u64 n_tensors u64 n_kv
  n_kv x (string key, u32 value_type, value)
  n_tensors x (string name, u32 n_dims, u64 ne[n_dims] (ne0 first),
               u32 ggml_type, u64 offset from the data section)
  zero padding to `alignment`, then the data section; every tensor's data
  starts at a multiple of `alignment` from the section's start.
A string is u64 byte length + UTF-8 bytes (no NUL). An array is u32
element type + u64 count + the elements.

Tensor types written: F32 (0), F16 (1) and Q8_0 (8). Q8_0 follows ggml's
reference quantizer bit for bit: per block of 32, d = amax/127 in float32,
q = round-half-away-from-zero(x * (1/d)) with the product in float32, d
stored as fp16 (round to nearest even).
"""
import os
import struct

import numpy as np

# Metadata value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
               F32: "<f", BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
_ARRAY_DTYPE = {U8: "<u1", I8: "<i1", U16: "<u2", I16: "<i2", U32: "<u4", I32: "<i4",
                F32: "<f4", BOOL: "<u1", U64: "<u8", I64: "<i8", F64: "<f8"}

# ggml tensor types.
GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
QK8_0 = 32
_Q8_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", (QK8_0,))])
assert _Q8_0_BLOCK.itemsize == 34


def _gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def quantize_q8_0(x):
    """float32 array whose last dim is a multiple of 32 -> Q8_0 block bytes."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape[-1] % QK8_0:
        raise ValueError(f"Q8_0 needs rows of whole 32-element blocks, got {x.shape}")
    blocks = x.reshape(-1, QK8_0)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    v = (blocks * inv[:, None]).astype(np.float32)
    # roundf(): half away from zero. Done in float64, where |v| + 0.5 is exact
    # for every float32 |v| <= 127, so no double rounding.
    v64 = v.astype(np.float64)
    q = np.sign(v64) * np.floor(np.abs(v64) + 0.5)
    out = np.empty(blocks.shape[0], dtype=_Q8_0_BLOCK)
    out["d"] = d.astype(np.float16)
    out["qs"] = np.clip(q, -127, 127).astype(np.int8)
    return out.tobytes()


def encode_tensor(arr, ggml_type):
    if ggml_type == GGML_F32:
        return np.ascontiguousarray(arr, dtype="<f4").tobytes()
    if ggml_type == GGML_F16:
        return np.ascontiguousarray(arr, dtype="<f2").tobytes()
    if ggml_type == GGML_Q8_0:
        return quantize_q8_0(arr)
    raise ValueError(f"unsupported ggml type {ggml_type}")


class GGUFWriter:
    """Collects metadata and tensors in order, then writes one file."""

    def __init__(self, alignment=32):
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError("alignment must be a power of two")
        self.alignment = alignment
        self._kv = []        # (key, encoded type+value bytes)
        self._keys = set()
        self._tensors = []   # (name, ne list, ggml type, data bytes)
        self.add(U32, "general.alignment", alignment)

    def _put(self, key, payload):
        if not key or key in self._keys:
            raise ValueError(f"empty or duplicate metadata key {key!r}")
        self._keys.add(key)
        self._kv.append((key, payload))

    def add(self, vtype, key, value):
        """A scalar or string entry."""
        if vtype == STRING:
            payload = struct.pack("<I", STRING) + _gguf_string(value)
        elif vtype in _SCALAR_FMT:
            payload = struct.pack("<I", vtype) + struct.pack(_SCALAR_FMT[vtype], value)
        else:
            raise ValueError(f"use add_array for type {vtype}")
        self._put(key, payload)

    def add_array(self, elem_type, key, values):
        head = struct.pack("<IIQ", ARRAY, elem_type, len(values))
        if elem_type == STRING:
            body = b"".join(_gguf_string(v) for v in values)
        elif elem_type in _ARRAY_DTYPE:
            body = np.asarray(values).astype(_ARRAY_DTYPE[elem_type]).tobytes()
        else:
            raise ValueError(f"unsupported array element type {elem_type}")
        self._put(key, head + body)

    def add_tensor(self, name, arr, ggml_type):
        """arr: row-major numpy array; its LAST axis becomes ne0."""
        if any(t[0] == name for t in self._tensors):
            raise ValueError(f"duplicate tensor {name!r}")
        arr = np.asarray(arr, dtype=np.float32)
        if not 1 <= arr.ndim <= 4:
            raise ValueError(f"tensor {name!r} has {arr.ndim} dims")
        ne = list(reversed(arr.shape))
        self._tensors.append((name, ne, ggml_type, encode_tensor(arr, ggml_type)))

    def _pad(self, n):
        return (-n) % self.alignment

    def to_bytes(self):
        parts = [b"GGUF", struct.pack("<IQQ", 3, len(self._tensors), len(self._kv))]
        for key, payload in self._kv:
            parts += [_gguf_string(key), payload]
        offset = 0
        for name, ne, gtype, data in self._tensors:
            parts += [_gguf_string(name), struct.pack("<I", len(ne)),
                      struct.pack(f"<{len(ne)}Q", *ne), struct.pack("<IQ", gtype, offset)]
            offset += len(data) + self._pad(len(data))
        head = b"".join(parts)
        out = [head, b"\0" * self._pad(len(head))]
        for _name, _ne, _gtype, data in self._tensors:
            out += [data, b"\0" * self._pad(len(data))]
        return b"".join(out)

    def write(self, path):
        blob = self.to_bytes()
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
        return len(blob)
