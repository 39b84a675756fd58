#!/usr/bin/python3
"""peer_bench.py: our engine against llama.cpp's llama-bench on the same
GGUF files, one device at a time, with the two runs alternated.

It downloads nothing. Given a llama.cpp build (its llama-bench) and our
build (bench_engine for the CPU, bench_cuda_engine for CUDA, and
pm-modelwriter), it writes each synthetic model into --work (never into the
repository), then for every repetition runs both benchmarks on that one file,
in ABBA order (ours first on even repetitions, theirs first on odd ones), so
drift on a shared host lands on both sides alike. Medians over the
repetitions go to --out as one object per (device, model, type, phase) with
ours_tok_s, theirs_tok_s and ratio = ours / theirs (above 1: ours faster),
next to the facts of the host and the settings both sides ran with.

The two sides are set up to do the same work:
  prefill  one forward of --prompt tokens on an empty context
           (llama-bench -p P -b P -ub P: one ubatch; ours: n_batch = P);
  decode   --gen one-token forwards (llama-bench -n G from position 0;
           ours from position 0 on the CPU, from position 16 after a
           16-token prefill on CUDA, as bench_cuda_engine measures it);
  threads  --threads on both (CPU); -ngl 99 on CUDA, -ngl 0 on the CPU;
  attention llama-bench -fa as --flash-attn says (default 0); ours has one
           attention path per backend and no switch;
  KV cache ours f32; llama-bench in this snapshot accepts no f32 cache
           type, so theirs is its default f16 (stated in the output).
  page cache both sides map the same file, so they read the same page
           cache; how it was filled sets the page size of both mappings.
           A file just written (--page-cache written, the default) sits
           mostly in small folios and both map it with 4 KiB pages; with
           --page-cache cold the script drops the file from the cache
           after writing it (fsync, POSIX_FADV_DONTNEED: only that file)
           and the first process reads it back, which on recent kernels
           (large-folio readahead) fills 2 MiB folios that both then map
           with huge pages, as after a reboot. Under a VM's nested paging
           the two states can differ in decode speed, so compare runs only
           with the same setting (recorded in "settings").
Each process warms up once before it measures (both do this themselves).

Usage (CPU):
  bench/peer/peer_bench.py --llama-build /tmp/llama-cpu --ours-build BUILD
      --work /tmp/peer-work --threads 2 --models 110m,1b
      --types q8_0,f16,bf16,f32,q4_K,q5_K,q6_K --reps 5 --prompt 512 --gen 128
CUDA: the same with --device cuda and a llama.cpp CUDA build.
Exit status: 0 all measured, 1 some pair failed (recorded with its error),
2 usage error.
"""

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

PROG = "peer_bench"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name: dim, layers, heads, kv_heads, ffn, vocab (llama2.c's stories110M,
# TinyLlama-1.1B, Llama-3-8B's shapes).
SHAPES = {
    "15m": (288, 6, 6, 6, 768, 32000),
    "110m": (768, 12, 12, 12, 2048, 32000),
    "1b": (2048, 22, 32, 4, 5632, 32000),
    "8b": (4096, 32, 32, 8, 14336, 128256),
}
TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q5_K", "q6_K")


def die(msg, code=2):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(code)


def find_exe(root, names):
    for n in names:
        p = os.path.join(root, n)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def run(cmd, timeout):
    """Runs cmd; returns stdout, or raises RuntimeError with stderr's tail."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{os.path.basename(cmd[0])}: timed out after {timeout} s")
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"{os.path.basename(cmd[0])} exited {p.returncode}: {tail}")
    return p.stdout


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


# ---- the two sides --------------------------------------------------------

def ours_cpu(a, path, label):
    cmd = [a.ours_cpu, "--file", path, "--label", label, "--threads", str(a.threads),
           "--reps", "1", "--prompt", str(a.prompt), "--gen", str(a.gen), "--no-probe"]
    for j in json_lines(run(cmd, a.timeout)):
        if j.get("bench") == "engine_file":
            return {"prefill": j["prefill_tok_s"], "decode": j["decode_tok_s"]}
    raise RuntimeError("bench_engine printed no engine_file line")


def ours_cuda(a, path, label):
    cmd = [a.ours_cuda, path, label, str(a.gen), "1", str(a.prompt)]
    got = {}
    for j in json_lines(run(cmd, a.timeout)):
        if j.get("bench") == "engine_decode" and j.get("mode") == "graph":
            got["decode"] = j["tokens_per_s"]
        elif j.get("bench") == "engine_prefill":
            got["prefill"] = j["tokens_per_s"]
    if "decode" not in got or (a.prompt > 0 and "prefill" not in got):
        raise RuntimeError("bench_cuda_engine printed no engine_decode/engine_prefill line")
    return got


def theirs(a, path, facts):
    cmd = [a.llama_bench, "-m", path, "-p", str(a.prompt), "-n", str(a.gen),
           "-b", str(max(a.prompt, 1)), "-ub", str(max(a.prompt, 1)),
           "-fa", str(a.flash_attn), "-r", "1", "-o", "jsonl",
           "-ngl", "99" if a.device == "cuda" else "0"]
    if a.device == "cpu":
        cmd += ["-t", str(a.threads)]
    cmd += a.llama_args
    got = {}
    for j in json_lines(run(cmd, a.timeout)):
        facts.setdefault("llama_cpp_build_commit", j.get("build_commit"))
        facts.setdefault("llama_cpp_build_number", j.get("build_number"))
        facts.setdefault("llama_bench_cpu_info", j.get("cpu_info"))
        facts.setdefault("llama_bench_gpu_info", j.get("gpu_info"))
        facts.setdefault("llama_bench_backends", j.get("backends"))
        facts.setdefault("llama_bench_kv_type", j.get("type_k"))
        if j.get("n_prompt", 0) > 0 and j.get("n_gen", 0) == 0:
            got["prefill"] = j["avg_ts"]
        elif j.get("n_gen", 0) > 0 and j.get("n_prompt", 0) == 0:
            got["decode"] = j["avg_ts"]
    if (a.prompt > 0 and "prefill" not in got) or (a.gen > 0 and "decode" not in got):
        raise RuntimeError("llama-bench printed no pp/tg result")
    return got


# ---- models -----------------------------------------------------------------

def write_model(a, model, typ):
    d, l, h, kv, f, v = SHAPES[model]
    path = os.path.join(a.work, f"peer_{model}_{typ}.gguf")
    if os.path.exists(path):
        return path, False
    t0 = time.time()
    run([a.modelwriter, "synth", "-o", path, "--dim", str(d), "--layers", str(l),
         "--heads", str(h), "--kv-heads", str(kv), "--ffn", str(f), "--vocab", str(v),
         "--ctx", str(max(2048, a.prompt + a.gen + 32)), "--type", typ, "--seed", "1"],
        a.timeout)
    print(f"{PROG}: wrote {path} in {time.time() - t0:.1f} s", file=sys.stderr)
    return path, True


def drop_from_cache(path):
    """Evicts path's clean pages (after writing back its dirty ones), so
    the next mapping reads it from disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def bench_pair(a, model, typ, facts):
    """Returns result objects for the pair's phases (or one with error)."""
    path, created = write_model(a, model, typ)
    if a.page_cache == "cold":
        drop_from_cache(path)
    label = f"{model}_{typ}"
    samples = {"ours": {"prefill": [], "decode": []}, "theirs": {"prefill": [], "decode": []}}
    ours = ours_cuda if a.device == "cuda" else ours_cpu
    try:
        for r in range(a.reps):
            order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
            for side in order:
                got = ours(a, path, label) if side == "ours" else theirs(a, path, facts)
                for ph, v in got.items():
                    samples[side][ph].append(v)
            print(f"{PROG}: {a.device} {label} rep {r + 1}/{a.reps}: "
                  + " ".join(f"{s}.{p}={samples[s][p][-1]:.1f}"
                             for s in ("ours", "theirs") for p in ("prefill", "decode")
                             if samples[s][p]), file=sys.stderr)
    finally:
        if created and not a.keep_models:
            os.unlink(path)
    out = []
    for ph, n in (("prefill", a.prompt), ("decode", a.gen)):
        if n == 0:
            continue
        o = statistics.median(samples["ours"][ph])
        t = statistics.median(samples["theirs"][ph])
        out.append({"device": a.device, "model": model, "type": typ, "phase": ph, "tokens": n,
                    "ours_tok_s": round(o, 3), "theirs_tok_s": round(t, 3),
                    "ratio": round(o / t, 4) if t > 0 else None,
                    "ours_samples": [round(x, 3) for x in samples["ours"][ph]],
                    "theirs_samples": [round(x, 3) for x in samples["theirs"][ph]]})
    return out


# ---- host facts -----------------------------------------------------------

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_head(path):
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def llama_src_commit(build):
    """The commit the build was configured from (CMakeCache's source dir)."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(r"CMAKE_HOME_DIRECTORY:INTERNAL=(.*)", line)
                if m:
                    return git_head(m.group(1).strip())
    except OSError:
        pass
    return None


def gpu_facts():
    if not shutil.which("nvidia-smi"):
        return None
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None


def membw_probe(a):
    """Our read-bandwidth probe (CPU) at --threads, before the pairs: the
    default-page GB/s and the huge-page one (None where not printed)."""
    try:
        out = run([a.ours_cpu, "--models", "none", "--threads", str(a.threads), "--reps", "2"],
                  a.timeout)
    except RuntimeError:
        return None, None
    got = {}
    for j in json_lines(out):
        if j.get("bench") == "membw":
            got.setdefault(j.get("pages", "default"), j["GBps"])
    return got.get("default"), got.get("huge")


def host_facts(a):
    return {
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "online_cpus": os.cpu_count(),
        "threads": a.threads if a.device == "cpu" else None,
        "gpu": gpu_facts() if a.device == "cuda" else None,
        "loadavg_start": os.getloadavg()[0],
        "phasemark_commit": git_head(REPO),
        "llama_cpp_source_commit": llama_src_commit(a.llama_build),
    }


# ---- main -------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description="our engine vs llama-bench, same files")
    p.add_argument("--llama-build", required=True, help="llama.cpp build dir (holds bin/llama-bench)")
    p.add_argument("--ours-build", required=True, help="our CMake build dir")
    p.add_argument("--work", required=True, help="dir for the model files (outside the repo)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--models", default=None, help="comma list of " + ",".join(SHAPES))
    p.add_argument("--types", default="q8_0,f16,bf16,f32,q4_K,q5_K,q6_K")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--flash-attn", type=int, choices=(0, 1), default=0)
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "peer.json"))
    p.add_argument("--llama-args", default="", help="extra llama-bench arguments (recorded)")
    p.add_argument("--note", default="", help="recorded as is (e.g. 'host busy')")
    p.add_argument("--keep-models", action="store_true")
    p.add_argument("--page-cache", choices=("written", "cold"), default="written",
                   help="page cache of each model file when measured (see the docstring)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per process")
    a = p.parse_args(argv)
    if a.models is None:
        a.models = "1b,8b" if a.device == "cuda" else "110m,1b"
    a.llama_args = shlex.split(a.llama_args)
    a.models = [m for m in a.models.split(",") if m]
    a.types = [t for t in a.types.split(",") if t]
    for m in a.models:
        if m not in SHAPES:
            die(f"unknown model '{m}' (known: {', '.join(SHAPES)})")
    for t in a.types:
        if t not in TYPES:
            die(f"unknown type '{t}' (known: {', '.join(TYPES)})")
    if not 1 <= a.threads <= 256 or not 1 <= a.reps <= 100:
        die("--threads must be 1..256 and --reps 1..100")
    if not 0 <= a.prompt <= 32768 or not 0 <= a.gen <= 4096 or a.prompt + a.gen == 0:
        die("--prompt must be 0..32768, --gen 0..4096, not both 0")
    if a.device == "cuda" and a.prompt == 0:
        die("--device cuda needs --prompt > 0 (bench_cuda_engine measures decode with it)")
    a.llama_bench = find_exe(a.llama_build, ("bin/llama-bench", "llama-bench"))
    if not a.llama_bench:
        die(f"no llama-bench under {a.llama_build} (bin/llama-bench)")
    a.modelwriter = find_exe(a.ours_build, ("tools/modelwriter/pm-modelwriter",))
    a.ours_cpu = find_exe(a.ours_build, ("bench/engine/bench_engine",))
    a.ours_cuda = find_exe(a.ours_build, ("bench/cuda/bench_cuda_engine",))
    if not a.modelwriter:
        die(f"no tools/modelwriter/pm-modelwriter under {a.ours_build}")
    if a.device == "cpu" and not a.ours_cpu:
        die(f"no bench/engine/bench_engine under {a.ours_build}")
    if a.device == "cuda" and not a.ours_cuda:
        die(f"no bench/cuda/bench_cuda_engine under {a.ours_build} (configure with CUDA on)")
    a.work = os.path.abspath(a.work)
    if os.path.commonpath([a.work, REPO]) == REPO:
        die(f"--work {a.work} is inside the repository; model files belong elsewhere")
    os.makedirs(a.work, exist_ok=True)
    return a


def merge_out(path, doc):
    """Keeps another device's section of an existing file (CPU and CUDA
    runs happen on different hosts); this run replaces its own device's."""
    old = {}
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = {}
    runs = {k: v for k, v in old.get("runs", {}).items() if k != doc["device"]}
    runs[doc["device"]] = doc
    out = {"bench": "peer", "ratio": "ours_tok_s / theirs_tok_s (above 1: ours faster)",
           "runs": runs}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main(argv):
    a = parse_args(argv)
    facts = host_facts(a)
    if a.device == "cpu":
        facts["membw_GBps_start"], facts["membw_huge_GBps_start"] = membw_probe(a)
    results, failed = [], 0
    for m in a.models:
        for t in a.types:
            try:
                results += bench_pair(a, m, t, facts)
            except (RuntimeError, OSError) as e:
                failed += 1
                print(f"{PROG}: {a.device} {m} {t}: {e}", file=sys.stderr)
                results.append({"device": a.device, "model": m, "type": t, "error": str(e)})
    facts["loadavg_end"] = os.getloadavg()[0]
    doc = {
        "device": a.device,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "note": a.note,
        "host": facts,
        "settings": {
            "reps": a.reps, "order": "ABBA: ours first on even reps, theirs first on odd",
            "statistic": "median of per-process measurements (each process warms up once)",
            "prompt_tokens": a.prompt, "gen_tokens": a.gen,
            "threads": a.threads if a.device == "cpu" else None,
            "llama_bench_args": f"-p {a.prompt} -n {a.gen} -b {max(a.prompt, 1)} "
                                f"-ub {max(a.prompt, 1)} -fa {a.flash_attn} -r 1 "
                                + (f"-t {a.threads} -ngl 0" if a.device == "cpu" else "-ngl 99")
                                + "".join(" " + x for x in a.llama_args),
            "flash_attn_theirs": bool(a.flash_attn),
            "kv_cache": "ours f32; theirs f16 (llama-bench takes no f32 cache type)",
            "decode_start_pos": "ours 0, theirs 0" if a.device == "cpu" else "ours 16, theirs 0",
            "models": "pm-modelwriter synth, seed 1, random weights",
            "page_cache": a.page_cache,
            # the CPU backend copies float matrices onto huge pages unless "map"
            "ours_weights": os.environ.get("PHASEMARK_ENGINE_WEIGHTS") or "auto",
        },
        "results": results,
    }
    merge_out(a.out, doc)
    print(f"{PROG}: wrote {a.out} ({len(results)} entries, {failed} failed)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
