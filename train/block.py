"""block.py — the feature-conditioned block drafter head, and the target it reads.

The head follows the lead's contract for the C engine exactly (the engine
loads what export_block_gguf() writes and must compute the same numbers):

  inputs: committed t_0..t_{n-1}; target features f_j (j = 0..n-2) = the
          residual stream after each listed target layer, concatenated
  c_j  = rmsnorm(W_fc f_j) * fc_norm
  x_0  = target_embed(t_{n-1}); x_i = mask_embd (i = 1..b-1); row i at
         position n-1+i, context c_j at position j
  per head layer:
    h = rmsnorm(x) * attn_norm;  g_j = rmsnorm(c_j) * attn_norm (same weights)
    q, k = rope(Wq h), rope(Wk h) at the rows' positions; v = Wv h
    kc_j = rope(Wk g_j, j); vc_j = Wv g_j
    every row attends to all context and all b rows (no causal mask),
    grouped-query like the target, scale 1/sqrt(head_dim)
    x += Wo attn;  x += W_down(silu(W_gate u) * W_up u), u = rmsnorm(x) * ffn_norm
  logits_i = target_output . (rmsnorm(x_i) * output_norm)  -> token n+i

Training batches many blocks at once: S sequences, K blocks per sequence
(anchor a = n-1 = the position of the block's first row, the last committed
token), each block attending to the context positions j < a and to its own
rows only. block_mask() builds that pattern; with K = 1 it is exactly one
drafting call of the engine.

The target is model.Transformer loaded from the shipped GGUF (Q8_0 matrices
dequantized to float32) through the independent reader, plus a KV-cached
greedy decoder for making training data fast.
"""
import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import gguf_read
import gguf_write as gw
from model import Config, RMSNorm, Transformer, apply_rope, gguf_tensor_order, rope_tables

ARCH = "phasemark-block"
MAX_BLOCK = 16
MAX_FEATURES = 8


# --------------------------------------------------------------------------
# The target


def target_config(g):
    kv = g.kv
    if kv.get("general.architecture") != "llama":
        raise gguf_read.GGUFError("target is not a llama model")
    cfg = Config(vocab_size=kv["llama.vocab_size"], dim=kv["llama.embedding_length"],
                 n_layers=kv["llama.block_count"], n_heads=kv["llama.attention.head_count"],
                 n_kv_heads=kv["llama.attention.head_count_kv"],
                 ffn_dim=kv["llama.feed_forward_length"], max_seq_len=kv["llama.context_length"],
                 norm_eps=kv["llama.attention.layer_norm_rms_epsilon"],
                 rope_base=kv["llama.rope.freq_base"], dropout=0.0)
    if kv["llama.rope.dimension_count"] != cfg.head_dim:
        raise gguf_read.GGUFError("partial rotary dimensions are not supported")
    return cfg


def load_target(path, device="cpu"):
    """float32 Transformer (untied) holding the file's dequantized weights."""
    g = gguf_read.GGUFFile(path)
    cfg = target_config(g)
    model = Transformer(cfg, tied=False)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for mod_name, gguf_name in gguf_tensor_order(cfg):
            arr = g.tensor(gguf_name)
            p = params[mod_name]
            if tuple(arr.shape) != tuple(p.shape):
                raise gguf_read.GGUFError(f"{gguf_name}: shape {arr.shape}, expected {tuple(p.shape)}")
            p.copy_(torch.from_numpy(arr))
    for p in model.parameters():
        p.requires_grad_(False)
    return model.to(device).eval()


def _attend(q, k, v, mask):
    """q [B, H, Tq, hd], k/v [B, H, Tk, hd], mask [B or 1, 1, Tq, Tk] bool
    (True = may attend). Plain softmax attention in float32."""
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    return att @ v


@torch.no_grad()
def target_forward(model, ids, layers=(), cache=None, pos0=0):
    """ids [B, T] at positions pos0..pos0+T-1 -> (logits [B, T, V], features
    [B, T, |layers| * D] or None). With cache (a list with one (k, v) pair per
    layer, or empty to start one) the new keys/values are appended and the
    new rows also attend to everything cached: this is the engine's decode.
    Features are the residual stream after each listed layer (0-based), the
    output of that block before the final norm, concatenated in list order."""
    cfg = model.cfg
    b, t = ids.shape
    hd, rep = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
    if pos0 + t > cfg.max_seq_len:
        raise ValueError(f"positions up to {pos0 + t} exceed the context {cfg.max_seq_len}")
    cos, sin = model.rope_cos[pos0:pos0 + t], model.rope_sin[pos0:pos0 + t]
    h = model.tok_embeddings(ids)
    feats = []
    for li, layer in enumerate(model.layers):
        att = layer.attention
        a = layer.attention_norm(h)
        q = apply_rope(att.wq(a).view(b, t, cfg.n_heads, hd), cos, sin).transpose(1, 2)
        k = apply_rope(att.wk(a).view(b, t, cfg.n_kv_heads, hd), cos, sin).transpose(1, 2)
        v = att.wv(a).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        if cache is not None:
            if len(cache) > li:
                k = torch.cat([cache[li][0], k], dim=2)
                v = torch.cat([cache[li][1], v], dim=2)
                cache[li] = (k, v)
            else:
                cache.append((k, v))
        tk = k.shape[2]
        qpos = torch.arange(pos0, pos0 + t, device=ids.device)
        mask = (torch.arange(tk, device=ids.device)[None, :] <= qpos[:, None])[None, None]
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        o = _attend(q, k, v, mask).transpose(1, 2).reshape(b, t, cfg.n_heads * hd)
        h = h + att.wo(o)
        h = h + layer.feed_forward(layer.ffn_norm(h))
        if li in layers:
            feats.append(h)
    logits = model.output(model.norm(h))
    if layers:
        order = [feats[sorted(layers).index(l)] for l in layers]
        return logits, torch.cat(order, dim=-1)
    return logits, None


@torch.no_grad()
def continue_cached(model, prefix, n_new, temps=None, gen=None):
    """prefix [B, Lp] (same length for all rows) -> [B, Lp + n_new] with the
    target's tokens appended, using a KV cache (one prefill, then one token
    per step). temps [B] (float, on prefix's device): row r takes the argmax
    where temps[r] == 0 and samples softmax(logits / temps[r]) otherwise,
    drawing from gen (a generator on the same device); temps None: all
    greedy."""
    cache = []
    logits, _ = target_forward(model, prefix, cache=cache, pos0=0)
    seq = [prefix, next_tokens(logits[:, -1], temps, gen)]
    pos = prefix.shape[1]
    for _ in range(n_new - 1):
        logits, _ = target_forward(model, seq[-1], cache=cache, pos0=pos)
        pos += 1
        seq.append(next_tokens(logits[:, -1], temps, gen))
    return torch.cat(seq, dim=1)


def next_tokens(logits, temps, gen):
    """logits [B, V] -> [B, 1]: argmax, or a draw at each row's temperature."""
    greedy = logits.argmax(-1, keepdim=True)
    if temps is None:
        return greedy
    hot = temps > 0
    if not bool(hot.any()):
        return greedy
    t = torch.where(hot, temps, torch.ones_like(temps))
    probs = (logits.float() / t[:, None]).softmax(-1)
    drawn = torch.multinomial(probs, 1, generator=gen)
    return torch.where(hot[:, None], drawn, greedy)


@torch.no_grad()
def greedy_cached(model, prefix, n_new):
    """continue_cached, every row greedy."""
    return continue_cached(model, prefix, n_new)


@torch.no_grad()
def features_batched(model, seqs, layers, chunk=256):
    """Full forwards over seqs [N, L] in chunks -> (features [N, L, |F| D]
    float32 on seqs' device, argmax [N, L])."""
    fs, am = [], []
    for i in range(0, seqs.shape[0], chunk):
        logits, f = target_forward(model, seqs[i:i + chunk], layers)
        fs.append(f)
        am.append(logits.argmax(-1))
    return torch.cat(fs), torch.cat(am)


# --------------------------------------------------------------------------
# The head


@dataclass
class HeadConfig:
    dim: int = 512
    n_layers: int = 2
    n_heads: int = 8
    n_kv_heads: int = 4
    ffn_dim: int = 1024
    max_seq_len: int = 512
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    block_size: int = 16
    vocab_size: int = 4096
    target_layers: list = field(default_factory=lambda: [1, 3, 5])

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    @property
    def n_feat(self):
        return len(self.target_layers)

    def validate(self):
        if not 1 <= self.n_layers <= 3:
            raise ValueError("the head has 1..3 layers")
        if not 1 <= self.n_feat <= MAX_FEATURES:
            raise ValueError(f"the head reads 1..{MAX_FEATURES} target layers")
        if not 1 <= self.block_size <= MAX_BLOCK:
            raise ValueError(f"block size must be 1..{MAX_BLOCK}")
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads or self.head_dim % 2:
            raise ValueError(f"inconsistent head layout: {self}")

    def to_dict(self):
        d = asdict(self)
        d["head_dim"] = self.head_dim
        return d


def rope_at(x, pos, cos_tab, sin_tab):
    """x [B, T, H, hd]; pos [B, T] long: rotate adjacent pairs (x[2i],
    x[2i+1]) by pos * base^(-2i/hd), each row at its own position."""
    c = cos_tab[pos][:, :, None, :]
    s = sin_tab[pos][:, :, None, :]
    xp = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.reshape(x.shape).type_as(x)


def block_mask(anchors, blens, n_ctx, block):
    """Attention pattern for K blocks per sequence.

    anchors [S, K] long: position a of each block's first row (= n-1, the
    last committed token); blens [S, K]: rows each block uses (<= block).
    Returns [S, K*block, n_ctx + K*block] bool, True where row (k, i) may
    attend: context column j iff j < a_k; block column (k', i') iff k' == k
    and i' < blens_k. Rows i >= blens_k still get a (harmless) pattern so
    softmax never sees an all-masked row: they attend to their own block."""
    s, k = anchors.shape
    dev = anchors.device
    j = torch.arange(n_ctx, device=dev)
    ctx = j[None, None, :] < anchors[:, :, None]                      # [S, K, n_ctx]
    ctx = ctx[:, :, None, :].expand(s, k, block, n_ctx)
    same = torch.eye(k, dtype=torch.bool, device=dev)                  # [K, K]
    col_ok = torch.arange(block, device=dev)[None, None, :] < blens[:, :, None]  # [S, K, B]
    blk = same[None, :, None, :, None] & col_ok[:, None, None, :, :]   # [S, K, 1, K, B]
    blk = blk.expand(s, k, block, k, block).reshape(s, k, block, k * block)
    return torch.cat([ctx, blk], dim=-1).reshape(s, k * block, n_ctx + k * block)


class HeadLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hd = cfg.head_dim
        self.cfg = cfg
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # ffn_gate
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # ffn_up
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)  # ffn_down

    def forward(self, x, c, pos_x, pos_c, mask, cos, sin):
        cfg = self.cfg
        hd, rep = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
        s, t, _ = x.shape
        lc = c.shape[1]
        h = self.attn_norm(x)
        g = self.attn_norm(c)
        q = rope_at(self.wq(h).view(s, t, cfg.n_heads, hd), pos_x, cos, sin)
        kb = rope_at(self.wk(h).view(s, t, cfg.n_kv_heads, hd), pos_x, cos, sin)
        vb = self.wv(h).view(s, t, cfg.n_kv_heads, hd)
        kc = rope_at(self.wk(g).view(s, lc, cfg.n_kv_heads, hd), pos_c, cos, sin)
        vc = self.wv(g).view(s, lc, cfg.n_kv_heads, hd)
        k = torch.cat([kc, kb], dim=1).transpose(1, 2)
        v = torch.cat([vc, vb], dim=1).transpose(1, 2)
        q = q.transpose(1, 2)
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)).float() * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~mask[:, None], float("-inf")).softmax(-1).type_as(v)
        o = (att @ v).transpose(1, 2).reshape(s, t, cfg.n_heads * hd)
        x = x + self.wo(o)
        u = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(u)) * self.w3(u))


class BlockHead(nn.Module):
    """The trainable head. The target's token embedding and output matrix
    are frozen buffers here (not saved, not exported): the engine shares the
    target's own."""

    def __init__(self, cfg, tok_embd, output):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        d = cfg.dim
        if tuple(tok_embd.shape) != (cfg.vocab_size, d) or tuple(output.shape) != (cfg.vocab_size, d):
            raise ValueError("target embedding/output do not match the head's vocab and width")
        self.fc = nn.Linear(cfg.n_feat * d, d, bias=False)
        self.fc_norm = RMSNorm(d, cfg.norm_eps)
        self.mask_embd = nn.Parameter(torch.zeros(d))
        self.layers = nn.ModuleList(HeadLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(d, cfg.norm_eps)
        self.register_buffer("tok_embd", tok_embd.detach().float().clone(), persistent=False)
        self.register_buffer("output", output.detach().float().clone(), persistent=False)
        cos, sin = rope_tables(Config(dim=d, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads,
                                      rope_base=cfg.rope_base), cfg.max_seq_len + MAX_BLOCK, "cpu")
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights()

    def _init_weights(self):
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("wo.weight") or name.endswith("w2.weight"):
                    std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
                nn.init.normal_(p, mean=0.0, std=std)
        # A mask row starts as an average token: the target's embedding scale.
        with torch.no_grad():
            self.mask_embd.copy_(self.tok_embd.mean(0))

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, feats, first_tok, anchors, blens):
        """feats [S, L, |F| D] (context positions 0..L-1 of each sequence),
        first_tok [S, K] (the token at each anchor), anchors [S, K] (its
        position), blens [S, K] (rows per block) -> logits [S, K, B, V]
        with B = cfg.block_size; row i of block k proposes the token at
        anchors + 1 + i. Rows i >= blens are computed but see only their
        own block and must be ignored by the caller."""
        cfg = self.cfg
        s, lc, _ = feats.shape
        k, bsz = anchors.shape[1], cfg.block_size
        dev = feats.device
        c = self.fc_norm(self.fc(feats))
        x = self.mask_embd.expand(s, k, bsz, cfg.dim).clone()
        x[:, :, 0] = self.tok_embd[first_tok].to(x.dtype)
        x = x.reshape(s, k * bsz, cfg.dim)
        pos_x = (anchors[:, :, None] + torch.arange(bsz, device=dev)).reshape(s, k * bsz)
        pos_c = torch.arange(lc, device=dev)[None, :].expand(s, lc)
        mask = block_mask(anchors, blens, lc, bsz)
        for layer in self.layers:
            x = layer(x, c, pos_x, pos_c, mask, self.rope_cos, self.rope_sin)
        logits = self.norm(x) @ self.output.t().to(x.dtype)
        return logits.view(s, k, bsz, -1)


# --------------------------------------------------------------------------
# The training objective and the acceptance it stands for


def row_weights(blens, block, decay):
    """[S, K, block] loss weights: decay^i on rows i < blens, 0 past them.
    Acceptance is a prefix (row i counts only when rows 0..i-1 were
    accepted), so later rows weigh less."""
    rows = torch.arange(block, device=blens.device)
    valid = (rows[None, None, :] < blens[:, :, None]).float()
    return (decay ** rows.float())[None, None, :] * valid


def target_logits(target, hidden):
    """The target's logits from the residual stream after its last layer
    (the features of layer n_layers-1): output . (rmsnorm(h) * norm)."""
    return target.output(target.norm(hidden))


def distill_loss(logits, labels, t_logits, weights, hard):
    """Per-row mixture of the hard cross-entropy on the sequence's own next
    token and KL(p_target || q_head) on the target's distribution there.

    logits, t_logits [..., V]; labels [...] long; weights [...] (0 = row
    unused); hard: a float, or a tensor broadcasting to weights (per
    sequence: greedy continuations want the argmax, sampled ones only the
    distribution). Returns (loss, weighted mean CE, weighted mean KL)."""
    logq = logits.float().log_softmax(-1)
    logp = t_logits.float().log_softmax(-1)
    ce = -logq.gather(-1, labels[..., None])[..., 0]
    kl = (logp.exp() * (logp - logq)).sum(-1)
    hard = torch.as_tensor(hard, dtype=ce.dtype, device=ce.device)
    per_row = hard * ce + (1.0 - hard) * kl
    total = weights.sum()
    return ((per_row * weights).sum() / total, (ce * weights).sum() / total,
            (kl * weights).sum() / total)


def row_overlap(logits, t_logits, temp):
    """sum_x min(p(x), q(x)) per row at temperature temp: the probability
    that speculative sampling accepts a token drafted from q = softmax(logits
    / temp) against the target's p = softmax(t_logits / temp)."""
    q = (logits.float() / temp).softmax(-1)
    p = (t_logits.float() / temp).softmax(-1)
    return torch.minimum(p, q).sum(-1)


def expected_prefix(row_prob):
    """[..., b] per-row acceptance probabilities -> [...] expected accepted
    rows when row i is accepted only if rows 0..i-1 were (independent rows):
    sum_i prod_{j <= i} row_prob_j."""
    return torch.cumprod(row_prob, -1).sum(-1)


def spec_sample_verify(drafts, q, p, u, residual_draw):
    """One speculative-sampling verify of a block. drafts: b token ids
    drafted from the rows of q [b, V]; p [b+1, V] the target's distributions
    at the same positions (row b: the bonus position); u: b uniforms in
    [0, 1). Row i is accepted when u_i * q_i(d_i) < p_i(d_i) (probability
    min(1, p/q)); at the first rejection the token is
    residual_draw(max(p_i - q_i, 0)), else residual_draw(p_b) after all b.
    Returns (accepted count, committed ids)."""
    out = []
    for i, d in enumerate(drafts):
        if float(u[i]) * float(q[i, d]) < float(p[i, d]):
            out.append(int(d))
            continue
        res = torch.clamp(p[i] - q[i], min=0.0)
        if float(res.sum()) <= 0.0:   # p == q up to rounding: any draw from p
            res = p[i]
        return i, out + [int(residual_draw(res / res.sum()))]
    return len(drafts), out + [int(residual_draw(p[len(drafts)]))]


# --------------------------------------------------------------------------
# GGUF

# Parameter name in BlockHead -> GGUF tensor name ("{}" is the layer index).
HEAD_NAMES = [
    ("layers.{}.attn_norm.weight", "blk.{}.attn_norm.weight"),
    ("layers.{}.wq.weight", "blk.{}.attn_q.weight"),
    ("layers.{}.wk.weight", "blk.{}.attn_k.weight"),
    ("layers.{}.wv.weight", "blk.{}.attn_v.weight"),
    ("layers.{}.wo.weight", "blk.{}.attn_output.weight"),
    ("layers.{}.ffn_norm.weight", "blk.{}.ffn_norm.weight"),
    ("layers.{}.w1.weight", "blk.{}.ffn_gate.weight"),
    ("layers.{}.w3.weight", "blk.{}.ffn_up.weight"),
    ("layers.{}.w2.weight", "blk.{}.ffn_down.weight"),
]


def head_tensor_order(cfg):
    out = [("fc.weight", "fc.weight"), ("fc_norm.weight", "fc_norm.weight"),
           ("mask_embd", "mask_embd.weight")]
    for i in range(cfg.n_layers):
        out += [(m.format(i), g.format(i)) for m, g in HEAD_NAMES]
    out.append(("norm.weight", "output_norm.weight"))
    return out


LICENSE = ("same terms as the phasemark-kjv target/draft pair; trained only on the King "
           "James Version (public domain) and the target's own outputs")


def export_block_gguf(head, path, name="phasemark-kjv-block", description="",
                      matrix_type=gw.GGML_F16):
    """Writes the head (matrices F16 by default, norms and mask_embd F32);
    returns the byte count."""
    cfg = head.cfg
    w = gw.GGUFWriter(alignment=32)
    w.add(gw.STRING, "general.architecture", ARCH)
    w.add(gw.STRING, "general.name", name)
    w.add(gw.STRING, "general.license", LICENSE)
    if description:
        w.add(gw.STRING, "general.description", description)
    p = f"{ARCH}."
    w.add(gw.U32, p + "block_count", cfg.n_layers)
    w.add(gw.U32, p + "embedding_length", cfg.dim)
    w.add(gw.U32, p + "feed_forward_length", cfg.ffn_dim)
    w.add(gw.U32, p + "attention.head_count", cfg.n_heads)
    w.add(gw.U32, p + "attention.head_count_kv", cfg.n_kv_heads)
    w.add(gw.F32, p + "attention.layer_norm_rms_epsilon", cfg.norm_eps)
    w.add(gw.F32, p + "rope.freq_base", cfg.rope_base)
    w.add(gw.U32, p + "context_length", cfg.max_seq_len)
    w.add(gw.U32, p + "block_size", cfg.block_size)
    w.add_array(gw.U32, p + "target.layers", list(cfg.target_layers))
    w.add(gw.U32, p + "target.vocab_size", cfg.vocab_size)
    w.add(gw.U32, p + "target.embedding_length", cfg.dim)
    state = {k: v.detach().float().cpu().numpy() for k, v in head.state_dict().items()}
    for mod_name, gguf_name in head_tensor_order(cfg):
        arr = state[mod_name]
        w.add_tensor(gguf_name, arr, gw.GGML_F32 if arr.ndim == 1 else matrix_type)
    return w.write(path)


def head_config_from_gguf(g):
    kv = g.kv
    if kv.get("general.architecture") != ARCH:
        raise gguf_read.GGUFError(f"not a {ARCH} file")
    p = f"{ARCH}."
    layers = kv[p + "target.layers"]
    cfg = HeadConfig(dim=kv[p + "embedding_length"], n_layers=kv[p + "block_count"],
                     n_heads=kv[p + "attention.head_count"],
                     n_kv_heads=kv[p + "attention.head_count_kv"],
                     ffn_dim=kv[p + "feed_forward_length"], max_seq_len=kv[p + "context_length"],
                     norm_eps=kv[p + "attention.layer_norm_rms_epsilon"],
                     rope_base=kv[p + "rope.freq_base"], block_size=kv[p + "block_size"],
                     vocab_size=kv[p + "target.vocab_size"],
                     target_layers=[int(x) for x in layers[2]])
    if kv[p + "target.embedding_length"] != cfg.dim:
        raise gguf_read.GGUFError("target.embedding_length differs from embedding_length")
    cfg.validate()
    return cfg


def load_block_gguf(path, target, device="cpu"):
    """BlockHead (float32) holding the file's weights, sharing `target`'s
    embedding and output matrices."""
    g = gguf_read.GGUFFile(path)
    cfg = head_config_from_gguf(g)
    tcfg = target.cfg
    if cfg.vocab_size != tcfg.vocab_size or cfg.dim != tcfg.dim:
        raise gguf_read.GGUFError("head does not match the target's vocab or width")
    if max(cfg.target_layers) >= tcfg.n_layers:
        raise gguf_read.GGUFError("head reads a layer the target does not have")
    head = BlockHead(cfg, target.tok_embeddings.weight, target.output.weight)
    params = dict(head.named_parameters())
    order = head_tensor_order(cfg)
    if len(g.tensors) != len(order):
        raise gguf_read.GGUFError("file holds tensors the head does not use")
    with torch.no_grad():
        for mod_name, gguf_name in order:
            arr = g.tensor(gguf_name)
            prm = params[mod_name]
            if tuple(arr.shape) != tuple(prm.shape):
                raise gguf_read.GGUFError(f"{gguf_name}: shape {arr.shape}, expected {tuple(prm.shape)}")
            prm.copy_(torch.from_numpy(np.ascontiguousarray(arr)))
    return head.to(device).eval(), g
