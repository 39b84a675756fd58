#!/usr/bin/env python3
"""train_block.py — train the block drafter head on the shipped target, export, measure.

One run, in this order, each step timed:
  1. load the shipped target (Q8_0 dequantized, float32, TF32 off) and check
     its greedy output against models/golden.json;
  2. data: prompts of BOS + a random window of the training split (16 to
     64 tokens, like held-out prompts), each continued greedily by the
     target (KV-cached) to 256 tokens: the contexts speculative decoding
     meets; the same from validation and test chapters for checkpoint
     choice and reporting. Target features of every position come from one
     full forward per sequence (causal, so position j's features see only
     tokens 0..j, exactly what the engine has);
  3. train: each step takes S sequences and K random anchors a in each
     (a = the last committed token, from the prompt's last token to
     len-1-B; half of them in the first 64 positions, where a held-out
     run of 64 tokens spends all its rounds); the block's first row is the
     token at a, its other rows mask_embd; it attends to context j < a and
     its own rows (block_mask); row i's label is the target's greedy token
     at a+1+i. Row i's loss is weighted decay^i (a later row only counts
     when every earlier one was accepted). Each block uses b rows, b drawn
     from {2, 4, 8, 16}, so one head serves every block size. The weights
     with the best validation acceptance are kept;
  4. export GGUF (F16 matrices, F32 norms), reload it through the
     independent reader and check every tensor;
  5. on the reloaded head in float32: held-out acceptance, both per anchor
     on test continuations and chained (real greedy verify rounds with the
     target, checked against plain greedy) on the held-out test prompts.
Outputs in --out: block.gguf, block-stats.json.
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
import block  # noqa: E402
import spec  # noqa: E402

ACCEPT_BLOCKS = (2, 4, 8, 16)
BLEN_CHOICES = (2, 4, 8, 16)
BLEN_PROBS = (0.15, 0.15, 0.2, 0.5)
BOS = 1


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_stream(corpus, split):
    return torch.from_numpy(np.fromfile(os.path.join(corpus, f"{split}.u16"), dtype="<u2").astype(np.int64))


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@torch.no_grad()
def make_sequences(target, stream, n, prefixes, length, seed, device, chunk):
    """n prompts, each BOS + a random window of the stream, continued
    greedily by the target up to `length` tokens. Chunk c (of `chunk` rows)
    uses prompt length prefixes[c % len(prefixes)], so the prompts vary in
    length the way real ones do (held-out prompts are BOS + one verse + a
    few words). Returns (seqs [n, length], prompt lengths [n])."""
    g = torch.Generator().manual_seed(seed)
    seqs, plens = [], []
    for c, i in enumerate(range(0, n, chunk)):
        rows = min(chunk, n - i)
        p = prefixes[c % len(prefixes)]
        starts = torch.randint(0, stream.numel() - p, (rows,), generator=g)
        windows = stream[starts[:, None] + torch.arange(p - 1)]
        windows = torch.cat([torch.full((rows, 1), BOS, dtype=windows.dtype), windows], dim=1)
        seqs.append(block.greedy_cached(target, windows.to(device), length - p))
        plens.append(torch.full((rows,), p, dtype=torch.long))
    return torch.cat(seqs), torch.cat(plens).to(device)


@torch.no_grad()
def make_features(target, seqs, layers, dtype, chunk):
    fs = []
    for i in range(0, seqs.shape[0], chunk):
        _, f = block.target_forward(target, seqs[i:i + chunk], layers)
        fs.append(f.to(dtype))
    return torch.cat(fs)


def sample_anchors(lo, hi, k, early, early_frac, gen):
    """[len(lo), k] anchors: a fraction early_frac uniform in the first
    `early` positions from each row's lo (the start of a continuation, where
    a held-out run spends its rounds), the rest uniform in [lo, hi]."""
    lo = lo.cpu()[:, None]
    span = (hi - lo + 1).expand(-1, k)
    near = torch.rand(lo.shape[0], k, generator=gen) < early_frac
    span = torch.where(near, torch.clamp(span, max=early), span)
    return lo + (torch.rand(lo.shape[0], k, generator=gen) * span).long()


def sample_blocks(lo, hi, k, early, early_frac, gen, device):
    """anchors as sample_anchors; blens drawn from BLEN_CHOICES."""
    n_seqs = lo.shape[0]
    anchors = sample_anchors(lo, hi, k, early, early_frac, gen)
    pick = torch.multinomial(torch.tensor(BLEN_PROBS), n_seqs * k, replacement=True, generator=gen)
    blens = torch.tensor(BLEN_CHOICES)[pick].view(n_seqs, k)
    return anchors.to(device), blens.to(device)


def labels_for(seqs, anchors, bsz):
    """[S, K, B]: the token at anchor + 1 + i."""
    idx = anchors[:, :, None] + 1 + torch.arange(bsz, device=seqs.device)
    return torch.gather(seqs, 1, idx.view(seqs.shape[0], -1)).view(idx.shape)


def block_loss(head, feats, seqs, anchors, blens, decay):
    bsz = head.cfg.block_size
    first = torch.gather(seqs, 1, anchors)
    logits = head(feats, first, anchors, blens).float()
    y = labels_for(seqs, anchors, bsz)
    rows = torch.arange(bsz, device=seqs.device)
    w = (decay ** rows.float())[None, None, :] * (rows[None, None, :] < blens[:, :, None]).float()
    ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
    loss = (ce * w.reshape(-1)).sum() / w.sum()
    hit = (logits.argmax(-1) == y).float()
    acc_len = torch.cumprod(hit, dim=-1).sum(-1)   # leading correct rows (b = 16 view)
    return loss, acc_len


@torch.no_grad()
def eval_anchors(head, feats, seqs, anchors, b, chunk=64):
    """Per-anchor acceptance with blocks of b rows: mean leading correct rows
    (accepted drafts per round if that anchor were a round's start) and the
    per-row accuracy."""
    acc, rows, n = 0.0, torch.zeros(b, dtype=torch.float64), 0
    for i in range(0, seqs.shape[0], chunk):
        s, f, a = seqs[i:i + chunk], feats[i:i + chunk].float(), anchors[i:i + chunk]
        blens = torch.full_like(a, b)
        first = torch.gather(s, 1, a)
        logits = head(f, first, a, blens)[:, :, :b]
        y = labels_for(s, a, head.cfg.block_size)[:, :, :b]
        hit = (logits.argmax(-1) == y).double()
        acc += float(torch.cumprod(hit, -1).sum())
        rows += hit.sum((0, 1)).cpu()
        n += a.numel()
    return {"b": b, "anchors": n, "mean_accepted": acc / n,
            "row_accuracy": [round(float(r) / n, 4) for r in rows]}


@torch.no_grad()
def chained(target, head, prompts, n_tokens, b, device):
    """Greedy speculative decoding with the head as drafter, all prompts in
    lockstep rounds. Each round: target features of the committed context
    (positions 0..n-2), one head forward proposing b tokens, one target
    verify forward over committed + proposal keeping the longest prefix that
    equals the target's argmax plus the target's own next token."""
    layers = head.cfg.target_layers
    seqs = [list(p) for p in prompts]
    outs = [[] for _ in prompts]
    st = [[0, 0, 0] for _ in prompts]  # accepted, drafted, rounds
    while True:
        act = [i for i in range(len(prompts)) if len(outs[i]) < n_tokens]
        if not act:
            break
        ns = [len(seqs[i]) for i in act]
        width = max(1, max(ns) - 1)
        ctx = torch.zeros(len(act), width, dtype=torch.long)
        for r, i in enumerate(act):
            ctx[r, :ns[r] - 1] = torch.tensor(seqs[i][:-1], dtype=torch.long)
        _, f = block.target_forward(target, ctx.to(device), layers)
        anchors = torch.tensor(ns, device=device)[:, None] - 1
        first = torch.tensor([seqs[i][-1] for i in act], device=device)[:, None]
        logits = head(f, first, anchors, torch.full_like(anchors, b))[:, 0, :b]
        props = logits.argmax(-1).tolist()
        kk = [min(b, n_tokens - len(outs[i])) for i in act]
        vw = max(n + k for n, k in zip(ns, kk))
        ver = torch.zeros(len(act), vw, dtype=torch.long)
        for r, i in enumerate(act):
            row = seqs[i] + props[r][:kk[r]]
            ver[r, :len(row)] = torch.tensor(row, dtype=torch.long)
        vl, _ = block.target_forward(target, ver.to(device))
        am = vl.argmax(-1).cpu()
        for r, i in enumerate(act):
            v = am[r, ns[r] - 1:ns[r] + kk[r]].tolist()
            a = 0
            while a < kk[r] and props[r][a] == v[a]:
                a += 1
            commit = props[r][:a] + [v[a]]
            seqs[i] += commit
            outs[i] += commit
            st[i][0] += a
            st[i][1] += kk[r]
            st[i][2] += 1
    return [o[:n_tokens] for o in outs], st


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, steps - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * frac)))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/phasemark-kjv-target-q8_0.gguf")
    ap.add_argument("--golden", default="models/golden.json")
    ap.add_argument("--corpus", default="build-train/corpus")
    ap.add_argument("--out", default="build-train/block")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", default="1,3,5", help="target layers read (0-based)")
    ap.add_argument("--head-layers", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--gen-seqs", type=int, default=8192)
    ap.add_argument("--prefixes", default="16,24,32,48,64",
                    help="prompt lengths (BOS + text), one per chunk in turn")
    ap.add_argument("--length", type=int, default=256, help="prompt + continuation tokens")
    ap.add_argument("--gen-chunk", type=int, default=1024)
    ap.add_argument("--eval-chunk", type=int, default=64, help="chunk for validation/test data")
    ap.add_argument("--early", type=int, default=64,
                    help="the early span of a continuation that --early-frac of anchors fall in")
    ap.add_argument("--early-frac", type=float, default=0.5)
    ap.add_argument("--val-seqs", type=int, default=256)
    ap.add_argument("--test-seqs", type=int, default=256)
    ap.add_argument("--batch-seqs", type=int, default=64)
    ap.add_argument("--anchors", type=int, default=16, help="blocks per sequence per step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--decay", type=float, default=0.9, help="loss weight ratio per block row")
    ap.add_argument("--steps", type=int, default=3000, help="0: as many as --train-seconds allows")
    ap.add_argument("--train-seconds", type=float, default=90.0)
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--accept-prompts", type=int, default=50)
    ap.add_argument("--accept-tokens", type=int, default=64)
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    t_start = time.time()
    dev = args.device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    layers = [int(x) for x in args.layers.split(",")]
    with open(os.path.join(args.corpus, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    stats = {"seed": args.seed, "device": dev, "torch": torch.__version__, "args": vars(args),
             "device_name": torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu"}
    log(f"device {stats['device_name']} torch {torch.__version__}")

    # 1. the target, checked against the golden ids.
    target = block.load_target(args.target, dev)
    with open(args.golden, encoding="utf-8") as f:
        golden = json.load(f)
    gchk = []
    for p in golden["prompts"]:
        want = p["target"]["continuation_ids"]
        got = block.greedy_cached(target, torch.tensor([p["ids"]], device=dev), len(want))
        got = got[0, len(p["ids"]):].tolist()
        same = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), len(want))
        gchk.append({"text": p["text"], "matching_prefix": same, "of": len(want)})
    stats["golden_check"] = gchk
    log(f"target greedy vs golden.json (KV-cached, float32): {[g['matching_prefix'] for g in gchk]} "
        f"of {len(golden['prompts'][0]['target']['continuation_ids'])}")

    # 2. data.
    torch.manual_seed(args.seed)
    streams = {s: load_stream(args.corpus, s) for s in ("train", "val", "test")}
    t0 = time.time()
    prefixes = [int(x) for x in args.prefixes.split(",")]
    data = {}
    for split, n, seed, chunk in (("train", args.gen_seqs, args.seed + 10, args.gen_chunk),
                                  ("val", args.val_seqs, args.seed + 11, args.eval_chunk),
                                  ("test", args.test_seqs, args.seed + 12, args.eval_chunk)):
        seqs, plens = make_sequences(target, streams[split], n, prefixes, args.length, seed, dev, chunk)
        dtype = torch.bfloat16 if split == "train" and dev.startswith("cuda") else torch.float32
        feats = make_features(target, seqs, layers, dtype, 256)
        data[split] = (seqs, feats, plens - 1)   # lo: the anchor at the prompt's last token
    sync(dev)
    gen_seconds = time.time() - t0
    hi = args.length - 1 - args.block
    log(f"data: {args.gen_seqs}/{args.val_seqs}/{args.test_seqs} sequences of {args.length} tokens "
        f"(prompts of {prefixes} tokens) with features of layers {layers} in {gen_seconds:.1f} s")

    # Fixed anchors for validation and per-anchor test numbers.
    ev_gen = torch.Generator().manual_seed(args.seed + 20)
    ev_anchors = {s: sample_anchors(data[s][2], hi, 16, args.early, args.early_frac, ev_gen).to(dev)
                  for s in ("val", "test")}

    # 3. train.
    tcfg = target.cfg
    hcfg = block.HeadConfig(dim=tcfg.dim, n_layers=args.head_layers, n_heads=tcfg.n_heads,
                            n_kv_heads=tcfg.n_kv_heads, ffn_dim=args.ffn,
                            max_seq_len=tcfg.max_seq_len, norm_eps=tcfg.norm_eps,
                            rope_base=tcfg.rope_base, block_size=args.block,
                            vocab_size=tcfg.vocab_size, target_layers=layers)
    torch.manual_seed(args.seed + 1)
    head = block.BlockHead(hcfg, target.tok_embeddings.weight, target.output.weight).to(dev)
    with torch.no_grad():  # start the output norm where the target's is
        head.norm.weight.copy_(target.norm.weight)
    log(f"head: {head.n_params()} parameters {hcfg.to_dict()}")
    decay_p = [p for p in head.parameters() if p.dim() >= 2]
    other_p = [p for p in head.parameters() if p.dim() < 2]
    kw = {"fused": True} if dev.startswith("cuda") else {}
    opt = torch.optim.AdamW([{"params": decay_p, "weight_decay": 0.1},
                             {"params": other_p, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **kw)
    gen = torch.Generator().manual_seed(args.seed + 2)
    tr_seqs, tr_feats, tr_lo = data["train"]
    steps = args.steps or args.max_steps
    calibrated = bool(args.steps)
    best = (-1.0, 0, None)
    hist = []
    t0 = time.time()
    step = 0
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if dev.startswith("cuda")
                else torch.autocast("cpu", enabled=False))
    head.train()
    while step < steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, args.lr, args.warmup)
        pick = torch.randint(0, tr_seqs.shape[0], (args.batch_seqs,), generator=gen).to(dev)
        anchors, blens = sample_blocks(tr_lo[pick], hi, args.anchors, args.early, args.early_frac,
                                       gen, dev)
        with autocast:
            loss, acc_len = block_loss(head, tr_feats[pick], tr_seqs[pick], anchors, blens, args.decay)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        step += 1
        if not calibrated and step == 40:
            sync(dev)
            per = (time.time() - t0) / step
            # Evaluations cost time too: budget them at 8% of the training time.
            steps = max(step + 1, min(args.max_steps, int(args.train_seconds * 0.92 / per)))
            calibrated = True
            log(f"calibrated: {per * 1000:.1f} ms per step -> {steps} steps")
        if step % args.eval_every == 0 or step == steps:
            head.eval()
            ev = eval_anchors(head, data["val"][1], data["val"][0], ev_anchors["val"], args.block)
            head.train()
            rec = {"step": step, "loss": round(float(loss.detach()), 4),
                   "train_accepted_b16_view": round(float(acc_len.float().mean()), 3),
                   "val_mean_accepted_b16": round(ev["mean_accepted"], 4),
                   "val_row0": ev["row_accuracy"][0], "seconds": round(time.time() - t0, 1)}
            hist.append(rec)
            mark = ""
            if ev["mean_accepted"] > best[0]:
                best = (ev["mean_accepted"], step, copy.deepcopy(head.state_dict()))
                mark = " *"
            log(f"step {step}/{steps} lr {opt.param_groups[0]['lr']:.2e} loss {float(loss.detach()):.4f} "
                f"val accepted@16 {ev['mean_accepted']:.3f} row0 {ev['row_accuracy'][0]:.3f}{mark}")
    sync(dev)
    train_seconds = time.time() - t0
    head.load_state_dict(best[2])
    head.eval()
    stats["train"] = {"steps": steps, "best_step": best[1], "best_val_mean_accepted_b16": best[0],
                      "seconds": round(train_seconds, 2), "history": hist,
                      "blocks_per_step": args.batch_seqs * args.anchors,
                      "data_seconds": round(gen_seconds, 2)}
    stats["head"] = {"config": hcfg.to_dict(), "params": head.n_params()}
    log(f"trained {steps} steps in {train_seconds:.1f} s; best val at step {best[1]}: {best[0]:.3f}")
    # The trained weights, in case a later step fails (F16: what ships anyway).
    np.savez(os.path.join(args.out, "head-state.npz"),
             config=np.array(json.dumps(hcfg.to_dict())),
             **{k.replace(".", "__"): v.detach().cpu().half().numpy() for k, v in head.state_dict().items()})

    # 4. export and reload.
    path = os.path.join(args.out, "block.gguf")
    nbytes = block.export_block_gguf(
        head, path, description="phasemark block drafter head for phasemark-kjv-target "
        "(features of target layers " + ",".join(map(str, layers)) + "), trained on the target's "
        "greedy continuations of King James Version text (Debian bible-kjv-text)")
    shipped, g = block.load_block_gguf(path, target, dev)
    worst = 0.0
    ref = {k: v.detach().float() for k, v in head.state_dict().items()}
    got = dict(shipped.state_dict())
    for mod_name, gguf_name in block.head_tensor_order(hcfg):
        r, s = ref[mod_name], got[mod_name].float()
        tol = 0.0 if g.type_name(gguf_name) == "F32" else float(r.abs().max()) * 2.0 ** -10
        err = float((r - s).abs().max())
        if err > tol:
            raise RuntimeError(f"{gguf_name}: export error {err} over {tol}")
        worst = max(worst, err / tol if tol else 0.0)
    stats["file_bytes"] = nbytes
    log(f"exported {nbytes} bytes; reload check passed (worst error / tolerance {worst:.3f})")

    # 5. held-out acceptance on the reloaded head, float32.
    t0 = time.time()
    per_anchor = [eval_anchors(shipped, data["test"][1], data["test"][0], ev_anchors["test"], b)
                  for b in ACCEPT_BLOCKS]
    for r in per_anchor:
        log(f"test per-anchor b={r['b']}: mean accepted {r['mean_accepted']:.3f}")
    prompts = [p["ids"] for p in meta["accept_prompts"][: args.accept_prompts]]
    refs = spec.greedy_batch(target, prompts, args.accept_tokens, dev)
    chain = []
    for b in ACCEPT_BLOCKS:
        outs, st = chained(target, shipped, prompts, args.accept_tokens, b, dev)
        acc, dra, rounds = (sum(s[i] for s in st) for i in range(3))
        chain.append({"b": b, "prompts": len(prompts), "tokens_per_prompt": args.accept_tokens,
                      "accepted": acc, "drafted": dra, "rounds": rounds,
                      "mean_accepted_per_round": round(acc / rounds, 4),
                      "tokens_per_round": round(len(prompts) * args.accept_tokens / rounds, 4),
                      "acceptance": round(acc / dra, 4),
                      "spec_vs_greedy_mismatches": sum(int(o != r) for o, r in zip(outs, refs))})
        c = chain[-1]
        log(f"chained b={b}: {c['mean_accepted_per_round']:.3f} accepted per round, "
            f"{c['tokens_per_round']:.3f} tokens per target forward, spec != greedy on "
            f"{c['spec_vs_greedy_mismatches']} prompts")
    stats["measure"] = {"per_anchor_test": per_anchor, "chained_test_prompts": chain,
                        "seconds": round(time.time() - t0, 2)}
    stats["total_seconds"] = round(time.time() - t_start, 2)
    with open(os.path.join(args.out, "block-stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1)
    log(f"done: training {train_seconds:.1f} s, total {stats['total_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
