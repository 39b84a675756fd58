#!/usr/bin/env python3
"""Tests for the GGUF writer/reader, the reference tokenizer and the shipped
models. Run: python3 -m unittest discover -s train -p 'test_*.py' -v
Needs numpy; the tests that need torch or the shipped files skip without them.
"""
import json
import os
import struct
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_read  # noqa: E402
import gguf_write as gw  # noqa: E402

MODELS = os.path.join(HERE, "..", "models")
TARGET = os.path.join(MODELS, "phasemark-kjv-target-q8_0.gguf")
DRAFT = os.path.join(MODELS, "phasemark-kjv-draft-f16.gguf")
GOLDEN = os.path.join(MODELS, "golden.json")

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


def fp16_bits(x):
    """IEEE half of x (round to nearest even), via struct, not numpy."""
    return struct.unpack("<H", struct.pack("<e", x))[0]


class Q8_0Test(unittest.TestCase):
    def test_exact_block(self):
        # amax 16: d = 16/127, 1/d = 7.9375 exactly, so every x*(1/d) is
        # exact and q = round(7.9375 * (i - 16)) can be worked out by hand.
        x = np.arange(32, dtype=np.float32) - 16
        blob = gw.quantize_q8_0(x)
        self.assertEqual(len(blob), 34)
        self.assertEqual(struct.unpack("<H", blob[:2])[0], fp16_bits(16 / 127))
        q = list(struct.unpack("<32b", blob[2:]))
        self.assertEqual(q[0], -127)      # -16 * 7.9375
        self.assertEqual(q[15], -8)       # -1 * 7.9375 = -7.9375
        self.assertEqual(q[16], 0)
        self.assertEqual(q[17], 8)
        self.assertEqual(q[18], 16)       # 15.875
        self.assertEqual(q[31], 119)      # 15 * 7.9375 = 119.0625

    def test_ties_round_away_from_zero(self):
        # amax 127 gives d = 1 exactly: x*(1/d) = x, so halves are true ties.
        x = np.zeros(32, dtype=np.float32)
        x[:6] = [127, 2.5, -2.5, 0.5, -0.5, 1.5]
        q = struct.unpack("<32b", gw.quantize_q8_0(x)[2:])
        self.assertEqual(q[:6], (127, 3, -3, 1, -1, 2))

    def test_zero_block(self):
        blob = gw.quantize_q8_0(np.zeros(32, dtype=np.float32))
        self.assertEqual(blob, b"\0" * 34)

    def test_rejects_partial_block(self):
        with self.assertRaises(ValueError):
            gw.quantize_q8_0(np.zeros(31, dtype=np.float32))


def small_file():
    w = gw.GGUFWriter(alignment=32)
    w.add(gw.STRING, "general.architecture", "llama")
    w.add(gw.U8, "t.u8", 255)
    w.add(gw.I8, "t.i8", -128)
    w.add(gw.U16, "t.u16", 65535)
    w.add(gw.I16, "t.i16", -32768)
    w.add(gw.U32, "t.u32", 4000000000)
    w.add(gw.I32, "t.i32", -2000000000)
    w.add(gw.F32, "t.f32", 0.5)
    w.add(gw.BOOL, "t.bool", True)
    w.add(gw.U64, "t.u64", 2 ** 63)
    w.add(gw.I64, "t.i64", -(2 ** 62))
    w.add(gw.F64, "t.f64", 0.1)
    w.add_array(gw.STRING, "t.strs", ["a", "", "\u2581b"])
    w.add_array(gw.F32, "t.f32s", [1.0, -2.0])
    w.add_array(gw.I32, "t.i32s", [1, -1, 7])
    w.add_tensor("f32", np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32), gw.GGML_F32)
    w.add_tensor("f16", np.array([0.5, -1.25, 3.0, 65504.0]), gw.GGML_F16)
    q = np.zeros((2, 32), dtype=np.float32)
    q[0, 0], q[1, 1] = 127.0, -127.0
    w.add_tensor("q8", q, gw.GGML_Q8_0)
    return w.to_bytes()


class WriterReaderTest(unittest.TestCase):
    def setUp(self):
        self.blob = small_file()
        fd, self.path = tempfile.mkstemp(suffix=".gguf")
        os.close(fd)

    def tearDown(self):
        os.unlink(self.path)

    def read(self, blob):
        with open(self.path, "wb") as f:
            f.write(blob)
        return gguf_read.GGUFFile(self.path)

    def test_header_fields(self):
        self.assertEqual(self.blob[:4], b"GGUF")
        self.assertEqual(struct.unpack("<IQQ", self.blob[4:24]), (3, 3, 16))  # alignment + 15 keys

    def test_metadata_round_trip(self):
        g = self.read(self.blob)
        kv = g.kv
        self.assertEqual(kv["general.alignment"], 32)
        self.assertEqual(g.kv_types["general.alignment"], 4)
        self.assertEqual(kv["general.architecture"], "llama")
        expect = {"t.u8": 255, "t.i8": -128, "t.u16": 65535, "t.i16": -32768, "t.u32": 4000000000,
                  "t.i32": -2000000000, "t.f32": 0.5, "t.bool": True, "t.u64": 2 ** 63,
                  "t.i64": -(2 ** 62), "t.f64": 0.1}
        for k, v in expect.items():
            self.assertEqual(kv[k], v, k)
        self.assertEqual(kv["t.strs"], ("array", 8, ["a", "", "\u2581b"]))
        self.assertEqual(kv["t.f32s"][2].tolist(), [1.0, -2.0])
        self.assertEqual(kv["t.i32s"][2].tolist(), [1, -1, 7])

    def test_tensors_round_trip(self):
        g = self.read(self.blob)
        self.assertEqual(list(g.tensors), ["f32", "f16", "q8"])
        self.assertEqual(g.tensors["f32"]["ne"], [3, 2])  # ne0 is the contiguous axis
        self.assertEqual(g.tensor("f32").tolist(), [[1, 2, 3], [4, 5, 6]])
        self.assertEqual(g.tensor("f16").tolist(), [0.5, -1.25, 3.0, 65504.0])
        q = g.tensor("q8")
        self.assertEqual((q[0, 0], q[1, 1], float(np.abs(q).sum())), (127.0, -127.0, 254.0))
        self.assertEqual(g.data_start % 32, 0)
        for t in g.tensors.values():
            self.assertEqual(t["offset"] % 32, 0)
        self.assertEqual(g.tensors["f16"]["offset"], 32)  # 24 bytes of f32 padded to 32
        self.assertEqual(g.data_start + 32 + 32 + 68 + 28, len(self.blob))

    def test_every_truncation_is_rejected(self):
        # Each prefix that cuts into the header or any tensor's data must fail
        # cleanly: a GGUFError, never another exception and never a silently
        # short tensor. (Only the last tensor's trailing padding is optional.)
        g = self.read(self.blob)
        last = list(g.tensors.values())[-1]
        end = g.data_start + last["offset"] + last["nbytes"]
        self.assertEqual(len(self.blob) - end, 28)
        self.read(self.blob[:end])
        for n in range(end):
            with self.subTest(n=n):
                with self.assertRaises(gguf_read.GGUFError):
                    self.read(self.blob[:n])

    def test_bad_magic_and_version(self):
        with self.assertRaises(gguf_read.GGUFError):
            self.read(b"GGUG" + self.blob[4:])
        with self.assertRaises(gguf_read.GGUFError):
            self.read(self.blob[:4] + struct.pack("<I", 1) + self.blob[8:])

    def test_bad_bool_and_type(self):
        i = self.blob.index(b"t.bool") + len(b"t.bool") + 4
        with self.assertRaises(gguf_read.GGUFError):
            self.read(self.blob[:i] + b"\x02" + self.blob[i + 1:])
        j = self.blob.index(b"t.u8") + len(b"t.u8")
        with self.assertRaises(gguf_read.GGUFError):
            self.read(self.blob[:j] + struct.pack("<I", 13) + self.blob[j + 4:])

    def test_misaligned_offset(self):
        i = self.blob.index(b"f16") + 3 + 4 + 8 + 4  # name, n_dims, ne0, type
        with self.assertRaises(gguf_read.GGUFError):
            self.read(self.blob[:i] + struct.pack("<Q", 33) + self.blob[i + 8:])

    def test_writer_rejects_duplicates(self):
        w = gw.GGUFWriter()
        w.add(gw.U32, "a", 1)
        with self.assertRaises(ValueError):
            w.add(gw.U32, "a", 2)
        w.add_tensor("t", np.zeros(4), gw.GGML_F32)
        with self.assertRaises(ValueError):
            w.add_tensor("t", np.zeros(4), gw.GGML_F32)


def need_file(path):
    if not os.path.exists(path):
        raise unittest.SkipTest(f"{path} is missing")


class ShippedModelsTest(unittest.TestCase):
    # Shapes as documented in models/README.md.
    EXPECT = {
        TARGET: dict(dim=512, layers=6, heads=8, kv=4, ffn=1408, type=8, file_type=7),
        DRAFT: dict(dim=256, layers=5, heads=4, kv=2, ffn=704, type=1, file_type=1),
    }

    def check(self, path):
        need_file(path)
        e = self.EXPECT[path]
        g = gguf_read.GGUFFile(path)
        kv = g.kv
        self.assertEqual(g.version, 3)
        self.assertEqual(kv["general.architecture"], "llama")
        self.assertEqual(kv["general.file_type"], e["file_type"])
        self.assertEqual(kv["llama.embedding_length"], e["dim"])
        self.assertEqual(kv["llama.block_count"], e["layers"])
        self.assertEqual(kv["llama.attention.head_count"], e["heads"])
        self.assertEqual(kv["llama.attention.head_count_kv"], e["kv"])
        self.assertEqual(kv["llama.feed_forward_length"], e["ffn"])
        self.assertEqual(kv["llama.context_length"], 512)
        self.assertEqual(kv["llama.vocab_size"], 4096)
        self.assertEqual(kv["llama.rope.dimension_count"], 64)
        self.assertEqual(kv["llama.rope.freq_base"], 10000.0)
        self.assertAlmostEqual(kv["llama.attention.layer_norm_rms_epsilon"], 1e-5, delta=1e-12)
        self.assertEqual(kv["tokenizer.ggml.model"], "llama")
        self.assertEqual(len(kv["tokenizer.ggml.tokens"][2]), 4096)
        self.assertEqual(kv["tokenizer.ggml.tokens"][2][:4], ["<unk>", "<s>", "</s>", "<0x00>"])
        self.assertEqual(kv["tokenizer.ggml.token_type"][2][:4].tolist(), [2, 3, 3, 6])
        self.assertEqual((kv["tokenizer.ggml.bos_token_id"], kv["tokenizer.ggml.eos_token_id"],
                          kv["tokenizer.ggml.unknown_token_id"]), (1, 2, 0))
        self.assertTrue(kv["tokenizer.ggml.add_bos_token"])
        self.assertTrue(kv["tokenizer.ggml.add_space_prefix"])
        self.assertEqual(len(g.tensors), 3 + 9 * e["layers"])
        hd = e["dim"] // e["heads"]
        shapes = {"token_embd.weight": [e["dim"], 4096], "output.weight": [e["dim"], 4096],
                  "output_norm.weight": [e["dim"]],
                  "blk.0.attn_q.weight": [e["dim"], e["heads"] * hd],
                  "blk.0.attn_k.weight": [e["dim"], e["kv"] * hd],
                  "blk.0.attn_output.weight": [e["heads"] * hd, e["dim"]],
                  "blk.0.ffn_gate.weight": [e["dim"], e["ffn"]],
                  "blk.0.ffn_down.weight": [e["ffn"], e["dim"]],
                  f"blk.{e['layers'] - 1}.ffn_norm.weight": [e["dim"]]}
        for name, ne in shapes.items():
            self.assertEqual(g.tensors[name]["ne"], ne, name)
            self.assertEqual(g.tensors[name]["type"], 0 if len(ne) == 1 else e["type"], name)

    def test_target(self):
        self.check(TARGET)

    def test_draft(self):
        self.check(DRAFT)

    def test_sizes_within_budget(self):
        need_file(TARGET)
        need_file(DRAFT)
        self.assertLessEqual(os.path.getsize(TARGET) + os.path.getsize(DRAFT), 60_000_000)


class TokenizerTest(unittest.TestCase):
    def test_reference_tokenizer_matches_golden(self):
        need_file(DRAFT)
        need_file(GOLDEN)
        import spm_ref
        tok = spm_ref.SpmTokenizer(gguf_read.GGUFFile(DRAFT))
        with open(GOLDEN, encoding="utf-8") as f:
            golden = json.load(f)
        for case in golden["tokenizer_cases"] + golden["prompts"]:
            with self.subTest(text=case["text"]):
                self.assertEqual(tok.encode(case["text"]), case["ids"])

    def test_control_text_is_spelled_out(self):
        need_file(DRAFT)
        import spm_ref
        tok = spm_ref.SpmTokenizer(gguf_read.GGUFFile(DRAFT))
        ids = tok.encode("<s>", bos=False)
        self.assertNotIn(1, ids)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class ModelTest(unittest.TestCase):
    def test_rope_rotates_adjacent_pairs(self):
        from model import Config, apply_rope, rope_tables
        cfg = Config(dim=64, n_heads=8, n_kv_heads=8, ffn_dim=64, max_seq_len=4)
        cos, sin = rope_tables(cfg, 4, "cpu")
        x = torch.zeros(1, 4, 1, 8)
        x[..., 2] = 1.0  # pair i=1: (x2, x3) = (1, 0)
        y = apply_rope(x, cos, sin)
        theta = 10000.0 ** (-2.0 / 8)
        for pos in range(4):
            self.assertAlmostEqual(float(y[0, pos, 0, 2]), np.cos(pos * theta), places=6)
            self.assertAlmostEqual(float(y[0, pos, 0, 3]), np.sin(pos * theta), places=6)
            self.assertEqual(float(y[0, pos, 0, 0]), 0.0)

    def test_golden_prefix_reproduces(self):
        need_file(TARGET)
        need_file(GOLDEN)
        import export
        import spec
        with open(GOLDEN, encoding="utf-8") as f:
            p = json.load(f)["prompts"][0]
        model, _, _ = export.load_gguf_model(TARGET)
        self.assertEqual(spec.greedy(model, p["ids"], 8, "cpu"), p["target"]["continuation_ids"][:8])


if __name__ == "__main__":
    unittest.main()
