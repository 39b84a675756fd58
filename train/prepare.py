#!/usr/bin/env python3
"""prepare.py — split the corpus, train the shared tokenizer, encode the splits.

Input: the verse TSV written by make_corpus.sh. Output (in the corpus dir):
  train.u16, val.u16, test.u16  token streams (little-endian uint16); each
                                chapter is BOS + ids(chapter text) + EOS
  meta.json                     split sizes, held-out prompts with their ids,
                                the golden prompts and tokenizer cases
and the tokenizer model itself (models/tokenizer.model by default).

The split is by whole chapters (chapter k, counted over the whole Bible from
0, goes to validation when k % 40 == 13 and to test when k % 40 == 33), so
held-out text never has its own verses in the training stream. Validation
picks the training checkpoint; test is only ever reported.

The tokenizer follows llama's SentencePiece conventions so that a C
implementation of llama.cpp's "llama" (SPM) tokenizer reproduces it exactly:
BPE, byte fallback, identity normalization (no NFKC, whitespace kept as is),
a dummy-prefix space, unk=0 bos=1 eos=2 and the 256 byte pieces next.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import sentencepiece as spm

VOCAB_SIZE = 4096
VAL_MOD, VAL_REM, TEST_REM = 40, 13, 33
N_ACCEPT_PROMPTS = 50
PROMPT_HEAD_WORDS = 6

# Prompts for the golden greedy continuations the engine tests compare
# against: two in the corpus's voice and one held-out verse opening.
GOLDEN_PROMPTS = [
    "In the beginning God created",
    "And Jesus answered and said unto them,",
]

# Strings whose ids pin down the tokenizer's corner cases for the C port:
# repeated and leading spaces, characters the vocabulary lacks (byte
# fallback, multi-byte UTF-8), digits, punctuation runs, a tab, a newline.
TOKENIZER_CASES = [
    "",
    " ",
    "a",
    "Hello world",
    "  two  spaces",
    "The LORD said unto Moses, Go in unto Pharaoh.",
    "Verse 3:16 and 2026 numbers",
    "caf\u00e9 na\u00efve \u2014 \u65e5\u672c \U0001F600",
    "tab\there\nnewline",
    "...;:!?()'\"",
    "unto unto unto",
    "Zzyzx qwertyuiop",
]


def read_chapters(tsv_path):
    """Returns [(book, chapter, [verse texts])] in canonical order."""
    chapters = []
    with open(tsv_path, encoding="ascii") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4:
                raise ValueError(f"{tsv_path}:{lineno}: expected 4 fields")
            book, chap, _verse, text = parts
            key = (book, int(chap))
            if not chapters or chapters[-1][:2] != key:
                chapters.append((book, int(chap), []))
            chapters[-1][2].append(text)
    return chapters


def split_of(k):
    if k % VAL_MOD == VAL_REM:
        return "val"
    if k % VAL_MOD == TEST_REM:
        return "test"
    return "train"


def train_tokenizer(train_lines_path, model_path):
    prefix = model_path[: -len(".model")]
    spm.SentencePieceTrainer.train(
        input=train_lines_path,
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        split_digits=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    # The .vocab listing is a by-product the GGUF does not need.
    vocab_listing = prefix + ".vocab"
    if os.path.exists(vocab_listing):
        os.remove(vocab_listing)


def encode_split(sp, chapters):
    out = []
    for _book, _chap, verses in chapters:
        out.append(sp.bos_id())
        out.extend(sp.encode(" ".join(verses)))
        out.append(sp.eos_id())
    arr = np.asarray(out, dtype=np.int64)
    if arr.max() >= 65536:
        raise ValueError("token id does not fit uint16")
    return arr.astype("<u2")


def with_bos(sp, text):
    return [sp.bos_id()] + sp.encode(text)


def accept_prompts(sp, test_chapters):
    """Evenly spaced verse openings in test chapters, each preceded by the
    verse before it, so the model has context and continues mid-verse."""
    spots = [(ci, vi) for ci, (_b, _c, vs) in enumerate(test_chapters) for vi in range(1, len(vs))]
    if len(spots) < N_ACCEPT_PROMPTS:
        raise ValueError("test split too small for the prompt count")
    step = len(spots) / N_ACCEPT_PROMPTS
    prompts = []
    for i in range(N_ACCEPT_PROMPTS):
        ci, vi = spots[int(i * step)]
        book, chap, verses = test_chapters[ci]
        head = " ".join(verses[vi].split(" ")[:PROMPT_HEAD_WORDS])
        text = verses[vi - 1] + " " + head
        prompts.append({"ref": f"{book}{chap}:{vi + 1}", "text": text, "ids": with_bos(sp, text)})
    return prompts


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="build-train/corpus", help="dir holding kjv.tsv; outputs go here")
    ap.add_argument("--tokenizer", default="models/tokenizer.model", help="SentencePiece model path")
    ap.add_argument("--retrain-tokenizer", action="store_true", help="train the tokenizer even if the file exists")
    args = ap.parse_args(argv)

    chapters = read_chapters(os.path.join(args.corpus, "kjv.tsv"))
    splits = {"train": [], "val": [], "test": []}
    for k, ch in enumerate(chapters):
        splits[split_of(k)].append(ch)

    if args.retrain_tokenizer or not os.path.exists(args.tokenizer):
        lines = os.path.join(args.corpus, "train_verses.txt")
        with open(lines, "w", encoding="ascii") as f:
            for _b, _c, verses in splits["train"]:
                f.write("\n".join(verses) + "\n")
        train_tokenizer(lines, args.tokenizer)
    sp = spm.SentencePieceProcessor(model_file=args.tokenizer)
    if sp.get_piece_size() != VOCAB_SIZE or sp.bos_id() != 1 or sp.eos_id() != 2 or sp.unk_id() != 0:
        raise ValueError("tokenizer does not have the expected size and special ids")

    meta = {"tokenizer_sha256": sha256_file(args.tokenizer), "vocab_size": VOCAB_SIZE, "splits": {}}
    for name, chs in splits.items():
        arr = encode_split(sp, chs)
        arr.tofile(os.path.join(args.corpus, f"{name}.u16"))
        words = sum(len(v.split()) for _b, _c, vs in chs for v in vs)
        meta["splits"][name] = {"chapters": len(chs), "words": words, "tokens": int(arr.size)}
    held_out = splits["test"][2][2][0]  # first verse of a test chapter
    golden = GOLDEN_PROMPTS + [" ".join(held_out.split(" ")[:8])]
    meta["accept_prompts"] = accept_prompts(sp, splits["test"])
    meta["golden_prompts"] = [{"text": t, "ids": with_bos(sp, t)} for t in golden]
    meta["tokenizer_cases"] = [{"text": t, "ids": with_bos(sp, t)} for t in TOKENIZER_CASES]
    with open(os.path.join(args.corpus, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    for name, s in meta["splits"].items():
        print(f"prepare.py: {name}: {s['chapters']} chapters, {s['words']} words, {s['tokens']} tokens")
    print(f"prepare.py: tokenizer {args.tokenizer} sha256 {meta['tokenizer_sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
