#!/usr/bin/env python3
"""final_tables.py — reads what bench/cuda/run_final.sh left in its work
folder and writes the tables (text) and one JSON object with the results.

    final_tables.py WORK TABLES_TXT RESULTS_JSON

Every part is optional: a step that failed leaves its files missing, and
its entry in the JSON says so ("missing") instead of stopping the rest.

Parts:
  api      CUDA runtime+driver API calls by function (CUPTI callbacks), one
           request, markers off / roctx / nvtx / off again: tables, diff
  ranges   kernels (CUPTI) by the phasemark range enclosing their launch
           call on the same thread, from a `phasemark capture --kernels`
  ncu      kernels Nsight Compute profiled under the prefill and decode
           NVTX filters, against the CUPTI counts for the same ranges
  hetero   greedy token ids per placement and prompt against monolithic CPU
           (hetero: the Q8_0 target; hetero_f16: the F16 draft)
  spec     autoregressive vs speculative tokens/s on CUDA, parity, acceptance
Stdlib only (the GPU machine's python3 has no extra packages we rely on).
"""
import collections
import csv
import glob
import json
import os
import re
import sys


def read_csv_rows(path):
    """Rows of a CSV as dicts; the header is the first line starting with
    a quoted field (ncu logs put ==PROF== lines before it)."""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"')), None)
    if start is None:
        return []
    return list(csv.DictReader(lines[start:]))


def api_files(path):
    if os.path.isdir(path):
        merged = os.path.join(path, "cuda_api_trace.csv")
        if os.path.exists(merged):
            return [merged]
        return sorted(glob.glob(os.path.join(path, "*.api.csv")))
    return [path] if os.path.exists(path) else []


def api_counts(path):
    files = api_files(path)
    if not files:
        return None
    counts = collections.Counter()
    for f in files:
        for r in read_csv_rows(f):
            counts[(r.get("Domain", "?"), r.get("Function", "?"))] += 1
    return counts


def api_part(work, out):
    runs = ["off", "roctx", "nvtx", "off2"]
    counts = {r: api_counts(os.path.join(work, "api_" + r)) for r in runs}
    have = [r for r in runs if counts[r] is not None]
    res = {"runs": {r: ("missing" if counts[r] is None else sum(counts[r].values())) for r in runs}}
    if not have:
        res["status"] = "missing"
        return res
    keys = sorted(set().union(*(counts[r].keys() for r in have)))
    out.append("== CUDA API calls of one request, by function (CUPTI callbacks) ==")
    out.append("%-18s %-44s " % ("domain", "function") + " ".join("%8s" % r for r in have))
    diff = []
    for k in keys:
        vals = [counts[r].get(k, 0) for r in have]
        mark = "" if len(set(vals)) == 1 else "   <-- differs"
        if mark:
            diff.append({"domain": k[0], "function": k[1], **dict(zip(have, vals))})
        out.append("%-18s %-44s " % (k[0][:18], k[1][:44]) + " ".join("%8d" % v for v in vals) + mark)
    out.append("totals: " + ", ".join("%s %d" % (r, sum(counts[r].values())) for r in have))
    on_vs_off = [d for d in diff if any(d.get(r) != d.get("off") for r in ("roctx", "nvtx") if r in d)]
    out.append("rows that differ: %d (markers on vs first off run: %d)" % (len(diff), len(on_vs_off)))
    out.append("")
    res["table"] = [{"domain": k[0], "function": k[1], **{r: counts[r].get(k, 0) for r in have}}
                    for k in keys]
    res["differing_rows"] = diff
    res["identical"] = not diff and len(have) == len(runs)
    return res


def kind_of(text):
    m = re.match(r"pm\.(\w+)", text)
    return m.group(1) if m else "other"


def kernels_by_range(capdir):
    """{kind: [kernel names]} for kernels whose launch call lies inside a
    range of that kind (any depth) on the launching thread; 'outside'
    for the rest. None when the capture is missing."""
    paths = [os.path.join(capdir, n) for n in
             ("marker_api_trace.csv", "kernel_trace.csv", "cuda_api_trace.csv")]
    if not all(os.path.exists(p) for p in paths):
        return None
    ranges = collections.defaultdict(list)
    for r in read_csv_rows(paths[0]):
        if r["Start_Timestamp"] and r["End_Timestamp"]:
            ranges[(r["Process_Id"], r["Thread_Id"])].append(
                (int(r["Start_Timestamp"]), int(r["End_Timestamp"]), kind_of(r["Function"])))
    launch = {}
    for r in read_csv_rows(paths[2]):
        launch.setdefault((r["Process_Id"], r["Correlation_Id"]),
                          (r["Thread_Id"], int(r["Start_Timestamp"])))
    out = collections.defaultdict(list)
    for k in read_csv_rows(paths[1]):
        call = launch.get((k["Process_Id"], k["Correlation_Id"]))
        kinds = set()
        if call:
            tid, t = call
            kinds = {kind for s, e, kind in ranges[(k["Process_Id"], tid)] if s <= t <= e}
        for kind in (kinds or {"outside"}):
            out[kind].append(k["Kernel_Name"])
        out["all"].append(k["Kernel_Name"])
    return out


def ncu_kernels(path):
    if not os.path.exists(path):
        return None
    ids = collections.OrderedDict()
    for r in read_csv_rows(path):
        name = next((r[c] for c in ("Kernel Name", "Function Name", "Name") if r.get(c)), None)
        if r.get("ID") is not None and name is not None:
            ids.setdefault(r["ID"], name)
    return list(ids.values())


def short(name, n=70):
    return name if len(name) <= n else name[: n - 3] + "..."


def name_table(out, title, names):
    out.append(title)
    for name, c in collections.Counter(names).most_common():
        out.append("  %5d  %s" % (c, short(name)))


def ranges_ncu_part(work, out):
    res = {}
    by = kernels_by_range(os.path.join(work, "api_nvtx"))
    if by is None:
        by = kernels_by_range(os.path.join(work, "api_roctx"))
    if by is None:
        res["cupti"] = "missing"
    else:
        res["cupti"] = {k: len(v) for k, v in by.items()}
        out.append("== kernels by enclosing phasemark range (CUPTI, capture --kernels) ==")
        out.append("  " + ", ".join("%s %d" % (k, len(v)) for k, v in sorted(by.items())))
    for phase in ("prefill", "decode"):
        names = ncu_kernels(os.path.join(work, "ncu_%s.csv" % phase))
        if names is None:
            res["ncu_" + phase] = "missing"
            continue
        entry = {"profiled": len(names)}
        if by is not None:
            want = by.get(phase, [])
            entry["cupti_in_range"] = len(want)
            entry["count_match"] = len(names) == len(want)
            entry["names_match"] = collections.Counter(names) == collections.Counter(want)
            entry["cupti_outside_range"] = len(by["all"]) - len(want)
        res["ncu_" + phase] = entry
        name_table(out, "== ncu --nvtx-include regex:phasemark@pm\\.%s.*/ : %d kernels profiled%s =="
                   % (phase, len(names), "" if by is None else
                      " (CUPTI: %d launched inside %s ranges of %d in all; names match: %s)"
                      % (len(by.get(phase, [])), phase, len(by["all"]), entry["names_match"])),
                   names)
        out.append("")
    return res


def read_ids(path):
    try:
        with open(path) as f:
            text = f.read().split()
        return [int(t) for t in text]
    except (OSError, ValueError):
        return None


def hetero_part(work, out, sub="hetero", title="KJV target (Q8_0)"):
    d = os.path.join(work, sub)
    files = sorted(glob.glob(os.path.join(d, "*.ids")))
    if not files:
        return {"status": "missing"}
    runs = collections.defaultdict(dict)
    for f in files:
        name, prompt = os.path.basename(f)[:-4].rsplit(".", 1)
        runs[name][prompt] = read_ids(f)
    ref = runs.get("mono_cpu", {})
    res = {}
    out.append("== heterogeneous placements, %s: greedy ids against monolithic CPU ==" % title)
    for name in sorted(runs):
        res[name] = {}
        for prompt, ids in sorted(runs[name].items()):
            want = ref.get(prompt)
            if ids is None or want is None:
                verdict = {"ids": ids, "match": None}
            else:
                first = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), None)
                if first is None and len(ids) != len(want):
                    first = min(len(ids), len(want))
                verdict = {"ids": ids, "match": first is None, "first_diff_step": first}
            res[name][prompt] = verdict
            out.append("%-16s prompt %s: %s %s" % (name, prompt,
                       "match" if verdict["match"] else
                       ("NO REFERENCE/FAILED" if verdict["match"] is None else
                        "DIFFERS at step %d" % verdict["first_diff_step"]),
                       " ".join(map(str, ids or []))))
    out.append("")
    return res


SPEC_RE = re.compile(r"(\d+) rounds, (\d+) drafted, (\d+) accepted \(acceptance ([\d.]+)\), "
                     r"([\d.]+) tokens/round.*?(\d+) tokens in ([\d.]+) ms \(([\d.]+) tokens/s\)", re.S)
AR_RE = re.compile(r"prefill (\d+) tokens in ([\d.]+) ms.*?decode +(\d+) tokens in ([\d.]+) ms"
                   r".*?sample +([\d.]+) ms", re.S)


def spec_part(work, out):
    d = os.path.join(work, "spec")
    errs = sorted(glob.glob(os.path.join(d, "*.err")))
    if not errs:
        return {"status": "missing"}
    per = collections.defaultdict(list)
    for f in errs:
        cfg, prompt = os.path.basename(f)[:-4].rsplit(".", 1)
        with open(f, errors="replace") as fh:
            text = fh.read()
        ids = read_ids(f[:-4] + ".ids")
        row = {"prompt": prompt, "ids": ids}
        m = SPEC_RE.search(text)
        a = AR_RE.search(text)
        if cfg != "ar" and m:
            row.update(rounds=int(m.group(1)), drafted=int(m.group(2)), accepted=int(m.group(3)),
                       acceptance=float(m.group(4)), tokens_per_round=float(m.group(5)),
                       tokens=int(m.group(6)), ms=float(m.group(7)))
        elif cfg == "ar" and a:
            # End to end like the speculative wall: prefill + decode + sampling.
            row.update(tokens=int(a.group(3)) + 1,
                       ms=float(a.group(2)) + float(a.group(4)) + float(a.group(5)),
                       decode_tokens_per_s=int(a.group(3)) * 1e3 / max(float(a.group(4)), 1e-9))
        per[cfg].append(row)
    ar = {r["prompt"]: r for r in per.get("ar", [])}
    res = {}
    out.append("== speculative decoding, KJV pair (greedy), every model on the run's backend ==")
    out.append("%-4s %8s %10s %11s %8s  %s" % ("cfg", "tokens", "tokens/s", "acceptance", "vs AR", "parity"))
    for cfg in sorted(per, key=lambda c: (c != "ar", c)):
        rows = [r for r in per[cfg] if "ms" in r]
        tok = sum(r["tokens"] for r in rows)
        ms = sum(r["ms"] for r in rows)
        tps = tok * 1e3 / ms if ms else None
        parity = all(ar.get(r["prompt"], {}).get("ids") == r["ids"] for r in per[cfg])
        drafted = sum(r.get("drafted", 0) for r in rows)
        acc = sum(r.get("accepted", 0) for r in rows) / drafted if drafted else None
        res[cfg] = {"tokens": tok, "ms": ms, "tokens_per_s": tps, "acceptance": acc,
                    "parity_with_ar": parity, "runs": per[cfg]}
        res[cfg]["speedup_vs_ar"] = None
        if cfg != "ar" and tps and res.get("ar", {}).get("tokens_per_s"):
            res[cfg]["speedup_vs_ar"] = tps / res["ar"]["tokens_per_s"]
        out.append("%-4s %8d %10s %11s %8s  %s" % (
            cfg, tok, "%.1f" % tps if tps else "-", "%.3f" % acc if acc is not None else "-",
            "%.2fx" % res[cfg]["speedup_vs_ar"] if res[cfg]["speedup_vs_ar"] else "-",
            "identical" if parity else "DIFFERS"))
    out.append("")
    return res


def main(argv):
    if len(argv) != 4:
        sys.stderr.write("usage: final_tables.py WORK TABLES_TXT RESULTS_JSON\n")
        return 2
    work, tables, results = argv[1:]
    out = []
    res = {}
    for key, fn in (("api_counts", api_part), ("nvtx_filter", ranges_ncu_part),
                    ("hetero", hetero_part),
                    ("hetero_f16", lambda w, o: hetero_part(w, o, "hetero_f16", "KJV draft (F16)")),
                    ("spec", spec_part)):
        try:
            res[key] = fn(work, out)
        except Exception as e:  # one broken part must not hide the others
            res[key] = {"status": "error", "error": repr(e)}
            out.append("== %s: error %r ==" % (key, e))
    with open(tables, "w") as f:
        f.write("\n".join(out) + "\n")
    with open(results, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
