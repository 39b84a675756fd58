#!/usr/bin/env python3
"""decode_summary.py — the decode table of a device benchmark's JSON lines
(bench_cuda_engine's, each tagged with "run" by bench_lib.sh's pm_bench):
per (model, run) the median tokens/s, the weight bytes a token, the median
fraction of the copy bandwidth and the ratio to the base run's tokens/s on
the same model, then the copy bandwidth's median over the processes.

    decode_summary.py BENCH.jsonl BASE_RUN
"""
import collections
import json
import sys


def med(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: decode_summary.py BENCH.jsonl BASE_RUN")
    path, base_run = sys.argv[1], sys.argv[2]
    rows = [json.loads(l) for l in open(path) if l.startswith('{')]
    dec = collections.defaultdict(list)
    for r in rows:
        if r['bench'] == 'engine_decode':
            dec[(r['model'], r['run'])].append(r)
    print("decode (graph mode): tokens/s, weight bytes a token, fraction of copy bandwidth")
    for k in sorted(dec):
        t = med([r['tokens_per_s'] for r in dec[k]])
        f = med([r['fraction_of_copy_bw'] for r in dec[k]])
        b = dec[k][0]['weight_bytes_per_token']
        base = dec.get((k[0], base_run))
        ratio = t / med([r['tokens_per_s'] for r in base]) if base else 0
        ids = sorted({r['last_token'] for r in dec[k]})
        graph = sorted({r['ids_equal_graph'] for r in dec[k]})
        print(f"  {k[0]:8s} {k[1]:9s} {t:8.1f} tok/s  {b / 1e9:.3f} GB  {f:.3f} of copy"
              f"  {ratio:.3f}x {base_run}  (runs {len(dec[k])}, last greedy tokens {ids},"
              f" graph ids equal {graph})")
    bw = [r['bandwidth_GBps'] for r in rows if r['bench'] == 'copy']
    if bw:
        print(f"copy bandwidth (read + write): median {med(bw):.0f} GB/s over {len(bw)} processes")


if __name__ == '__main__':
    main()
