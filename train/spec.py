"""spec.py — greedy decoding and greedy speculative decoding in PyTorch.

This is the reference the C engine's speculative decoder is held to: a draft
proposes k tokens autoregressively, the target scores prompt+committed+draft
in ONE forward and keeps the longest prefix of the draft that matches its
own argmax, then appends its own next token (the correction, or the bonus
token when all k matched). Greedy speculative output equals the target's
greedy output; acceptance = accepted draft tokens / drafted tokens.

Everything recomputes the whole sequence per forward (no KV cache): slower,
but there is no cache state to get wrong in a reference.
"""
import torch


@torch.no_grad()
def next_logits(model, seq, device):
    if len(seq) > model.cfg.max_seq_len:
        raise ValueError(f"sequence of {len(seq)} exceeds the context")
    ids = torch.tensor([seq], dtype=torch.long, device=device)
    return model(ids)[0].float()


@torch.no_grad()
def greedy(model, prompt, n, device, margins=False):
    """n greedy tokens after prompt; with margins=True also the gap between
    the best and second-best logit at each step (how close the argmax was to
    flipping, for comparisons against a different float implementation)."""
    seq, out, gaps = list(prompt), [], []
    for _ in range(n):
        last = next_logits(model, seq, device)[-1]
        top = torch.topk(last, 2)
        tok = int(top.indices[0])
        gaps.append(float(top.values[0] - top.values[1]))
        seq.append(tok)
        out.append(tok)
    return (out, gaps) if margins else out


@torch.no_grad()
def speculative(target, draft, prompt, n, k, device):
    """Greedy speculative decoding of n tokens. Returns (tokens, stats)."""
    seq, out = list(prompt), []
    accepted = drafted = rounds = 0
    while len(out) < n:
        kk = min(k, n - len(out))
        proposal = greedy(draft, seq, kk, device)
        # Target logits at the last kk+1 positions: position j predicts the
        # token after seq + proposal[:j].
        verify = next_logits(target, seq + proposal, device)[len(seq) - 1:].argmax(-1).tolist()
        a = 0
        while a < kk and proposal[a] == verify[a]:
            a += 1
        commit = proposal[:a] + [verify[a]]
        seq += commit
        out += commit
        accepted += a
        drafted += kk
        rounds += 1
    return out[:n], {"accepted": accepted, "drafted": drafted, "rounds": rounds}


@torch.no_grad()
def _argmax_tail(model, seqs, tails, device):
    """Argmax ids at the last tails[i] positions of each sequence, from one
    batched forward. Sequences are right-padded: with causal attention and
    absolute positions from 0, padding after a sequence's end cannot change
    any logit at or before that end, so this equals one forward per sequence."""
    width = max(len(s) for s in seqs)
    if width > model.cfg.max_seq_len:
        raise ValueError(f"sequence of {width} exceeds the context")
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    best = model(ids.to(device)).argmax(-1).cpu()
    return [best[i, len(s) - t:len(s)].tolist() for i, (s, t) in enumerate(zip(seqs, tails))]


def greedy_batch(model, prompts, n, device):
    """greedy() for many prompts at once; returns a list of n-token lists."""
    seqs = [list(p) for p in prompts]
    for _ in range(n):
        for s, t in zip(seqs, _argmax_tail(model, seqs, [1] * len(seqs), device)):
            s.append(t[0])
    return [s[len(p):] for s, p in zip(seqs, prompts)]


def speculative_batch(target, draft, prompts, n, k, device):
    """speculative() for many prompts in lockstep rounds; returns the token
    lists and per-prompt (accepted, drafted, rounds)."""
    seqs = [list(p) for p in prompts]
    outs = [[] for _ in prompts]
    stats = [[0, 0, 0] for _ in prompts]
    while True:
        active = [i for i in range(len(prompts)) if len(outs[i]) < n]
        if not active:
            break
        kk = {i: min(k, n - len(outs[i])) for i in active}
        # The draft's greedy tokens for one sequence do not depend on its
        # batch mates, so drafting max(kk) for all and trimming is exact.
        props = greedy_batch(draft, [seqs[i] for i in active], max(kk.values()), device)
        props = {i: pr[:kk[i]] for i, pr in zip(active, props)}
        verify = _argmax_tail(target, [seqs[i] + props[i] for i in active],
                              [kk[i] + 1 for i in active], device)
        for i, v in zip(active, verify):
            a = 0
            while a < kk[i] and props[i][a] == v[a]:
                a += 1
            commit = props[i][:a] + [v[a]]
            seqs[i] += commit
            outs[i] += commit
            stats[i][0] += a
            stats[i][1] += kk[i]
            stats[i][2] += 1
    return [o[:n] for o in outs], stats


def acceptance(target, draft, prompts, n, ks, device):
    """Acceptance at each k in ks over all prompts, and how many prompts'
    speculative output differed from plain greedy target output (must be 0
    up to float near-ties)."""
    refs = greedy_batch(target, prompts, n, device)
    results = []
    for k in ks:
        outs, stats = speculative_batch(target, draft, prompts, n, k, device)
        acc = sum(st[0] for st in stats)
        dra = sum(st[1] for st in stats)
        rounds = sum(st[2] for st in stats)
        results.append({"k": k, "prompts": len(prompts), "tokens_per_prompt": n,
                        "accepted": acc, "drafted": dra, "acceptance": acc / dra,
                        "target_forwards": rounds,
                        "tokens_per_target_forward": len(prompts) * n / rounds,
                        "spec_vs_greedy_mismatches": sum(int(o != r) for o, r in zip(outs, refs))})
    return results, refs
