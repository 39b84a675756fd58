#!/usr/bin/env python3
"""spm_ref.py — llama.cpp's "llama" (SPM) tokenizer, from GGUF metadata alone.

A reference for the engine's C tokenizer, and the check that the exported
tokenizer.ggml.* arrays are enough to reproduce SentencePiece's ids without
the .model file. The algorithm:
  1. if add_space_prefix, prepend " "; replace every " " with U+2581;
  2. start from one symbol per Unicode character;
  3. repeatedly merge the adjacent pair whose concatenation is a NORMAL
     vocabulary piece with the highest score (ties: the leftmost pair);
  4. emit each final symbol's id, or, when a single character is not in the
     vocabulary, its UTF-8 bytes as the <0xXX> byte pieces.
Control, unknown and byte pieces never take part in merges, so text such as
"<s>" is spelled out, never read as BOS.

    python3 train/spm_ref.py models/phasemark-kjv-draft-f16.gguf "some text"
"""
import heapq
import sys

import gguf_read

TT_NORMAL, TT_BYTE = 1, 6


class SpmTokenizer:
    def __init__(self, gguf):
        kv = gguf.kv
        if kv.get("tokenizer.ggml.model") != "llama":
            raise ValueError("not a llama (SPM) vocabulary")
        tokens = kv["tokenizer.ggml.tokens"][2]
        scores = kv["tokenizer.ggml.scores"][2]
        types = kv["tokenizer.ggml.token_type"][2]
        self.normal = {}
        self.byte_id = {}
        for i, (t, ty) in enumerate(zip(tokens, types)):
            if ty == TT_NORMAL:
                self.normal[t] = (float(scores[i]), i)
            elif ty == TT_BYTE:
                self.byte_id[int(t[3:5], 16)] = i
        if len(self.byte_id) != 256:
            raise ValueError("vocabulary lacks the 256 byte pieces")
        self.bos = kv["tokenizer.ggml.bos_token_id"]
        self.add_bos = kv.get("tokenizer.ggml.add_bos_token", True)
        self.space_prefix = kv.get("tokenizer.ggml.add_space_prefix", True)

    def _push(self, heap, syms, left):
        right = syms[left]["next"]
        if right < 0:
            return
        text = syms[left]["text"] + syms[right]["text"]
        hit = self.normal.get(text)
        if hit is not None:
            # heapq is a min-heap: negate the score; equal scores pop leftmost.
            heapq.heappush(heap, (-hit[0], left, right, text))

    def encode(self, text, bos=None):
        ids = [self.bos] if (self.add_bos if bos is None else bos) else []
        if not text:  # no dummy prefix for empty input (SentencePiece, llama.cpp)
            return ids
        if self.space_prefix:
            text = " " + text
        text = text.replace(" ", "\u2581")
        syms = [{"text": ch, "prev": i - 1, "next": i + 1} for i, ch in enumerate(text)]
        syms[-1]["next"] = -1
        heap = []
        for i in range(len(syms) - 1):
            self._push(heap, syms, i)
        while heap:
            _neg, left, right, merged = heapq.heappop(heap)
            # Stale entry: one side was merged away or grew since the push.
            if syms[left]["text"] + syms[right]["text"] != merged or syms[left]["next"] != right:
                continue
            syms[left]["text"] = merged
            syms[right]["text"] = ""
            nxt = syms[right]["next"]
            syms[left]["next"] = nxt
            if nxt >= 0:
                syms[nxt]["prev"] = left
            if syms[left]["prev"] >= 0:
                self._push(heap, syms, syms[left]["prev"])
            self._push(heap, syms, left)
        i = 0
        while i >= 0:
            t = syms[i]["text"]
            hit = self.normal.get(t)
            if hit is not None:
                ids.append(hit[1])
            else:
                ids.extend(self.byte_id[b] for b in t.encode("utf-8"))
            i = syms[i]["next"]
        return ids


def main(argv):
    if len(argv) != 2:
        print("usage: spm_ref.py FILE.gguf TEXT", file=sys.stderr)
        return 2
    print(SpmTokenizer(gguf_read.GGUFFile(argv[0])).encode(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
