#!/usr/bin/env python3
"""loop_summary.py: one line per bench_cuda_loop row of each JSON-lines
FILE (mode, drafter, k, temperature, both sides' tok/s, speedup,
acceptance, tokens a round, n-gram rounds of all rounds, the verify's
products, parity) and the "costs" row's device times, for the device
scripts' logs. Lines that are not JSON are skipped.

usage: loop_summary.py FILE...
"""
import json
import sys


def main(paths):
    for path in paths:
        for line in open(path):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("mode") == "costs":
                print("  costs", json.dumps(r["us"]))
                continue
            print("  %-19s %-7s k=%-2d T=%.1f plain %8.1f spec %8.1f  %.3fx acc %.3f tpr %.2f "
                  "ngram %d/%d %s %s"
                  % (r["mode"], r["drafter"], r["k"], r["temperature"], r["plain_tok_s"],
                     r["spec_tok_s"], r["speedup"], r["acceptance"], r["tokens_per_round"],
                     r.get("ngram_rounds", 0), r.get("rounds", 0), r.get("verify"),
                     r["parity"]))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2 if len(sys.argv) < 2 else 0)
    sys.exit(main(sys.argv[1:]))
