#!/usr/bin/env python3
"""train_block.py — train the block drafter head on the shipped target, export, measure.

One run, in this order, each step timed:
  1. load the shipped target (Q8_0 dequantized, float32, TF32 off) and check
     its greedy output against models/golden.json;
  2. data: prompts of BOS + a random window of the training split (16 to
     64 tokens, like held-out prompts), each continued by the target
     (KV-cached) to --length tokens: most greedily, a fraction
     (--sampled-frac) sampled at --temp, because speculative sampling
     meets sampled text and the head must draft the target's distribution
     there, not its argmax. The same from validation and test chapters for
     checkpoint choice and reporting. Target features of every position
     come from one full forward per sequence (causal, so position j's
     features see only tokens 0..j, exactly what the engine has);
  3. train: each step takes S sequences and K random anchors a in each
     (a = the last committed token, from the prompt's last token to
     len-1-B; a fraction in the first --early positions, where held-out
     runs spend their rounds); the block's first row is the token at a, its
     other rows mask_embd; it attends to context j < a and its own rows
     (block_mask). Row i's target is the token at a+1+i and the target's
     distribution there (its logits at a+i, recomputed from the stored
     last-layer features): loss = hard * CE + (1 - hard) * KL(p || q), hard
     = --hard on greedy continuations and --hard-sampled on sampled ones.
     Row i's loss is weighted decay^i (a later row only counts when every
     earlier one was accepted). Each block uses b rows, b drawn from
     {2, 4, 8, 16}, so one head serves every block size. The weights with
     the best validation score (greedy accepted rows + expected accepted
     rows under sampling, both at b = 16) are kept;
  4. export GGUF (F16 matrices, F32 norms), reload it through the
     independent reader and check every tensor;
  5. on the reloaded head in float32: held-out acceptance, per anchor on
     test continuations (greedy: leading rows equal to the target's tokens;
     sampled: expected accepted rows from sum min(p, q) per row) and
     chained on the held-out test prompts (real verify rounds with the
     target: greedy ones checked against plain greedy, and speculative
     sampling at --temp); the same for --compare-head, if given, on the
     same data.
Outputs in --out: block.gguf, block-stats.json (head-state.npz as soon as
training ends, in case a later step fails).
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
def make_sequences(target, stream, n, prefixes, length, seed, device, chunk, sampled_frac=0.0,
                   temp=0.7):
    """n prompts, each BOS + a random window of the stream, continued by the
    target up to `length` tokens: in each chunk the last round(rows *
    sampled_frac) rows sampled at temp, the others greedy. Chunk c (of
    `chunk` rows) uses prompt length prefixes[c % len(prefixes)], so the
    prompts vary in length the way real ones do (held-out prompts are BOS
    + one verse + a few words). Returns (seqs [n, length], prompt lengths
    [n], sampled [n] bool)."""
    g = torch.Generator().manual_seed(seed)
    dg = torch.Generator(device=device).manual_seed(seed + 1000)
    seqs, plens, hot = [], [], []
    for c, i in enumerate(range(0, n, chunk)):
        rows = min(chunk, n - i)
        p = prefixes[c % len(prefixes)]
        starts = torch.randint(0, stream.numel() - p, (rows,), generator=g)
        windows = stream[starts[:, None] + torch.arange(p - 1)]
        windows = torch.cat([torch.full((rows, 1), BOS, dtype=windows.dtype), windows], dim=1)
        temps = torch.zeros(rows, device=device)
        temps[rows - int(round(rows * sampled_frac)):] = temp
        seqs.append(block.continue_cached(target, windows.to(device), length - p, temps, dg))
        plens.append(torch.full((rows,), p, dtype=torch.long))
        hot.append(temps > 0)
    return torch.cat(seqs), torch.cat(plens).to(device), torch.cat(hot)


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


def last_layer_slice(layers, n_target_layers, dim):
    """Where the target's last layer sits in a feature vector: its logits
    (the soft targets) are recomputed from it."""
    if n_target_layers - 1 not in layers:
        raise ValueError(f"the soft targets need the target's last layer ({n_target_layers - 1}) "
                         f"among --layers {layers}")
    i = layers.index(n_target_layers - 1)
    return slice(i * dim, (i + 1) * dim)


def gather_rows(x, pos):
    """x [S, L, C], pos [S, K, B] -> [S, K, B, C]: x at each position."""
    s, k, b = pos.shape
    idx = pos.reshape(s, k * b, 1).expand(-1, -1, x.shape[-1])
    return torch.gather(x, 1, idx).view(s, k, b, x.shape[-1])


def block_targets(target, feats, seqs, anchors, bsz, last):
    """Labels [S, K, B] (the token at anchor+1+i) and the target's logits
    that produced them (at anchor+i) [S, K, B, V]."""
    y = labels_for(seqs, anchors, bsz)
    pos = anchors[:, :, None] + torch.arange(bsz, device=seqs.device)
    return y, block.target_logits(target, gather_rows(feats[..., last], pos))


def block_loss(head, target, feats, seqs, anchors, blens, decay, hard, last):
    bsz = head.cfg.block_size
    first = torch.gather(seqs, 1, anchors)
    logits = head(feats, first, anchors, blens)
    y, tl = block_targets(target, feats, seqs, anchors, bsz, last)
    w = block.row_weights(blens, bsz, decay)
    loss, ce, kl = block.distill_loss(logits, y, tl, w, hard)
    hit = (logits.argmax(-1) == y).float()
    acc_len = torch.cumprod(hit, dim=-1).sum(-1)   # leading correct rows (b = 16 view)
    return loss, ce, kl, acc_len


@torch.no_grad()
def eval_anchors(head, target, split, anchors, b, temp, last, chunk=64):
    """Per-anchor acceptance with blocks of b rows on one held-out split
    (seqs, feats, lo, sampled). On its greedy continuations: mean leading
    rows equal to the target's tokens (accepted drafts per round if that
    anchor were a round's start) and per-row accuracy. On its sampled ones:
    the expected accepted rows of speculative sampling at temp (rows
    independent, row i accepted with probability sum min(p, q)) and the
    mean overlap per row."""
    seqs, feats, _, hot = split
    out = {"b": b}
    for kind, sel in (("greedy", ~hot), ("sampled", hot)):
        idx = torch.nonzero(sel.to(seqs.device))[:, 0]
        acc, rows, n = 0.0, torch.zeros(b, dtype=torch.float64), 0
        for i in range(0, idx.numel(), chunk):
            j = idx[i:i + chunk]
            s, f, a = seqs[j], feats[j].float(), anchors[j]
            first = torch.gather(s, 1, a)
            logits = head(f, first, a, torch.full_like(a, b))[:, :, :b]
            y, tl = block_targets(target, f, s, a, head.cfg.block_size, last)
            if kind == "greedy":
                r = (logits.argmax(-1) == y[:, :, :b]).double()
                acc += float(torch.cumprod(r, -1).sum())
            else:
                r = block.row_overlap(logits, tl[:, :, :b], temp).double()
                acc += float(block.expected_prefix(r).sum())
            rows += r.sum((0, 1)).cpu()
            n += a.numel()
        out[kind] = {"anchors": n, "mean_accepted": acc / max(1, n),
                     "row_accuracy" if kind == "greedy" else "row_overlap":
                     [round(float(x) / max(1, n), 4) for x in rows]}
    return out


@torch.no_grad()
def chained(target, head, prompts, n_tokens, b, device, temp=0.0, seed=0):
    """Speculative decoding with the head as drafter, all prompts in
    lockstep rounds. Each round: target features of the committed context
    (positions 0..n-2), one head forward proposing b tokens, one target
    verify forward over committed + proposal. Greedy (temp 0): keep the
    longest prefix equal to the target's argmax plus the target's own next
    token. temp > 0: speculative sampling, drafts drawn from softmax(head
    logits / temp), verified against softmax(target logits / temp)."""
    layers = head.cfg.target_layers
    g = torch.Generator().manual_seed(seed)
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
        logits = head(f, first, anchors, torch.full_like(anchors, b))[:, 0, :b].float()
        if temp > 0:
            q = (logits / temp).softmax(-1).cpu()
            props = torch.multinomial(q.view(-1, q.shape[-1]), 1, generator=g).view(len(act), b).tolist()
        else:
            props = logits.argmax(-1).tolist()
        kk = [min(b, n_tokens - len(outs[i])) for i in act]
        vw = max(n + k for n, k in zip(ns, kk))
        ver = torch.zeros(len(act), vw, dtype=torch.long)
        for r, i in enumerate(act):
            row = seqs[i] + props[r][:kk[r]]
            ver[r, :len(row)] = torch.tensor(row, dtype=torch.long)
        vl, _ = block.target_forward(target, ver.to(device))
        if temp == 0:
            am = vl.argmax(-1).cpu()
        for r, i in enumerate(act):
            if temp > 0:
                p = (vl[r, ns[r] - 1:ns[r] + kk[r]].float() / temp).softmax(-1).cpu()
                a, commit = block.spec_sample_verify(
                    props[r][:kk[r]], q[r], p, torch.rand(kk[r], generator=g),
                    lambda pr: torch.multinomial(pr, 1, generator=g))
            else:
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


def measure(target, head, data, ev_anchors, prompts, refs, args, dev, last, name):
    """Per-anchor and chained held-out numbers of one head (float32)."""
    per_anchor = [eval_anchors(head, target, data["test"], ev_anchors["test"], b, args.temp, last)
                  for b in ACCEPT_BLOCKS]
    for r in per_anchor:
        log(f"{name}: test per-anchor b={r['b']}: mean accepted greedy "
            f"{r['greedy']['mean_accepted']:.3f}, expected at T={args.temp} "
            f"{r['sampled']['mean_accepted']:.3f}")
    chain = []
    for temp in (0.0, args.temp):
        for b in ACCEPT_BLOCKS:
            outs, st = chained(target, head, prompts, args.accept_tokens, b, dev, temp,
                               args.seed + 30 + b)
            acc, dra, rounds = (sum(s[i] for s in st) for i in range(3))
            c = {"b": b, "temp": temp, "prompts": len(prompts),
                 "tokens_per_prompt": args.accept_tokens,
                 "accepted": acc, "drafted": dra, "rounds": rounds,
                 "mean_accepted_per_round": round(acc / rounds, 4),
                 "tokens_per_round": round(len(prompts) * args.accept_tokens / rounds, 4),
                 "acceptance": round(acc / dra, 4)}
            if temp == 0:
                c["spec_vs_greedy_mismatches"] = sum(int(o != r) for o, r in zip(outs, refs))
            chain.append(c)
            log(f"{name}: chained T={temp} b={b}: {c['mean_accepted_per_round']:.3f} accepted per "
                f"round, {c['tokens_per_round']:.3f} tokens per target forward"
                + (f", spec != greedy on {c['spec_vs_greedy_mismatches']} prompts" if temp == 0 else ""))
    return {"per_anchor_test": per_anchor, "chained_test_prompts": chain}


def lr_at(step, steps, peak, warmup, floor=0.1):
    """Linear warmup, then cosine from peak down to floor * peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, steps - warmup))
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * frac)))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--target", default="models/phasemark-kjv-target-q8_0.gguf")
    ap.add_argument("--golden", default="models/golden.json")
    ap.add_argument("--corpus", default="build-train/corpus")
    ap.add_argument("--out", default="build-train/block")
    ap.add_argument("--compare-head", default="",
                    help="a head file measured the same way on the same data (before/after)")
    ap.add_argument("--init-head", default="",
                    help="start from this head file (same layout) instead of random weights")
    ap.add_argument("--train-data-seed", type=int, default=0,
                    help="offset of the training data's seed only (fresh data, same held-out data)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", default="1,3,5",
                    help="target layers read (0-based; must include the last)")
    ap.add_argument("--head-layers", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--gen-seqs", type=int, default=24576)
    ap.add_argument("--sampled-frac", type=float, default=1.0 / 3.0,
                    help="fraction of every split's continuations sampled at --temp")
    ap.add_argument("--temp", type=float, default=0.7,
                    help="sampling temperature of the sampled continuations and of the measures")
    ap.add_argument("--prefixes", default="16,24,32,48,64",
                    help="prompt lengths (BOS + text), one per chunk in turn")
    ap.add_argument("--length", type=int, default=224, help="prompt + continuation tokens")
    ap.add_argument("--gen-chunk", type=int, default=4096)
    ap.add_argument("--early", type=int, default=128,
                    help="the early span of a continuation that --early-frac of anchors fall in")
    ap.add_argument("--early-frac", type=float, default=0.7)
    ap.add_argument("--val-seqs", type=int, default=260)
    ap.add_argument("--test-seqs", type=int, default=260)
    ap.add_argument("--batch-seqs", type=int, default=64)
    ap.add_argument("--anchors", type=int, default=16, help="blocks per sequence per step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-floor", type=float, default=0.02, help="final lr / peak lr")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--decay", type=float, default=0.85, help="loss weight ratio per block row")
    ap.add_argument("--hard", type=float, default=0.5,
                    help="weight of the hard CE (vs KL to the target) on greedy continuations")
    ap.add_argument("--hard-sampled", type=float, default=0.0,
                    help="the same on sampled continuations")
    ap.add_argument("--steps", type=int, default=0, help="0: as many as --train-seconds allows")
    ap.add_argument("--train-seconds", type=float, default=150.0)
    ap.add_argument("--max-steps", type=int, default=40000)
    ap.add_argument("--checkpoint", action="store_true",
                    help="write block-best.gguf to --out at every new best validation score")
    ap.add_argument("--eval-every", type=int, default=1000)
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
    last = last_layer_slice(layers, target.cfg.n_layers, target.cfg.dim)
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

    # 2. data. Held-out splits take one chunk per prompt length.
    torch.manual_seed(args.seed)
    streams = {s: load_stream(args.corpus, s) for s in ("train", "val", "test")}
    t0 = time.time()
    prefixes = [int(x) for x in args.prefixes.split(",")]
    data = {}
    for split, n, seed, chunk in (
            ("train", args.gen_seqs, args.seed + 10 + args.train_data_seed, args.gen_chunk),
            ("val", args.val_seqs, args.seed + 11, -(-args.val_seqs // len(prefixes))),
            ("test", args.test_seqs, args.seed + 12, -(-args.test_seqs // len(prefixes)))):
        seqs, plens, hot = make_sequences(target, streams[split], n, prefixes, args.length, seed,
                                          dev, chunk, args.sampled_frac, args.temp)
        dtype = torch.bfloat16 if split == "train" and dev.startswith("cuda") else torch.float32
        feats = make_features(target, seqs, layers, dtype, 256)
        data[split] = (seqs, feats, plens - 1, hot)   # lo: the anchor at the prompt's last token
        log(f"data {split}: {n} sequences ({int(hot.sum())} sampled at T={args.temp}) "
            f"in {time.time() - t0:.1f} s")
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
    if args.init_head:
        init, _ = block.load_block_gguf(args.init_head, target, dev)
        if init.cfg.to_dict() != hcfg.to_dict():
            raise ValueError(f"--init-head {args.init_head}: layout {init.cfg.to_dict()} "
                             f"differs from {hcfg.to_dict()}")
        head.load_state_dict(init.state_dict())
        stats["init_head"] = args.init_head
        log(f"head starts from {args.init_head}")
    log(f"head: {head.n_params()} parameters {hcfg.to_dict()}")
    decay_p = [p for p in head.parameters() if p.dim() >= 2]
    other_p = [p for p in head.parameters() if p.dim() < 2]
    kw = {"fused": True} if dev.startswith("cuda") else {}
    opt = torch.optim.AdamW([{"params": decay_p, "weight_decay": 0.1},
                             {"params": other_p, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **kw)
    gen = torch.Generator().manual_seed(args.seed + 2)
    tr_seqs, tr_feats, tr_lo, tr_hot = data["train"]
    tr_hard = args.hard + (args.hard_sampled - args.hard) * tr_hot.float().to(dev)
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
            g["lr"] = lr_at(step, steps, args.lr, args.warmup, args.lr_floor)
        pick = torch.randint(0, tr_seqs.shape[0], (args.batch_seqs,), generator=gen).to(dev)
        anchors, blens = sample_blocks(tr_lo[pick], hi, args.anchors, args.early, args.early_frac,
                                       gen, dev)
        with autocast:
            loss, ce, kl, acc_len = block_loss(head, target, tr_feats[pick], tr_seqs[pick], anchors,
                                               blens, args.decay, tr_hard[pick][:, None, None], last)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        step += 1
        if not calibrated and step == 20:
            sync(dev)
            t20 = time.time()
        if not calibrated and step == 80:
            # Timed from step 20: the first steps pay for allocation and
            # kernel selection and would underestimate the steps that fit.
            sync(dev)
            per = (time.time() - t20) / 60
            # Evaluations cost time too: budget them at 8% of the training time.
            steps = max(step + 1, min(args.max_steps, int(args.train_seconds * 0.92 / per)))
            calibrated = True
            log(f"calibrated: {per * 1000:.1f} ms per step -> {steps} steps")
        if step % args.eval_every == 0 or step == steps:
            head.eval()
            ev = eval_anchors(head, target, data["val"], ev_anchors["val"], args.block, args.temp, last)
            head.train()
            score = ev["greedy"]["mean_accepted"] + ev["sampled"]["mean_accepted"]
            rec = {"step": step, "loss": round(float(loss.detach()), 4),
                   "ce": round(float(ce.detach()), 4), "kl": round(float(kl.detach()), 4),
                   "train_accepted_b16_view": round(float(acc_len.float().mean()), 3),
                   "val_mean_accepted_b16": round(ev["greedy"]["mean_accepted"], 4),
                   "val_expected_accepted_b16_sampled": round(ev["sampled"]["mean_accepted"], 4),
                   "val_row0": ev["greedy"]["row_accuracy"][0],
                   "val_row0_overlap": ev["sampled"]["row_overlap"][0],
                   "seconds": round(time.time() - t0, 1)}
            hist.append(rec)
            mark = ""
            if score > best[0]:
                best = (score, step, copy.deepcopy(head.state_dict()))
                mark = " *"
                if args.checkpoint:   # a run cut short still leaves its best head
                    block.export_block_gguf(head, os.path.join(args.out, "block-best.gguf"))
            log(f"step {step}/{steps} lr {opt.param_groups[0]['lr']:.2e} loss {rec['loss']:.4f} "
                f"(ce {rec['ce']:.3f} kl {rec['kl']:.3f}) val accepted@16 greedy "
                f"{rec['val_mean_accepted_b16']:.3f} sampled {rec['val_expected_accepted_b16_sampled']:.3f} "
                f"row0 {rec['val_row0']:.3f}{mark}")
    sync(dev)
    train_seconds = time.time() - t0
    head.load_state_dict(best[2])
    head.eval()
    stats["train"] = {"steps": steps, "best_step": best[1], "best_val_score": best[0],
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
        f"greedy and T={args.temp} sampled continuations of King James Version text "
        "(Debian bible-kjv-text), distilling its distributions")
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
    stats_path = os.path.join(args.out, "block-stats.json")

    def save():
        stats["total_seconds"] = round(time.time() - t_start, 2)
        with open(stats_path, "w", encoding="utf-8") as f:
            json.dump(stats, f, indent=1)
    save()

    # 5. held-out acceptance on the reloaded head (and the one compared), float32.
    t0 = time.time()
    prompts = [p["ids"] for p in meta["accept_prompts"][: args.accept_prompts]]
    refs = spec.greedy_batch(target, prompts, args.accept_tokens, dev)
    stats["measure"] = measure(target, shipped, data, ev_anchors, prompts, refs, args, dev, last, "new")
    stats["measure"]["seconds"] = round(time.time() - t0, 2)
    save()
    if args.compare_head:
        t0 = time.time()
        other, _ = block.load_block_gguf(args.compare_head, target, dev)
        stats["compare"] = measure(target, other, data, ev_anchors, prompts, refs, args, dev, last,
                                   "compare")
        stats["compare"]["file"] = args.compare_head
        stats["compare"]["seconds"] = round(time.time() - t0, 2)
    save()
    log(f"done: training {train_seconds:.1f} s, total {stats['total_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
