#!/usr/bin/env python3
"""train.py — train the target and the draft, export both, measure what ships.

One run does everything, in this order, and states its own wall time:
  1. train the target (AdamW, cosine schedule, bf16 autocast), keeping the
     weights with the lowest validation loss (the corpus is ~1M tokens, so a
     20M-parameter model overfits; validation picks the stopping point);
  2. train the draft distilled from that target (loss = (1-a) CE + a KL to
     the target's distribution), again keeping its best validation weights;
  3. export both to GGUF (target Q8_0, draft F16; norms F32);
  4. reload the files through the independent reader and check each tensor
     against the trained weights;
  5. on the reloaded (dequantized) weights in float32: held-out test loss,
     greedy speculative acceptance at several k over held-out prompts (with
     a check that speculative output equals plain greedy output), sample
     continuations, and golden.json for the engine tests (float32 on CPU).

Inputs come from prepare.py (corpus dir) and models/tokenizer.model.
Outputs go to --out: target.gguf, draft.gguf, golden.json, stats.json.
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export  # noqa: E402
import gguf_write as gw  # noqa: E402
import spec  # noqa: E402
from model import Config, Transformer, gguf_tensor_order  # noqa: E402

TARGET = dict(dim=512, n_layers=6, n_heads=8, n_kv_heads=4, ffn_dim=1408)
DRAFT = dict(dim=256, n_layers=5, n_heads=4, n_kv_heads=2, ffn_dim=704)
SAMPLE_PROMPTS = [
    "In the beginning God created",
    "And it came to pass, when the king heard",
    "Blessed are the",
    "And Jesus said unto his disciples,",
    "The LORD is",
]
ACCEPT_KS = (1, 2, 4, 8)
ACCEPT_TOKENS = 64
GOLDEN_TOKENS = 32


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_stream(corpus, split, device):
    arr = np.fromfile(os.path.join(corpus, f"{split}.u16"), dtype="<u2").astype(np.int64)
    return torch.from_numpy(arr).to(device)


def batch(stream, b, t, gen):
    """b random windows of t+1 tokens -> inputs [b, t], targets [b, t]."""
    starts = torch.randint(0, stream.numel() - t - 1, (b,), generator=gen, device="cpu")
    idx = starts.to(stream.device)[:, None] + torch.arange(t + 1, device=stream.device)
    w = stream[idx]
    return w[:, :-1], w[:, 1:]


def autocast(device):
    if device.startswith("cuda"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


@torch.no_grad()
def evaluate(model, stream, t, device, mixed=True, teacher=None):
    """Mean next-token cross-entropy (nats) over consecutive windows of t;
    with a teacher also the fraction of positions where both argmaxes agree
    (the per-token acceptance of greedy speculative decoding, on real text)."""
    was_training = model.training
    model.eval()
    n = (stream.numel() - 1) // t
    total, agree, count = 0.0, 0, 0
    for i0 in range(0, n, 16):
        idx = torch.arange(i0, min(n, i0 + 16), device=stream.device)[:, None] * t
        w = stream[idx + torch.arange(t + 1, device=stream.device)]
        ctx = autocast(device) if mixed else torch.autocast("cpu", enabled=False)
        with ctx:
            logits = model(w[:, :-1]).float()
            if teacher is not None:
                agree += int((teacher(w[:, :-1]).argmax(-1) == logits.argmax(-1)).sum())
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                               reduction="sum")
        total += float(loss)
        count += w[:, 1:].numel()
    model.train(was_training)
    return {"loss": total / count, "agree": agree / count if teacher is not None else None}


def eval_loss(model, stream, t, device, mixed=True):
    return evaluate(model, stream, t, device, mixed)["loss"]


@torch.no_grad()
def distill_corpus(teacher, stream, args, device):
    """Sequence-level distillation data: random training-text prefixes of
    gen_prefix tokens, each continued greedily by the teacher for gen_len
    tokens. Greedy continuations are exactly the contexts speculative
    decoding meets, which real text alone under-represents. [n, prefix+len]"""
    gen = torch.Generator().manual_seed(args.seed + 2)
    rows = []
    for i0 in range(0, args.gen_seqs, 512):
        b = min(512, args.gen_seqs - i0)
        starts = torch.randint(0, stream.numel() - args.gen_prefix, (b,), generator=gen)
        seq = stream[starts.to(device)[:, None] + torch.arange(args.gen_prefix, device=device)]
        for _ in range(args.gen_len):
            with autocast(device):
                nxt = teacher(seq)[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
        rows.append(seq)
    return torch.cat(rows)


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * frac)))


def make_optimizer(model, lr, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    kw = {"fused": True} if device.startswith("cuda") else {}
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **kw)


def distill_loss(model, teacher, x, y, kl_weight):
    logits = model(x).float()
    vocab = logits.shape[-1]
    ce = F.cross_entropy(logits.view(-1, vocab), y.reshape(-1))
    if teacher is None:
        return ce, ce
    with torch.no_grad():
        t_logp = F.log_softmax(teacher(x).float(), -1).view(-1, vocab)
    s_logp = F.log_softmax(logits, -1).view(-1, vocab)
    kl = F.kl_div(s_logp, t_logp, log_target=True, reduction="batchmean")
    return (1.0 - kl_weight) * ce + kl_weight * kl, ce


def train_model(label, model, data, args, steps, lr, teacher=None, kl_weight=0.0, synth=None):
    """Trains in place and keeps the best validation weights (lowest loss;
    with a teacher, highest argmax agreement with it). With a teacher the
    loss mixes cross-entropy and KL(teacher || model), and each step adds a
    batch of the teacher's own continuations (synth) with equal weight."""
    device = args.device
    opt = make_optimizer(model, lr, device)
    gen = torch.Generator().manual_seed(args.seed + (1 if teacher is not None else 0))
    warmup = max(1, steps // 20)
    best = (float("inf"), -1, None)
    hist = []
    t0 = time.time()
    model.train()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        x, y = batch(data["train"], args.batch, args.seq, gen)
        with autocast(device):
            loss, ce = distill_loss(model, teacher, x, y, kl_weight)
            if synth is not None:
                pick = torch.randint(0, synth.shape[0], (args.synth_batch,), generator=gen)
                rows = synth[pick.to(synth.device)]
                s_loss, _ = distill_loss(model, teacher, rows[:, :-1], rows[:, 1:], kl_weight)
                loss = 0.5 * (loss + s_loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % args.eval_every == 0 or step + 1 == steps:
            ev = evaluate(model, data["val"], args.seq, device, teacher=teacher)
            score = ev["loss"] if teacher is None else -ev["agree"]
            hist.append({"step": step + 1, "train_ce": float(ce.detach()), "val": ev["loss"],
                         "val_agree": ev["agree"], "seconds": round(time.time() - t0, 2)})
            mark = ""
            if score < best[0]:
                best = (score, step + 1, copy.deepcopy(model.state_dict()))
                mark = " *"
            agree = f" agree {ev['agree']:.4f}" if teacher is not None else ""
            log(f"{label} step {step + 1}/{steps} lr {opt.param_groups[0]['lr']:.2e} "
                f"train_ce {float(ce.detach()):.4f} val {ev['loss']:.4f}{agree}{mark}")
    seconds = time.time() - t0
    model.load_state_dict(best[2])
    best_h = next(h for h in hist if h["step"] == best[1])
    return {"steps": steps, "best_step": best[1], "best_val": best_h["val"],
            "best_val_agree": best_h["val_agree"], "seconds": round(seconds, 2),
            "final_train_ce": hist[-1]["train_ce"], "history": hist,
            "tokens_per_step": args.batch * args.seq, "lr": lr}


def check_export(model, path, matrix_type):
    """Reloads `path` and compares every tensor with the trained weights.
    Returns the largest error relative to the tolerance the type allows."""
    shipped, cfg, g = export.load_gguf_model(path)
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    state.setdefault("output.weight", state["tok_embeddings.weight"])
    shipped_state = dict(shipped.named_parameters())
    worst = 0.0
    for mod_name, gguf_name in gguf_tensor_order(cfg):
        ref = state[mod_name].numpy()
        got = shipped_state[mod_name].detach().numpy()
        kind = g.type_name(gguf_name)
        if kind == "F32":
            tol = 0.0
        elif kind == "F16":
            tol = np.abs(ref).max() * 2.0 ** -10
        else:  # Q8_0: half a step of the block's scale, plus fp16 rounding of d
            blocks = np.abs(ref.reshape(-1, 32)).max(1) / 127.0
            tol = (blocks.max() * (0.5 + 127 * 2.0 ** -11)) * 1.0001
        err = float(np.abs(ref - got).max())
        if err > tol:
            raise RuntimeError(f"{path}: {gguf_name} ({kind}) error {err} over tolerance {tol}")
        worst = max(worst, err / tol if tol else 0.0)
    want_type = {gw.GGML_Q8_0: "Q8_0", gw.GGML_F16: "F16", gw.GGML_F32: "F32"}[matrix_type]
    if g.type_name("blk.0.attn_q.weight") != want_type or g.type_name("output_norm.weight") != "F32":
        raise RuntimeError(f"{path}: unexpected tensor types")
    return shipped, worst


def golden_for(model, prompts, device):
    out = []
    for p in prompts:
        ids, gaps = spec.greedy(model, p["ids"], GOLDEN_TOKENS, device, margins=True)
        last = spec.next_logits(model, p["ids"], device)[-1]
        top = torch.topk(last, 5)
        out.append({"continuation_ids": ids, "top1_margins": [round(x, 5) for x in gaps],
                    "first_step_top5_ids": top.indices.tolist(),
                    "first_step_top5_logits": [round(float(v), 5) for v in top.values]})
    return out


def measure(args, target_path, draft_path, data, meta, sp):
    dev = args.device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    res = {}
    models = {}
    for name, path in (("target", target_path), ("draft", draft_path)):
        m, cfg, _g = export.load_gguf_model(path, dev)
        models[name] = m
        res[f"{name}_shipped_val_loss"] = eval_loss(m, data["val"], args.seq, dev, mixed=False)
        res[f"{name}_shipped_test_loss"] = eval_loss(m, data["test"], args.seq, dev, mixed=False)
        log(f"{name} shipped weights: val {res[f'{name}_shipped_val_loss']:.4f} "
            f"test {res[f'{name}_shipped_test_loss']:.4f}")
    ev = evaluate(models["draft"], data["test"], args.seq, dev, mixed=False, teacher=models["target"])
    res["draft_target_test_agree"] = ev["agree"]
    log(f"draft/target argmax agreement on test text: {ev['agree']:.4f}")
    prompts = [p["ids"] for p in meta["accept_prompts"][: args.accept_prompts]]
    t0 = time.time()
    res["acceptance"], refs = spec.acceptance(models["target"], models["draft"], prompts,
                                              ACCEPT_TOKENS, ACCEPT_KS, dev)
    res["acceptance_seconds"] = round(time.time() - t0, 2)
    for a in res["acceptance"]:
        log(f"acceptance k={a['k']}: {a['acceptance']:.4f} ({a['accepted']}/{a['drafted']}), "
            f"{a['tokens_per_target_forward']:.2f} tokens per target forward, "
            f"spec != greedy on {a['spec_vs_greedy_mismatches']} prompts")
    res["heldout_continuations"] = [
        {"ref": p["ref"], "prompt": p["text"], "continuation": sp.decode(r[:40])}
        for p, r in zip(meta["accept_prompts"][:3], refs[:3])]
    res["samples"] = []
    for text in SAMPLE_PROMPTS:
        ids = [sp.bos_id()] + sp.encode(text)
        cont = spec.greedy(models["target"], ids, 48, dev)
        res["samples"].append({"prompt": text, "continuation": sp.decode(cont)})
        log(f"sample: {text!r} -> {sp.decode(cont)!r}")
    return res


def make_golden(target_path, draft_path, meta, sp):
    """float32 on CPU from the shipped files, with a check that today's
    SentencePiece reproduces the prompt ids prepare.py recorded."""
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    tgt, _, _ = export.load_gguf_model(target_path, "cpu")
    dft, _, _ = export.load_gguf_model(draft_path, "cpu")
    for case in meta["golden_prompts"] + meta["tokenizer_cases"]:
        ids = [sp.bos_id()] + sp.encode(case["text"])
        if ids != case["ids"]:
            raise RuntimeError(f"tokenizer disagrees with prepare.py on {case['text']!r}")
    golden = {
        "about": "Greedy continuations (no EOS stop) in float32 from the shipped, dequantized "
                 "weights, computed by train/train.py with PyTorch on the CPU. Prompt ids are "
                 "SentencePiece's encoding with BOS, exactly what the engine's tokenizer must "
                 "produce. top1_margins: best minus second-best logit per step; a step with a "
                 "tiny margin may legitimately flip under a different float implementation.",
        "target": os.path.basename(target_path), "draft": os.path.basename(draft_path),
        "tokens": GOLDEN_TOKENS,
        "prompts": [],
        "tokenizer_cases": meta["tokenizer_cases"],
    }
    t_out = golden_for(tgt, meta["golden_prompts"], "cpu")
    d_out = golden_for(dft, meta["golden_prompts"], "cpu")
    for p, t, d in zip(meta["golden_prompts"], t_out, d_out):
        spec_ids, _ = spec.speculative(tgt, dft, p["ids"], GOLDEN_TOKENS, 4, "cpu")
        if spec_ids != t["continuation_ids"]:
            raise RuntimeError(f"speculative output differs from greedy for {p['text']!r}")
        golden["prompts"].append({"text": p["text"], "ids": p["ids"], "target": t, "draft": d,
                                  "target_text": sp.decode(t["continuation_ids"]),
                                  "draft_text": sp.decode(d["continuation_ids"])})
    return golden


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="build-train/corpus")
    ap.add_argument("--tokenizer", default="models/tokenizer.model")
    ap.add_argument("--out", default="build-train/out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--target-steps", type=int, default=2400)
    ap.add_argument("--draft-steps", type=int, default=2000)
    ap.add_argument("--target-lr", type=float, default=1e-3)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--dropout", type=float, default=0.2, help="target dropout")
    ap.add_argument("--draft-dropout", type=float, default=0.0)
    ap.add_argument("--kl-weight", type=float, default=0.9)
    ap.add_argument("--gen-seqs", type=int, default=1024, help="teacher continuations for the draft")
    ap.add_argument("--gen-prefix", type=int, default=64)
    ap.add_argument("--gen-len", type=int, default=192)
    ap.add_argument("--synth-batch", type=int, default=64, help="continuations per draft step")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--accept-prompts", type=int, default=50)
    ap.add_argument("--tiny", action="store_true", help="tiny models (pipeline check on a CPU)")
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.corpus, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    sp = export.spm.SentencePieceProcessor(model_file=args.tokenizer)
    data = {s: load_stream(args.corpus, s, args.device) for s in ("train", "val", "test")}
    tcfg, dcfg = dict(TARGET), dict(DRAFT)
    if args.tiny:
        tcfg = dict(dim=64, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=160)
        dcfg = dict(dim=32, n_layers=1, n_heads=1, n_kv_heads=1, ffn_dim=96)
    common = dict(vocab_size=sp.get_piece_size(), max_seq_len=args.seq)
    log(f"device {args.device} torch {torch.__version__}; train {data['train'].numel()} tokens")

    torch.manual_seed(args.seed)
    target = Transformer(Config(**tcfg, **common, dropout=args.dropout)).to(args.device)
    log(f"target: {target.n_params()} parameters {tcfg}")
    t_hist = train_model("target", target, data, args, args.target_steps, args.target_lr)
    target.eval()

    t0 = time.time()
    synth = distill_corpus(target, data["train"], args, args.device) if args.gen_seqs else None
    gen_seconds = time.time() - t0
    log(f"teacher continuations: {args.gen_seqs} x {args.gen_prefix}+{args.gen_len} tokens "
        f"in {gen_seconds:.1f} s")

    torch.manual_seed(args.seed + 1)
    draft = Transformer(Config(**dcfg, **common, dropout=args.draft_dropout)).to(args.device)
    log(f"draft: {draft.n_params()} parameters {dcfg}")
    d_hist = train_model("draft", draft, data, args, args.draft_steps, args.draft_lr,
                         teacher=target, kl_weight=args.kl_weight, synth=synth)
    d_hist["synth_seconds"] = round(gen_seconds, 2)
    draft.eval()
    train_seconds = time.time() - t_start

    paths = {"target": os.path.join(args.out, "target.gguf"), "draft": os.path.join(args.out, "draft.gguf")}
    desc = "phasemark {} model, trained on the King James Version (Debian bible-kjv-text)"
    nbytes = {
        "target": export.export_gguf(target, paths["target"], "phasemark-kjv-target", gw.GGML_Q8_0,
                                     args.tokenizer, desc.format("target")),
        "draft": export.export_gguf(draft, paths["draft"], "phasemark-kjv-draft", gw.GGML_F16,
                                    args.tokenizer, desc.format("draft")),
    }
    _, t_err = check_export(target, paths["target"], gw.GGML_Q8_0)
    _, d_err = check_export(draft, paths["draft"], gw.GGML_F16)
    log(f"exported {nbytes}; reload check passed (worst error / tolerance: "
        f"target {t_err:.3f}, draft {d_err:.3f})")

    stats = {
        "seed": args.seed, "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "args": vars(args),
        "target": {"config": target.cfg.to_dict(), "params": target.n_params(), "file_bytes": nbytes["target"],
                   "train": t_hist, "type": "Q8_0"},
        "draft": {"config": draft.cfg.to_dict(), "params": draft.n_params(), "file_bytes": nbytes["draft"],
                  "train": d_hist, "type": "F16", "kl_weight": args.kl_weight},
        "train_seconds": round(train_seconds, 2),
        "splits": meta["splits"],
    }
    stats["measure"] = measure(args, paths["target"], paths["draft"], data, meta, sp)
    golden = make_golden(paths["target"], paths["draft"], meta, sp)
    with open(os.path.join(args.out, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
    stats["total_seconds"] = round(time.time() - t_start, 2)
    with open(os.path.join(args.out, "stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1, ensure_ascii=False)
    log(f"done: training {stats['train_seconds']} s, total {stats['total_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
