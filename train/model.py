"""model.py — the llama-family decoder that phasemark's C engine runs.

Every detail here is part of the contract with the engine (src/engine):

  h = tok_embd[ids]                                   [T, dim]
  per layer:
    a = rmsnorm(h) * attn_norm
    q = a Wq^T [T, n_heads*hd], k = a Wk^T, v = a Wv^T [T, n_kv_heads*hd]
    RoPE on q and k, per head, on ADJACENT pairs (x[2i], x[2i+1]) with
      angle = pos * base^(-2i/hd)  (llama2.c / ggml "normal" rope, not the
      rotate-half layout of Hugging Face checkpoints)
    causal softmax(q k^T / sqrt(hd)) v, query head h reading kv head
      h // (n_heads / n_kv_heads)  (grouped-query attention)
    h = h + attn Wo^T
    f = rmsnorm(h) * ffn_norm
    h = h + W2 (silu(W1 f) * W3 f)     (GGUF: W1 ffn_gate, W3 ffn_up, W2 ffn_down)
  logits = (rmsnorm(h) * output_norm) Wout^T
  rmsnorm(x) = x / sqrt(mean(x^2) + eps)

No linear layer has a bias. Training ties Wout to tok_embd (the GGUF still
carries output.weight explicitly, so a reader need not know). Dropout exists
only for training, on the embedding and on each residual branch.
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

_sdpa = getattr(F, "scaled_dot_product_attention", None)


@dataclass
class Config:
    vocab_size: int = 4096
    dim: int = 512
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 4
    ffn_dim: int = 1408
    max_seq_len: int = 512
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    dropout: float = 0.0

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    def validate(self):
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads or self.head_dim % 2:
            raise ValueError(f"inconsistent head layout: {self}")
        # Q8_0 rows are whole 32-element blocks.
        if self.dim % 32 or self.ffn_dim % 32:
            raise ValueError("dim and ffn_dim must be multiples of 32")

    def to_dict(self):
        d = asdict(self)
        d["head_dim"] = self.head_dim
        return d


def rope_tables(cfg, n_pos, device):
    """cos/sin [n_pos, hd/2] in float32, computed in float64 so the reference
    angles are as exact as float32 can hold."""
    i = torch.arange(cfg.head_dim // 2, dtype=torch.float64)
    inv = cfg.rope_base ** (-2.0 * i / cfg.head_dim)
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float().to(device), torch.sin(ang).float().to(device)


def apply_rope(x, cos, sin):
    """x [B, T, H, hd]; rotates (x[2i], x[2i+1]) by the angle of (pos, i)."""
    xp = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.reshape(x.shape).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hd = cfg.head_dim
        self.cfg = cfg
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        cfg, (b, t, _) = self.cfg, x.shape
        hd = cfg.head_dim
        q = apply_rope(self.wq(x).view(b, t, cfg.n_heads, hd), cos, sin)
        k = apply_rope(self.wk(x).view(b, t, cfg.n_kv_heads, hd), cos, sin)
        v = self.wv(x).view(b, t, cfg.n_kv_heads, hd)
        rep = cfg.n_heads // cfg.n_kv_heads
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # [B, H, T, hd]
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if _sdpa is not None:
            o = _sdpa(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            o = att @ v
        return self.wo(o.transpose(1, 2).reshape(b, t, cfg.n_heads * hd))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # ffn_gate
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # ffn_up
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)  # ffn_down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.attention(self.attention_norm(x), cos, sin))
        return x + self.drop(self.feed_forward(self.ffn_norm(x)))


class Transformer(nn.Module):
    def __init__(self, cfg, tied=True):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if tied:
            self.output.weight = self.tok_embeddings.weight
        self._init_weights()
        cos, sin = rope_tables(cfg, cfg.max_seq_len, "cpu")
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def _init_weights(self):
        # GPT-2 style: N(0, 0.02), residual outputs scaled down with depth so
        # the residual stream's variance does not grow with n_layers.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("wo.weight") or name.endswith("w2.weight"):
                    std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
                nn.init.normal_(p, mean=0.0, std=std)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())  # tied weights count once

    def forward(self, ids):
        """ids [B, T] -> logits [B, T, vocab] (positions 0..T-1)."""
        t = ids.shape[1]
        if t > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {t} exceeds context {self.cfg.max_seq_len}")
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        h = self.drop(self.tok_embeddings(ids))
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


# Parameter name in this module -> GGUF tensor name ("{}" is the layer index).
GGUF_NAMES = {
    "tok_embeddings.weight": "token_embd.weight",
    "norm.weight": "output_norm.weight",
    "output.weight": "output.weight",
    "layers.{}.attention_norm.weight": "blk.{}.attn_norm.weight",
    "layers.{}.attention.wq.weight": "blk.{}.attn_q.weight",
    "layers.{}.attention.wk.weight": "blk.{}.attn_k.weight",
    "layers.{}.attention.wv.weight": "blk.{}.attn_v.weight",
    "layers.{}.attention.wo.weight": "blk.{}.attn_output.weight",
    "layers.{}.ffn_norm.weight": "blk.{}.ffn_norm.weight",
    "layers.{}.feed_forward.w1.weight": "blk.{}.ffn_gate.weight",
    "layers.{}.feed_forward.w3.weight": "blk.{}.ffn_up.weight",
    "layers.{}.feed_forward.w2.weight": "blk.{}.ffn_down.weight",
}


def gguf_tensor_order(cfg):
    """(module name, GGUF name) in the order the file stores them."""
    out = [("tok_embeddings.weight", "token_embd.weight")]
    per_layer = [k for k in GGUF_NAMES if k.startswith("layers.")]
    for i in range(cfg.n_layers):
        out += [(k.format(i), GGUF_NAMES[k].format(i)) for k in per_layer]
    out += [("norm.weight", "output_norm.weight"), ("output.weight", "output.weight")]
    return out
