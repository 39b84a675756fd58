"""The peer for bench_llama: the same llama shapes in PyTorch/transformers
(LlamaForCausalLM, eager attention, bf16, random weights), greedy decoding
with a KV cache, timed with CUDA events. One JSON object per line, like
bench_llama. Usage: python3 peer_transformers.py [1b|8b|all] [tokens] [reps]
"""
import json
import statistics
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "llama-1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                     num_key_value_heads=8, intermediate_size=8192, tie_word_embeddings=True),
    "llama-8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                     num_key_value_heads=8, intermediate_size=14336, tie_word_embeddings=False),
}


def build(shape):
    cfg = LlamaConfig(vocab_size=128256, max_position_embeddings=4096, rope_theta=500000.0,
                      attn_implementation="eager", torch_dtype=torch.bfloat16, **SHAPES[shape])
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, torch_dtype=torch.bfloat16)
    return model.eval()


@torch.inference_mode()
def decode(model, steps, prompt_len=16):
    ids = (torch.arange(prompt_len, device="cuda") * 7919 + 13) % 128256
    out = model(ids[None], use_cache=True)
    cache = out.past_key_values
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        out = model(tok, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    for shape in SHAPES:
        if which != "all" and which not in shape:
            continue
        model = build(shape)
        decode(model, 8)  # warm-up
        times = [decode(model, steps) for _ in range(reps)]
        ms = statistics.median(times)
        print(json.dumps({"bench": "decode", "model": shape, "dtype": "bf16",
                          "impl": "transformers_eager", "torch": torch.__version__,
                          "tokens": steps, "reps": reps, "context_start": 16,
                          "median_ms": round(ms, 3),
                          "tokens_per_s": round(steps / (ms / 1e3), 2)}), flush=True)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
