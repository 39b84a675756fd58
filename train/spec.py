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


def acceptance(target, draft, prompts, n, ks, device):
    """Acceptance at each k in ks over all prompts, and how many prompts'
    speculative output differed from plain greedy target output (must be 0
    up to float near-ties)."""
    refs = [greedy(target, p, n, device) for p in prompts]
    results = []
    for k in ks:
        acc = dra = rounds = mismatches = 0
        for p, ref in zip(prompts, refs):
            out, st = speculative(target, draft, p, n, k, device)
            mismatches += int(out != ref)
            acc += st["accepted"]
            dra += st["drafted"]
            rounds += st["rounds"]
        results.append({"k": k, "prompts": len(prompts), "tokens_per_prompt": n,
                        "accepted": acc, "drafted": dra, "acceptance": acc / dra,
                        "target_forwards": rounds,
                        "tokens_per_target_forward": len(prompts) * n / rounds,
                        "spec_vs_greedy_mismatches": mismatches})
    return results, refs
