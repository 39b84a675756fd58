#!/usr/bin/python3
"""kquant_check.py: llama.cpp as the independent reference for our quantized
file support (Q4_K_M, Q5_K_M, Q6_K and the older Q4_1, Q5_0, Q5_1 files, and on
request Q2_K and Q3_K_S/M/L, written by llama.cpp's llama-quantize; its Q4_K_M / Q5_K_M hold q5_0 / q5_1
tensors wherever rows are not whole 256-element super-blocks, as the KJV
target's ffn_down).

For each source model (a synthetic F16 model from pm-modelwriter, and the
shipped KJV target, a trained model with a real vocabulary, whose Q8_0 file
llama-quantize re-quantizes):
  1. llama-quantize writes a version per --quants type (default Q4_K_M,
     Q5_K_M, Q6_K, Q4_1, Q5_0, Q5_1) into --work;
  2. for the source and every version, llama-perplexity
     --kl-divergence-base saves llama.cpp's teacher-forced log-probabilities
     over a text (both halves of each n_ctx chunk are run, the second
     half's rows are saved, 16-bit quantized per row) together with the
     token ids it used;
  3. pm-generate --tokens (the same ids, BOS first as llama.cpp does)
     --dump-logits writes our logits for every position of each chunk;
  4. per file: the largest and mean |our log-prob - theirs| over the saved
     rows (entries that llama.cpp's format clamps are skipped), and top-1
     agreement with the margin rule: where the argmaxes differ, our own
     logit gap between our top token and theirs must be under --margin (a
     near tie, counted and listed); any other difference fails;
  5. context: each side's quantized logits against its own source file
     (how far quantization moves the model), so the implementation
     difference can be read against the quantization error;
  6. for the synthetic source, pm-modelwriter's own q4_K_M / q5_K_M mixes
     of the same shape are checked tensor by tensor against the types
     llama-quantize chose.
Results go to --out-json (one object per file) and a markdown table on
stdout (bench/results/kquant_peer.md is written from it).

Usage:
  bench/peer/kquant_check.py --llama-build /tmp/llama-cpu --ours-build BUILD
      --work /tmp/kq-work [--threads 2] [--ctx 256] [--chunks 2]
      [--quants Q4_K_M,Q5_K_M,Q6_K,Q4_1,Q5_0,Q5_1]
Exit status: 0 every file within tolerance, 1 a file failed, 2 usage error.
"""

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time

PROG = "kquant_check"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUANTS = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q4_1", "Q5_0", "Q5_1")
# Accepted by --quants beyond the default set (the 2- and 3-bit k-quants:
# llama-quantize's Q2_K mix holds q2_K, q3_K and q4_K tensors, Q3_K_M
# q3_K, q4_K, q5_K and q6_K ones).
MORE_QUANTS = ("Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L")


def die(msg, code=2):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(code)


def run(cmd, timeout=1800):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        lines = [l for l in p.stderr.strip().splitlines() if l.strip()] or ["(no message)"]
        raise RuntimeError(f"{os.path.basename(cmd[0])} exited {p.returncode}: {lines[-1]}")
    return p.stdout, p.stderr


# ---- llama.cpp's --kl-divergence-base file ---------------------------------
# Layout (little-endian): "_logits_", i32 n_ctx, i32 n_vocab, i32 n_chunk,
# n_chunk * n_ctx i32 token ids, then per chunk n_ctx - 1 - n_ctx/2 rows of
# nv = 2*((n_vocab+1)/2) + 4 u16: a f32 scale and a f32 min log-prob in the
# first four, then one u16 q per vocabulary entry: log-prob = min + scale*q
# (q = 0 also stands for anything below the row's max - 16).

def read_base(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"_logits_":
        raise RuntimeError(f"{path}: not a llama.cpp logits file")
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", data, 8)
    off = 20
    tokens = list(struct.unpack_from(f"<{n_chunk * n_ctx}i", data, off))
    off += 4 * n_chunk * n_ctx
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows_per = n_ctx - 1 - n_ctx // 2
    need = off + n_chunk * rows_per * nv * 2
    if len(data) < need:
        raise RuntimeError(f"{path}: {len(data)} bytes, expected {need}")
    rows = []
    for r in range(n_chunk * rows_per):
        base = off + r * nv * 2
        scale, lo = struct.unpack_from("<ff", data, base)
        q = struct.unpack_from(f"<{n_vocab}H", data, base + 8)
        rows.append((scale, lo, q))
    return {"n_ctx": n_ctx, "n_vocab": n_vocab, "n_chunk": n_chunk, "tokens": tokens,
            "rows_per_chunk": rows_per, "rows": rows}


def log_softmax(row):
    m = max(row)
    s = sum(math.exp(x - m) for x in row)
    ls = m + math.log(s)
    return [x - ls for x in row]


def read_ours(path, n_rows, n_vocab):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != n_rows * n_vocab * 4:
        raise RuntimeError(f"{path}: {len(data)} bytes, expected {n_rows * n_vocab * 4}")
    return [struct.unpack_from(f"<{n_vocab}f", data, r * n_vocab * 4) for r in range(n_rows)]


# ---- the two sides -----------------------------------------------------------

def theirs(a, model, text, out):
    cmd = [a.perplexity, "-m", model, "-f", text, "-c", str(a.ctx), "-b", str(a.ctx),
           "--chunks", str(a.chunks), "-t", str(a.threads), "-ctk", "f32", "-ctv", "f32",
           "--kl-divergence-base", out]
    if a.ngl is not None:
        cmd += ["-ngl", str(a.ngl)]
    run(cmd)
    return read_base(out)


def ours(a, model, base, bos, work):
    """Our logits rows matching base's saved rows, chunk by chunk."""
    rows = []
    n_ctx, first = base["n_ctx"], base["n_ctx"] // 2
    for c in range(base["n_chunk"]):
        ids = base["tokens"][c * n_ctx:(c + 1) * n_ctx]
        ids[0] = bos  # llama-perplexity puts BOS first in every chunk
        dump = os.path.join(work, "ours.logits")
        run([a.generate, "-m", model, "--tokens", ",".join(map(str, ids)), "-n", "0",
             "--threads", str(a.threads), "--ctx", str(n_ctx), "--dump-logits", dump])
        got = read_ours(dump, n_ctx, base["n_vocab"])
        os.unlink(dump)
        rows += got[first:first + base["rows_per_chunk"]]
    return rows


# ---- comparison ------------------------------------------------------------

def theirs_logprobs(row):
    scale, lo, q = row
    return [lo + scale * x for x in q], q


def compare(base, ours_rows, margin):
    """Our log-probs against theirs over every saved row."""
    worst, total, count, agree, ties, flips = 0.0, 0.0, 0, 0, [], []
    for i, (brow, orow) in enumerate(zip(base["rows"], ours_rows)):
        tl, q = theirs_logprobs(brow)
        ol = log_softmax(orow)
        floor = brow[1] + brow[0]  # entries at q == 0 may be clamped
        for v in range(len(q)):
            if q[v] == 0 and ol[v] <= floor:
                continue
            d = abs(ol[v] - tl[v])
            total += d
            count += 1
            worst = max(worst, d)
        ot = max(range(len(orow)), key=orow.__getitem__)
        qmax = max(q)
        if q[ot] == qmax:  # theirs' top set holds our top (16-bit resolution)
            agree += 1
            continue
        tt = q.index(qmax)
        gap = orow[ot] - orow[tt]
        (ties if gap < margin else flips).append({"row": i, "ours": ot, "theirs": tt,
                                                  "our_gap": round(gap, 5)})
    return {"rows": len(ours_rows), "max_abs_logprob_diff": round(worst, 5),
            "max_near_tie_gap": max((t["our_gap"] for t in ties), default=None),
            "mean_abs_logprob_diff": round(total / max(count, 1), 6),
            "top1_agree": agree, "near_ties": ties, "mismatches": flips}


def self_shift(rows_a, rows_b):
    """Max |log-prob difference| and top-1 agreement of one side's rows for
    two files (quantized against its source)."""
    worst, agree = 0.0, 0
    for ra, rb in zip(rows_a, rows_b):
        la, lb = log_softmax(ra), log_softmax(rb)
        worst = max(worst, max(abs(x - y) for x, y in zip(la, lb) if x > -16 and y > -16))
        agree += max(range(len(ra)), key=ra.__getitem__) == max(range(len(rb)), key=rb.__getitem__)
    return round(worst, 4), agree


def theirs_rows_as_logprobs(base):
    return [theirs_logprobs(r)[0] for r in base["rows"]]


# ---- driver -----------------------------------------------------------------

def tensor_map(a, path):
    out, _ = run([a.modelwriter, "info", path])
    return {l.split()[1]: l.split()[2] for l in out.splitlines() if l.startswith("tensor ")}


def mix_check(a, mix, theirs_path):
    """pm-modelwriter's mix of the synthetic shape against llama-quantize's."""
    ours_path = os.path.join(a.work, f"synth_mw_{mix}.gguf")
    d, l, h, kv, ff, v = a.synth_shape.split(",")
    run([a.modelwriter, "synth", "-o", ours_path, "--dim", d, "--layers", l, "--heads", h,
         "--kv-heads", kv, "--ffn", ff, "--vocab", v, "--ctx", str(max(a.ctx, 512)),
         "--type", mix.lower().replace("_k_m", "_K_M"), "--seed", "7"])
    mine, theirs_map = tensor_map(a, ours_path), tensor_map(a, theirs_path)
    os.unlink(ours_path)
    diff = sorted(n for n in set(mine) | set(theirs_map) if mine.get(n) != theirs_map.get(n))
    return {"tensors": len(theirs_map), "differ": diff}


def tensor_types(a, path):
    out, _ = run([a.modelwriter, "info", path])
    counts = {}
    for line in out.splitlines():
        if line.startswith("tensor "):
            t = line.split()[2]
            counts[t] = counts.get(t, 0) + 1
    return counts


def text_file(a):
    path = os.path.join(a.work, "text.txt")
    if shutil.which("bible"):
        out = subprocess.run(["bible", "-f", "jn1:1-jn4:54"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, text=True).stdout
        lines = [l.split(" ", 1)[1] for l in out.splitlines() if " " in l]
        src = "KJV, John 1-4 (Debian bible-kjv)"
    else:
        with open("/usr/share/common-licenses/GPL-3") as f:
            lines = f.read().splitlines()
        src = "/usr/share/common-licenses/GPL-3"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, src


def sources(a):
    out = []
    if "synth" in a.sources:
        path = os.path.join(a.work, "synth_f16.gguf")
        d, l, h, kv, ff, v = (int(x) for x in a.synth_shape.split(","))
        run([a.modelwriter, "synth", "-o", path, "--dim", str(d), "--layers", str(l),
             "--heads", str(h), "--kv-heads", str(kv), "--ffn", str(ff), "--vocab", str(v),
             "--ctx", str(max(a.ctx, 512)), "--type", "f16", "--seed", "7"])
        out.append(("synth", path, f"pm-modelwriter synth {a.synth_shape} (dim,layers,heads,"
                    "kv_heads,ffn,vocab) f16 seed 7", []))
    if "kjv" in a.sources:
        out.append(("kjv", os.path.join(REPO, "models", "phasemark-kjv-target-q8_0.gguf"),
                    "models/phasemark-kjv-target-q8_0.gguf (trained, Q8_0)", ["--allow-requantize"]))
    return out


def check_source(a, name, src, desc, qflags, text):
    entries = []
    src_base = theirs(a, src, text, os.path.join(a.work, f"{name}_src.kld"))
    src_ours = ours(a, src, src_base, 1, a.work)
    files = [("source", src)]
    for q in a.quants:
        dst = os.path.join(a.work, f"{name}_{q}.gguf")
        run([a.quantize] + qflags + [src, dst, q, str(a.threads)])
        files.append((q, dst))
    mixes = {}
    if name == "synth":
        for q in ("Q4_K_M", "Q5_K_M"):
            if q not in a.quants:
                continue
            mixes[q] = mix_check(a, q, os.path.join(a.work, f"{name}_{q}.gguf"))
            print(f"{PROG}: pm-modelwriter {q} vs llama-quantize: {mixes[q]['tensors']} tensors, "
                  f"{len(mixes[q]['differ'])} differ", file=sys.stderr)
    for q, path in files:
        e = {"source": name, "source_file": desc, "quant": q,
             "tensor_types": tensor_types(a, path)}
        try:
            base = src_base if q == "source" else theirs(a, path, text,
                                                         os.path.join(a.work, f"{name}_{q}.kld"))
            rows = src_ours if q == "source" else ours(a, path, base, 1, a.work)
        except RuntimeError as err:
            e["error"] = str(err)
            # A clean refusal of a type the engine does not compute with is
            # recorded as unsupported, not as a disagreement.
            e["unsupported"] = "does not compute with" in str(err)
            entries.append(e)
            print(f"{PROG}: {name} {q}: {err}", file=sys.stderr)
            continue
        if base["tokens"] != src_base["tokens"]:
            e["error"] = "llama.cpp tokenized the text differently for this file"
            entries.append(e)
            continue
        e.update(compare(base, rows, a.margin))
        if q in mixes:
            e["modelwriter_mix"] = mixes[q]
        if q != "source":
            e["ours_vs_own_source"] = dict(zip(("max_abs_logprob_diff", "top1_agree"),
                                               self_shift(rows, src_ours)))
            e["theirs_vs_own_source"] = dict(zip(("max_abs_logprob_diff", "top1_agree"),
                                                 self_shift(theirs_rows_as_logprobs(base),
                                                            theirs_rows_as_logprobs(src_base))))
        tol = a.tol_float if q == "source" and name == "synth" else a.tol_quant
        e["tolerance"] = tol
        e["pass"] = (e["max_abs_logprob_diff"] <= tol and not e["mismatches"]
                     and not e.get("modelwriter_mix", {}).get("differ"))
        entries.append(e)
        print(f"{PROG}: {name} {q}: max {e['max_abs_logprob_diff']}, top1 {e['top1_agree']}/"
              f"{e['rows']}, near ties {len(e['near_ties'])}, mismatches {len(e['mismatches'])}",
              file=sys.stderr)
        if q != "source" and not a.keep:
            os.unlink(path)
    return entries


def mix_cell(m):
    if not m:
        return ""
    if not m["differ"]:
        return f"same types ({m['tensors']} tensors)"
    return f"{len(m['differ'])} of {m['tensors']} differ: " + ", ".join(m["differ"][:4])


def markdown(doc):
    lines = ["| model | file | tensor types | rows | max abs dlogp | mean abs dlogp | top-1 same |"
             " near ties | mismatches | tol | ok | ours vs own src (max, top-1) |"
             " theirs vs own src (max, top-1) | pm-modelwriter mix |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"]
    for e in doc["results"]:
        tt = ", ".join(f"{k} {v}" for k, v in sorted(e["tensor_types"].items()))
        if "error" in e:
            why = "unsupported type, refused" if e.get("unsupported") else "ERROR"
            lines.append(f"| {e['source']} | {e['quant']} | {tt} | | | | | | | | {why}: "
                         f"{e['error']} | | | |")
            continue
        ov = e.get("ours_vs_own_source", {})
        tv = e.get("theirs_vs_own_source", {})
        lines.append(
            f"| {e['source']} | {e['quant']} | {tt} | {e['rows']} | {e['max_abs_logprob_diff']} |"
            f" {e['mean_abs_logprob_diff']} | {e['top1_agree']} | {len(e['near_ties'])}"
            f"{' (gap <= %s)' % e['max_near_tie_gap'] if e['near_ties'] else ''} |"
            f" {len(e['mismatches'])} | {e['tolerance']} | {'yes' if e['pass'] else 'NO'} |"
            f" {ov.get('max_abs_logprob_diff', '')}, {ov.get('top1_agree', '')} |"
            f" {tv.get('max_abs_logprob_diff', '')}, {tv.get('top1_agree', '')} |"
            f" {mix_cell(e.get('modelwriter_mix'))} |")
    return "\n".join(lines) + "\n"


def find_exe(root, names):
    for n in names:
        p = os.path.join(root, n)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description="our logits vs llama.cpp's on k-quant files")
    p.add_argument("--llama-build", required=True)
    p.add_argument("--ours-build", required=True)
    p.add_argument("--work", required=True, help="dir for models and logits (outside the repo)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--ctx", type=int, default=256, help="tokens per chunk (llama-perplexity -c)")
    p.add_argument("--chunks", type=int, default=2)
    p.add_argument("--sources", default="synth,kjv")
    p.add_argument("--quants", default=",".join(QUANTS),
                   help="llama-quantize types to write from each source")
    p.add_argument("--synth-shape", default="768,12,12,12,2048,32000",
                   help="dim,layers,heads,kv_heads,ffn,vocab (default: the 110M shape)")
    p.add_argument("--margin", type=float, default=0.2,
                   help="near tie: our logit gap between the two top tokens below this")
    p.add_argument("--tol-float", type=float, default=0.02,
                   help="max |dlogp| allowed on the synthetic F16 source")
    p.add_argument("--tol-quant", type=float, default=0.25,
                   help="max |dlogp| allowed on quantized files")
    p.add_argument("--ngl", type=int, default=None, help="llama-perplexity -ngl (CUDA builds)")
    p.add_argument("--out-json", default=os.path.join(REPO, "bench", "results", "kquant_peer.json"))
    p.add_argument("--note", default="")
    p.add_argument("--keep", action="store_true")
    a = p.parse_args(argv)
    a.sources = [s for s in a.sources.split(",") if s]
    if any(s not in ("synth", "kjv") for s in a.sources) or not a.sources:
        die("--sources takes synth and/or kjv")
    a.quants = [q for q in a.quants.split(",") if q]
    if any(q not in QUANTS + MORE_QUANTS for q in a.quants):
        die("--quants takes " + ", ".join(QUANTS + MORE_QUANTS))
    if a.ctx < 16 or a.ctx % 2 or a.chunks < 1 or not 1 <= a.threads <= 256:
        die("--ctx must be even and >= 16, --chunks >= 1, --threads 1..256")
    a.perplexity = find_exe(a.llama_build, ("bin/llama-perplexity",))
    a.quantize = find_exe(a.llama_build, ("bin/llama-quantize",))
    if not a.perplexity or not a.quantize:
        die(f"need bin/llama-perplexity and bin/llama-quantize under {a.llama_build} "
            "(cmake --build DIR --target llama-perplexity llama-quantize)")
    a.generate = find_exe(a.ours_build, ("tools/generate/pm-generate",))
    a.modelwriter = find_exe(a.ours_build, ("tools/modelwriter/pm-modelwriter",))
    if not a.generate or not a.modelwriter:
        die(f"need tools/generate/pm-generate and tools/modelwriter/pm-modelwriter under {a.ours_build}")
    a.work = os.path.abspath(a.work)
    if os.path.commonpath([a.work, REPO]) == REPO:
        die(f"--work {a.work} is inside the repository")
    os.makedirs(a.work, exist_ok=True)
    return a


def main(argv):
    a = parse_args(argv)
    text, text_src = text_file(a)
    results = []
    t0 = time.time()
    for name, src, desc, qflags in sources(a):
        results += check_source(a, name, src, desc, qflags, text)
    doc = {"bench": "kquant_peer",
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "note": a.note, "text": text_src, "ctx": a.ctx, "chunks": a.chunks,
           "threads": a.threads, "seconds": round(time.time() - t0, 1),
           "rule": (f"per file: max |our log-softmax - llama.cpp's| over the saved rows <= "
                    f"tolerance ({a.tol_float} for the synthetic F16 source, {a.tol_quant} for "
                    f"quantized files); top-1 ids equal except where our own logit gap between "
                    f"our top token and theirs is below {a.margin} (a near tie)"),
           "llama_cpp": "llama-quantize, llama-perplexity --kl-divergence-base -ctk f32 -ctv f32",
           "results": results}
    with open(a.out_json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    sys.stdout.write(markdown(doc))
    bad = [e for e in results if not e.get("pass") and not e.get("unsupported")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
