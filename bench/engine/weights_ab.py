#!/usr/bin/env python3
"""weights_ab.py - our CPU decode and prefill with the float matrices on the
file mapping (PHASEMARK_ENGINE_WEIGHTS=map) against the huge-page copy
(auto), alternated A B B A in fresh bench_engine processes on one file.

    bench/engine/weights_ab.py --build BUILD --file MODEL.gguf [--threads 2]
        [--reps 3] [--prompt 512] [--gen 128] [--out FILE.jsonl]

One JSON line per process (mode, repetition, tok/s, the process's user and
system CPU seconds, weights_copied_bytes), then one "summary" line per mode
with the medians and the auto/map ratios. CPU seconds stay meaningful on a
busy host, where wall-clock rates mostly measure the other work.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys


def one(a, mode, rep):
    env = dict(os.environ, PHASEMARK_ENGINE_WEIGHTS=mode)
    exe = os.path.join(a.build, "bench/engine/bench_engine")
    cmd = [exe, "--file", a.file, "--threads", str(a.threads), "--reps", "1",
           "--prompt", str(a.prompt), "--gen", str(a.gen), "--no-probe"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"weights_ab: {' '.join(cmd)} failed ({p.returncode})")
    got = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    j = next(x for x in got if x.get("bench") == "engine_file")
    return {"bench": "weights_ab", "mode": mode, "rep": rep, "threads": a.threads,
            "prefill_tok_s": j["prefill_tok_s"], "decode_tok_s": j["decode_tok_s"],
            "weights_copied_bytes": j.get("weights_copied_bytes"),
            "user_s": round(after.ru_utime - before.ru_utime, 3),
            "sys_s": round(after.ru_stime - before.ru_stime, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    out = open(a.out, "w") if a.out else None
    for r in range(a.reps):
        for mode in (("map", "auto") if r % 2 == 0 else ("auto", "map")):
            row = one(a, mode, r)
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            if out:
                out.write(line + "\n")
    med = {}
    for mode in ("map", "auto"):
        rs = [x for x in rows if x["mode"] == mode]
        med[mode] = {k: statistics.median(x[k] for x in rs)
                     for k in ("prefill_tok_s", "decode_tok_s", "user_s", "sys_s")}
    s = {"bench": "weights_ab_summary", "file": a.file, "threads": a.threads, "reps": a.reps,
         "prompt": a.prompt, "gen": a.gen, "loadavg": os.getloadavg(), "median": med,
         "auto_over_map": {k: round(med["auto"][k] / med["map"][k], 4) if med["map"][k] else None
                           for k in ("prefill_tok_s", "decode_tok_s")}}
    print(json.dumps(s))
    if out:
        out.write(json.dumps(s) + "\n")
        out.close()


if __name__ == "__main__":
    main()
