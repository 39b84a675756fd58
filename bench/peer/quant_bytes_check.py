#!/usr/bin/python3
"""quant_bytes_check.py: our Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 quantizers
against ggml's reference quantizer, byte for byte.

pm-modelwriter synth writes one F32 model and, from the same generated
weights (same shape and seed), a model per type; llama-quantize --pure
quantizes the F32 model to each type (without an importance matrix ggml
uses its reference rounding for these types). Every tensor both files hold
in the type must be byte-identical; the k-quants are not checked here (our
k-quant quantizer is plain round-to-nearest, not llama.cpp's scale search).
The mixes' tensor types (pm-modelwriter q4_K_M / q5_K_M against
llama-quantize Q4_K_M / Q5_K_M) are compared for a shape whose ffn width
is not a multiple of 256, where llama.cpp falls back to q5_0 / q5_1 /
q8_0.

Usage:
  bench/peer/quant_bytes_check.py --llama-build /tmp/llama-cpu --ours-build BUILD
      --work /tmp/qb-work [--shape 256,8,4,2,288,300]
One JSON object on stdout; exit 0 when every tensor matches, 1 otherwise.
"""

import argparse
import json
import os
import struct
import subprocess
import sys

PROG = "quant_bytes_check"
BLOCKS = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34)}
TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        lines = [l for l in p.stderr.splitlines() if l.strip()] or ["(no message)"]
        raise SystemExit(f"{PROG}: {os.path.basename(cmd[0])} exited {p.returncode}: {lines[-1]}")
    return p.stdout


def read_gguf(path):
    """(bytes, data start, {name: (type, n_elements, offset)})."""
    b = open(path, "rb").read()
    pos = [8]  # after magic and version

    def take(fmt):
        v = struct.unpack_from("<" + fmt, b, pos[0])
        pos[0] += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        n = take("Q")
        pos[0] += n
        return b[pos[0] - n:pos[0]].decode()

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    n_tensors, n_kv = take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        k, t = string(), take("I")
        v = value(t)
        if k == "general.alignment":
            align = v
    tensors = {}
    for _ in range(n_tensors):
        name = string()
        ne = [take("Q") for _ in range(take("I"))]
        t, off = take("I"), take("Q")
        n = 1
        for x in ne:
            n *= x
        tensors[name] = (t, n, off)
    return b, (pos[0] + align - 1) // align * align, tensors


def tensor_bytes(f, name):
    b, base, ts = f
    t, n, off = ts[name]
    elems, size = BLOCKS[t]
    return b[base + off:base + off + n // elems * size]


def main(argv):
    p = argparse.ArgumentParser(prog=PROG)
    p.add_argument("--llama-build", required=True)
    p.add_argument("--ours-build", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--shape", default="256,8,4,2,288,300", help="dim,layers,heads,kv_heads,ffn,vocab")
    p.add_argument("--seed", default="5")
    a = p.parse_args(argv)
    quantize = os.path.join(a.llama_build, "bin", "llama-quantize")
    mw = os.path.join(a.ours_build, "tools", "modelwriter", "pm-modelwriter")
    os.makedirs(a.work, exist_ok=True)
    d, l, h, kv, ff, v = a.shape.split(",")

    def synth(path, t):
        run([mw, "synth", "-o", path, "--dim", d, "--layers", l, "--heads", h, "--kv-heads", kv,
             "--ffn", ff, "--vocab", v, "--ctx", "64", "--type", t, "--seed", a.seed])

    src = os.path.join(a.work, "src_f32.gguf")
    synth(src, "f32")
    out = {"bench": "quant_bytes", "shape": a.shape, "seed": a.seed, "types": {}, "mixes": {}}
    ok = True
    for t in TYPES:
        ref, mine = os.path.join(a.work, f"ref_{t}.gguf"), os.path.join(a.work, f"ours_{t}.gguf")
        run([quantize, "--pure", src, ref, t.upper(), "1"])
        synth(mine, t)
        fr, fm = read_gguf(ref), read_gguf(mine)
        same, differ = 0, []
        for name, (ty, _, _) in fm[2].items():
            if ty not in BLOCKS or fr[2].get(name, (None,))[0] != ty:
                continue
            if tensor_bytes(fr, name) == tensor_bytes(fm, name):
                same += 1
            else:
                differ.append(name)
        out["types"][t] = {"identical": same, "differ": differ}
        ok = ok and same > 0 and not differ
        os.unlink(ref)
        os.unlink(mine)
    f16 = os.path.join(a.work, "src_f16.gguf")
    synth(f16, "f16")
    for mix in ("Q4_K_M", "Q5_K_M"):
        ref, mine = os.path.join(a.work, f"ref_{mix}.gguf"), os.path.join(a.work, f"ours_{mix}.gguf")
        run([quantize, f16, ref, mix, "1"])
        synth(mine, mix.lower().replace("_k_m", "_K_M"))
        tr = {n: t for n, (t, _, _) in read_gguf(ref)[2].items()}
        tm = {n: t for n, (t, _, _) in read_gguf(mine)[2].items()}
        differ = sorted(n for n in set(tr) | set(tm) if tr.get(n) != tm.get(n))
        counts = {}
        for t in tr.values():
            counts[t] = counts.get(t, 0) + 1
        out["mixes"][mix] = {"tensors": len(tr), "type_counts": counts, "differ": differ}
        ok = ok and not differ
        os.unlink(ref)
        os.unlink(mine)
    os.unlink(src)
    os.unlink(f16)
    out["pass"] = ok
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
