#!/usr/bin/python3
"""kquant_cpu.py: k-quant CPU decode and prefill, ours (under one or more of
our kernel sets) against llama.cpp's llama-bench on llama-quantize's own
files, next to our memory-bandwidth probe taken in the same processes.

For each --models shape, pm-modelwriter writes the synthetic F16 model into
--work and llama-quantize turns it into each of --quants (Q4_K_M by
default: Q4_K matrices with Q6_K for the head and half of attn_v /
ffn_down, the mix people download). Then every repetition runs, in a
rotating order (rep r starts at side r mod k and reverses on odd reps, so
a busy host's drift falls on every side alike):
  ours   bench/engine/bench_engine --file F --threads T --reps 1, once per
         --sets entry with PHASEMARK_ENGINE_KERNELS=<set> (the first set's
         process also takes the bandwidth probe: 2 GiB summed by T threads);
  theirs llama-bench -m F -p P -n G -b P -ub P -t T -ngl 0 -r 1.
Medians over repetitions go to --out (JSON), one object per (model, quant)
with tok/s per side, ours / theirs ratios, the file's weight bytes per
decode step (as bench_engine counts them), and decode weight GB/s of each
side as a fraction of the probe's median (issue 19's targets: ours >= 0.8
of the probe and >= llama.cpp's tok/s on the same file).

Usage:
  bench/peer/kquant_cpu.py --llama-build /tmp/llama-cpu --ours-build BUILD \\
      --work /tmp/kqcpu-work --threads 2 --models 110m,1b --quants Q4_K_M \\
      --sets avx512,avx2+vnni --reps 5 --prompt 512 --gen 128
Exit status: 0 all measured, 1 some pair failed (recorded), 2 usage error.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_bench as pb  # noqa: E402  (run, json_lines, SHAPES, host facts)

PROG = "kquant_cpu"
QUANTS = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q4_K_S", "Q5_K_S")


def write_f16(a, model):
    d, l, h, kv, f, v = pb.SHAPES[model]
    path = os.path.join(a.work, f"kq_{model}_f16.gguf")
    if not os.path.exists(path):
        pb.run([a.modelwriter, "synth", "-o", path, "--dim", str(d), "--layers", str(l),
                "--heads", str(h), "--kv-heads", str(kv), "--ffn", str(f), "--vocab", str(v),
                "--ctx", str(max(2048, a.prompt + a.gen + 32)), "--type", "f16", "--seed", "1"],
               a.timeout)
    return path


def quantize(a, model, quant):
    """The quantized file, written (from the F16 one, written first when
    missing) unless --work already holds it."""
    path = os.path.join(a.work, f"kq_{model}_{quant}.gguf")
    if not os.path.exists(path):
        t0 = time.time()
        pb.run([a.quantize, write_f16(a, model), path, quant, str(a.threads)], a.timeout)
        print(f"{PROG}: wrote {path} in {time.time() - t0:.1f} s", file=sys.stderr)
    return path


def ours(a, path, label, kernels, probe):
    cmd = [a.ours_cpu, "--file", path, "--label", label, "--threads", str(a.threads),
           "--reps", "1", "--prompt", str(a.prompt), "--gen", str(a.gen)]
    if not probe:
        cmd.append("--no-probe")
    env = dict(os.environ, PHASEMARK_ENGINE_KERNELS=kernels)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=a.timeout, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"bench_engine ({kernels}): timed out after {a.timeout} s")
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"bench_engine ({kernels}) exited {p.returncode}: {tail}")
    out = p.stdout
    for j in pb.json_lines(out):
        if j.get("bench") == "engine_file":
            return {"prefill": j["prefill_tok_s"], "decode": j["decode_tok_s"],
                    "weight_bytes": j["weight_bytes"], "membw": j.get("membw_GBps") or None}
    raise RuntimeError("bench_engine printed no engine_file line")


def theirs(a, path):
    cmd = [a.llama_bench, "-m", path, "-p", str(a.prompt), "-n", str(a.gen),
           "-b", str(max(a.prompt, 1)), "-ub", str(max(a.prompt, 1)), "-fa", "0", "-r", "1",
           "-o", "jsonl", "-ngl", "0", "-t", str(a.threads)]
    got = {}
    for j in pb.json_lines(pb.run(cmd, a.timeout)):
        if j.get("n_prompt", 0) > 0 and j.get("n_gen", 0) == 0:
            got["prefill"] = j["avg_ts"]
        elif j.get("n_gen", 0) > 0 and j.get("n_prompt", 0) == 0:
            got["decode"] = j["avg_ts"]
    if (a.prompt > 0 and "prefill" not in got) or "decode" not in got:
        raise RuntimeError("llama-bench printed no pp/tg result")
    return got


def med(xs):
    return statistics.median(xs) if xs else None


def bench_file(a, model, quant, path):
    sides = [("ours", s) for s in a.sets] + [("theirs", None)]
    samples = {i: {"prefill": [], "decode": []} for i in range(len(sides))}
    probes, weight_bytes = [], None
    for rep in range(a.reps):
        order = list(range(len(sides)))
        order = order[rep % len(order):] + order[:rep % len(order)]
        if rep % 2:
            order.reverse()
        for i in order:
            kind, kset = sides[i]
            if kind == "ours":
                r = ours(a, path, f"{model}_{quant}", kset, probe=(i == 0))
                weight_bytes = r["weight_bytes"]
                if r["membw"]:
                    probes.append(r["membw"])
            else:
                r = theirs(a, path)
            for ph in ("prefill", "decode"):
                if ph in r:
                    samples[i][ph].append(r[ph])
        print(f"{PROG}: {model} {quant} rep {rep + 1}/{a.reps}: " + ", ".join(
            f"{sides[i][1] or 'llama.cpp'} {samples[i]['decode'][-1]:.1f}" for i in range(len(sides))),
            file=sys.stderr)
    probe = med(probes)
    res = {"model": model, "quant": quant, "file_bytes": os.path.getsize(path),
           "weight_bytes_per_decode": weight_bytes, "membw_GBps_median": probe,
           "membw_GBps_samples": probes}
    th = len(sides) - 1
    res["theirs"] = {ph: med(samples[th][ph]) for ph in ("prefill", "decode")}
    res["theirs"]["decode_samples"] = samples[th]["decode"]
    if probe and weight_bytes:
        res["theirs"]["decode_fraction_of_probe"] = weight_bytes * res["theirs"]["decode"] / 1e9 / probe
    res["ours"] = {}
    for i, (_, kset) in enumerate(sides[:-1]):
        o = {ph: med(samples[i][ph]) for ph in ("prefill", "decode")}
        o["decode_samples"] = samples[i]["decode"]
        o["prefill_samples"] = samples[i]["prefill"]
        o["decode_vs_theirs"] = o["decode"] / res["theirs"]["decode"]
        if o["prefill"] and res["theirs"].get("prefill"):
            o["prefill_vs_theirs"] = o["prefill"] / res["theirs"]["prefill"]
        if probe and weight_bytes:
            o["decode_weight_GBps"] = weight_bytes * o["decode"] / 1e9
            o["decode_fraction_of_probe"] = o["decode_weight_GBps"] / probe
        res["ours"][kset] = o
    return res


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--llama-build", required=True, help="llama.cpp CPU build (bin/llama-bench, bin/llama-quantize)")
    p.add_argument("--ours-build", required=True)
    p.add_argument("--work", required=True, help="dir for the model files (outside the repo)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--models", default="110m,1b")
    p.add_argument("--quants", default="Q4_K_M")
    p.add_argument("--sets", default="avx512,avx2+vnni", help="our kernel sets, first is the one probed")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--out", default=os.path.join(pb.REPO, "bench", "results", "kquant_cpu.json"))
    p.add_argument("--note", default="")
    p.add_argument("--timeout", type=int, default=1800)
    a = p.parse_args(argv)
    a.models = [m for m in a.models.split(",") if m]
    a.quants = [q for q in a.quants.split(",") if q]
    a.sets = [s for s in a.sets.split(",") if s]
    for m in a.models:
        if m not in pb.SHAPES:
            pb.die(f"unknown model '{m}' (known: {', '.join(pb.SHAPES)})")
    for q in a.quants:
        if q not in QUANTS:
            pb.die(f"unknown quant '{q}' (known: {', '.join(QUANTS)})")
    if not a.sets or not 1 <= a.threads <= 256 or not 1 <= a.reps <= 100:
        pb.die("--sets must name a set, --threads be 1..256, --reps 1..100")
    if not 0 <= a.prompt <= 32768 or not 1 <= a.gen <= 4096:
        pb.die("--prompt must be 0..32768 and --gen 1..4096")
    a.llama_bench = pb.find_exe(a.llama_build, ("bin/llama-bench", "llama-bench"))
    a.quantize = pb.find_exe(a.llama_build, ("bin/llama-quantize", "llama-quantize"))
    a.modelwriter = pb.find_exe(a.ours_build, ("tools/modelwriter/pm-modelwriter",))
    a.ours_cpu = pb.find_exe(a.ours_build, ("bench/engine/bench_engine",))
    if not (a.llama_bench and a.quantize):
        pb.die(f"no bin/llama-bench and bin/llama-quantize under {a.llama_build}")
    if not (a.modelwriter and a.ours_cpu):
        pb.die(f"no tools/modelwriter/pm-modelwriter and bench/engine/bench_engine under {a.ours_build}")
    a.work = os.path.abspath(a.work)
    if os.path.commonpath([a.work, pb.REPO]) == pb.REPO:
        pb.die(f"--work {a.work} is inside the repository; model files belong elsewhere")
    os.makedirs(a.work, exist_ok=True)
    return a


def main(argv):
    a = parse_args(argv)
    a.device = "cpu"
    facts = pb.host_facts(a)
    results, failed = [], 0
    for m in a.models:
        for q in a.quants:
            try:
                results.append(bench_file(a, m, q, quantize(a, m, q)))
            except (RuntimeError, OSError) as e:
                failed += 1
                print(f"{PROG}: {m} {q}: {e}", file=sys.stderr)
                results.append({"model": m, "quant": q, "error": str(e)})
    facts["loadavg_end"] = os.getloadavg()[0]
    doc = {
        "bench": "kquant_cpu",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "note": a.note,
        "host": facts,
        "settings": {
            "reps": a.reps, "order": "rotating start, reversed on odd reps",
            "statistic": "median of per-process measurements (each warms up once)",
            "prompt_tokens": a.prompt, "gen_tokens": a.gen, "threads": a.threads,
            "ours_sets": a.sets,
            "llama_bench_args": f"-p {a.prompt} -n {a.gen} -b {max(a.prompt, 1)} -ub {max(a.prompt, 1)} "
                                f"-fa 0 -r 1 -t {a.threads} -ngl 0",
            "kv_cache": "ours f32; theirs f16",
            "models": "pm-modelwriter synth f16, seed 1, then llama-quantize",
            "probe": "bench_engine's read-bandwidth probe at --threads, in the first set's process",
        },
        "results": results,
    }
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, a.out)
    print(f"{PROG}: wrote {a.out} ({len(results)} entries, {failed} failed)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
