#!/usr/bin/env python3
"""export.py — a trained model to GGUF (llama.cpp's "llama" conventions), and back.

export_gguf() writes the architecture metadata, the SentencePiece vocabulary
as tokenizer.ggml.* and every weight; matrices in the chosen type (Q8_0 or
F16 or F32), norm vectors always F32. load_gguf_model() rebuilds a float32
Transformer from a file through the independent reader, so evaluation runs
on exactly the weights that ship (dequantized).
"""
import sentencepiece as spm
import torch

import gguf_read
import gguf_write as gw
from model import Config, Transformer, gguf_tensor_order

# SentencePiece piece kinds -> llama.cpp token types.
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6
# general.file_type values (llama.cpp's LLAMA_FTYPE_*).
FILE_TYPE = {gw.GGML_F32: 0, gw.GGML_F16: 1, gw.GGML_Q8_0: 7}
TYPE_BY_NAME = {"f32": gw.GGML_F32, "f16": gw.GGML_F16, "q8_0": gw.GGML_Q8_0}


def tokenizer_arrays(model_path):
    sp = spm.SentencePieceProcessor(model_file=model_path)
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(TT_UNKNOWN)
        elif sp.is_control(i):
            types.append(TT_CONTROL)
        elif sp.is_byte(i):
            types.append(TT_BYTE)
        elif sp.is_unused(i):
            types.append(TT_UNUSED)
        else:
            types.append(TT_NORMAL)
    return sp, tokens, scores, types


def export_gguf(model, path, name, matrix_type, tokenizer_path, description=""):
    """Writes `model` (a model.Transformer) to `path`; returns the byte count."""
    cfg = model.cfg
    sp, tokens, scores, types = tokenizer_arrays(tokenizer_path)
    if len(tokens) != cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(tokens)} pieces, model {cfg.vocab_size}")
    w = gw.GGUFWriter(alignment=32)
    w.add(gw.STRING, "general.architecture", "llama")
    w.add(gw.STRING, "general.name", name)
    if description:
        w.add(gw.STRING, "general.description", description)
    w.add(gw.U32, "general.file_type", FILE_TYPE[matrix_type])
    if matrix_type == gw.GGML_Q8_0:
        w.add(gw.U32, "general.quantization_version", 2)
    w.add(gw.U32, "llama.context_length", cfg.max_seq_len)
    w.add(gw.U32, "llama.embedding_length", cfg.dim)
    w.add(gw.U32, "llama.block_count", cfg.n_layers)
    w.add(gw.U32, "llama.feed_forward_length", cfg.ffn_dim)
    w.add(gw.U32, "llama.attention.head_count", cfg.n_heads)
    w.add(gw.U32, "llama.attention.head_count_kv", cfg.n_kv_heads)
    w.add(gw.F32, "llama.attention.layer_norm_rms_epsilon", cfg.norm_eps)
    w.add(gw.F32, "llama.rope.freq_base", cfg.rope_base)
    w.add(gw.U32, "llama.rope.dimension_count", cfg.head_dim)
    w.add(gw.U32, "llama.vocab_size", cfg.vocab_size)
    w.add(gw.STRING, "tokenizer.ggml.model", "llama")
    w.add_array(gw.STRING, "tokenizer.ggml.tokens", tokens)
    w.add_array(gw.F32, "tokenizer.ggml.scores", scores)
    w.add_array(gw.I32, "tokenizer.ggml.token_type", types)
    w.add(gw.U32, "tokenizer.ggml.bos_token_id", sp.bos_id())
    w.add(gw.U32, "tokenizer.ggml.eos_token_id", sp.eos_id())
    w.add(gw.U32, "tokenizer.ggml.unknown_token_id", sp.unk_id())
    w.add(gw.BOOL, "tokenizer.ggml.add_bos_token", True)
    w.add(gw.BOOL, "tokenizer.ggml.add_eos_token", False)
    w.add(gw.BOOL, "tokenizer.ggml.add_space_prefix", True)
    state = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    if "output.weight" not in state:  # tied: the state dict may list it once
        state["output.weight"] = state["tok_embeddings.weight"]
    for mod_name, gguf_name in gguf_tensor_order(cfg):
        arr = state[mod_name]
        w.add_tensor(gguf_name, arr, gw.GGML_F32 if arr.ndim == 1 else matrix_type)
    return w.write(path)


def config_from_gguf(g):
    kv = g.kv
    if kv.get("general.architecture") != "llama":
        raise gguf_read.GGUFError("not a llama model")
    heads = kv["llama.attention.head_count"]
    dim = kv["llama.embedding_length"]
    cfg = Config(vocab_size=kv["llama.vocab_size"], dim=dim, n_layers=kv["llama.block_count"],
                 n_heads=heads, n_kv_heads=kv["llama.attention.head_count_kv"],
                 ffn_dim=kv["llama.feed_forward_length"], max_seq_len=kv["llama.context_length"],
                 norm_eps=kv["llama.attention.layer_norm_rms_epsilon"],
                 rope_base=kv["llama.rope.freq_base"], dropout=0.0)
    if kv["llama.rope.dimension_count"] != cfg.head_dim:
        raise gguf_read.GGUFError("partial rotary dimensions are not supported")
    return cfg


def load_gguf_model(path, device="cpu"):
    """float32 Transformer (untied) holding the file's dequantized weights."""
    g = gguf_read.GGUFFile(path)
    cfg = config_from_gguf(g)
    model = Transformer(cfg, tied=False)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for mod_name, gguf_name in gguf_tensor_order(cfg):
            arr = g.tensor(gguf_name)
            p = params[mod_name]
            if tuple(arr.shape) != tuple(p.shape):
                raise gguf_read.GGUFError(f"{gguf_name}: shape {arr.shape}, expected {tuple(p.shape)}")
            p.copy_(torch.from_numpy(arr))
    if len(g.tensors) != len(gguf_tensor_order(cfg)):
        raise gguf_read.GGUFError("file holds tensors the model does not use")
    return model.to(device).eval(), cfg, g
