#!/usr/bin/env python3
"""Tests for the block drafter head's training masks, its forward and its GGUF
export. Run: python3 -m unittest discover -s train -p 'test_*.py' -v
Every case needs torch (and numpy); without them they skip. The cases on the
shipped head skip when models/phasemark-kjv-block-f16.gguf is absent.
"""
import math
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
MODELS = os.path.join(HERE, "..", "models")
TARGET = os.path.join(MODELS, "phasemark-kjv-target-q8_0.gguf")
HEAD = os.path.join(MODELS, "phasemark-kjv-block-f16.gguf")
FIXTURE = os.path.join(HERE, "..", "tests", "models", "block_fixture.json")

try:
    import numpy as np  # noqa: F401
    import torch
    import torch.nn.functional as F
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

if HAVE_TORCH:
    import block
    import gguf_read


def small_head(n_layers=1, vocab=32, dim=16, heads=4, kv=2, ffn=32, feats=(0, 2), bsz=4, seed=0):
    """A random head over a random 'target' embedding/output, weights drawn
    wide enough that every term of the forward matters."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(vocab, dim, generator=g)
    out = torch.randn(vocab, dim, generator=g)
    cfg = block.HeadConfig(dim=dim, n_layers=n_layers, n_heads=heads, n_kv_heads=kv, ffn_dim=ffn,
                           max_seq_len=64, block_size=bsz, vocab_size=vocab,
                           target_layers=list(feats))
    head = block.BlockHead(cfg, emb, out)
    with torch.no_grad():
        for p in head.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            else:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
    return head.eval()


def reference_draft(head, feats_ctx, t_last, n, b):
    """One drafting call written straight from the contract, one row and one
    head at a time, with no masks: context = feats_ctx (positions 0..n-2)."""
    cfg = head.cfg
    hd, nh, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.norm_eps) * w

    def rope(v, pos):
        out = v.clone()
        for i in range(hd // 2):
            ang = pos * cfg.rope_base ** (-2.0 * i / hd)
            c, s = math.cos(ang), math.sin(ang)
            out[:, 2 * i] = v[:, 2 * i] * c - v[:, 2 * i + 1] * s
            out[:, 2 * i + 1] = v[:, 2 * i] * s + v[:, 2 * i + 1] * c
        return out

    c = rms(feats_ctx @ head.fc.weight.t(), head.fc_norm.weight)
    x = torch.stack([head.tok_embd[t_last]] + [head.mask_embd] * (b - 1))
    for L in head.layers:
        h = rms(x, L.attn_norm.weight)
        g = rms(c, L.attn_norm.weight)
        q = [rope((L.wq.weight @ h[i]).view(nh, hd), n - 1 + i) for i in range(b)]
        keys = [rope((L.wk.weight @ g[j]).view(nkv, hd), j) for j in range(n - 1)]
        keys += [rope((L.wk.weight @ h[i]).view(nkv, hd), n - 1 + i) for i in range(b)]
        vals = [(L.wv.weight @ g[j]).view(nkv, hd) for j in range(n - 1)]
        vals += [(L.wv.weight @ h[i]).view(nkv, hd) for i in range(b)]
        K, V = torch.stack(keys), torch.stack(vals)
        rows = []
        for i in range(b):
            heads = []
            for hh in range(nh):
                kvh = hh // (nh // nkv)
                w = ((K[:, kvh] @ q[i][hh]) / math.sqrt(hd)).softmax(0)
                heads.append(w @ V[:, kvh])
            rows.append(torch.cat(heads))
        x = x + torch.stack(rows) @ L.wo.weight.t()
        u = rms(x, L.ffn_norm.weight)
        x = x + (F.silu(u @ L.w1.weight.t()) * (u @ L.w3.weight.t())) @ L.w2.weight.t()
    return rms(x, head.norm.weight) @ head.output.t()


@unittest.skipUnless(HAVE_TORCH, "torch/numpy are not installed")
class BlockMaskTest(unittest.TestCase):
    def test_exact_pattern(self):
        # One sequence, 3 context positions, two blocks of 2 rows: block 0 at
        # anchor 2 uses both rows, block 1 at anchor 1 uses one row.
        m = block.block_mask(torch.tensor([[2, 1]]), torch.tensor([[2, 1]]), 3, 2)
        T, o = True, False
        want = [
            # ctx0 ctx1 ctx2 | b0r0 b0r1 | b1r0 b1r1
            [T, T, o, T, T, o, o],   # block 0 row 0: context j < 2, its two rows
            [T, T, o, T, T, o, o],   # block 0 row 1: the same (bidirectional)
            [T, o, o, o, o, T, o],   # block 1 row 0: context j < 1, its one row
            [T, o, o, o, o, T, o],   # block 1 row 1 (unused): never attended to
        ]
        self.assertEqual(m.shape, (1, 4, 7))
        self.assertEqual(m[0].tolist(), want)

    def test_anchor_zero_sees_no_context(self):
        m = block.block_mask(torch.tensor([[0]]), torch.tensor([[3]]), 5, 3)
        self.assertEqual(m[0].tolist(), [[False] * 5 + [True] * 3] * 3)

    def test_batch_rows_are_independent(self):
        m = block.block_mask(torch.tensor([[4], [1]]), torch.tensor([[1], [2]]), 4, 2)
        self.assertEqual(m[0].tolist(), [[True] * 4 + [True, False]] * 2)
        self.assertEqual(m[1].tolist(), [[True, False, False, False, True, True]] * 2)


@unittest.skipUnless(HAVE_TORCH, "torch/numpy are not installed")
class HeadForwardTest(unittest.TestCase):
    def test_batched_blocks_equal_the_contract(self):
        # Three blocks of one sequence in one masked forward must equal three
        # separate drafting calls computed from the contract's formulas.
        head = small_head(n_layers=2)
        g = torch.Generator().manual_seed(1)
        seq = torch.randint(0, 32, (1, 12), generator=g)
        feats = torch.randn(1, 12, 2 * 16, generator=g)
        anchors, blens = torch.tensor([[0, 5, 9]]), torch.tensor([[4, 2, 3]])
        with torch.no_grad():
            out = head(feats, torch.gather(seq, 1, anchors), anchors, blens)
            for k in range(3):
                a, b = int(anchors[0, k]), int(blens[0, k])
                want = reference_draft(head, feats[0, :a], int(seq[0, a]), a + 1, b)
                err = float((out[0, k, :b] - want).abs().max())
                self.assertLess(err, 1e-4 * float(want.abs().max()), f"block {k}")

    def test_context_after_anchor_is_ignored(self):
        head = small_head()
        g = torch.Generator().manual_seed(2)
        feats = torch.randn(1, 8, 32, generator=g)
        other = feats.clone()
        other[0, 3:] = torch.randn(5, 32, generator=g)  # positions >= anchor 3
        args = (torch.tensor([[7]]), torch.tensor([[3]]), torch.tensor([[4]]))
        with torch.no_grad():
            self.assertTrue(torch.equal(head(feats, *args), head(other, *args)))

    def test_rope_rows_at_own_positions(self):
        x = torch.zeros(1, 2, 1, 4)
        x[..., 0] = 1.0  # pair 0: (1, 0)
        cos, sin = torch.cos(torch.arange(8.0))[:, None], torch.sin(torch.arange(8.0))[:, None]
        y = block.rope_at(x[..., :2], torch.tensor([[3, 5]]), cos, sin)
        self.assertAlmostEqual(float(y[0, 0, 0, 0]), math.cos(3.0), places=6)
        self.assertAlmostEqual(float(y[0, 1, 0, 1]), math.sin(5.0), places=6)


@unittest.skipUnless(HAVE_TORCH, "torch/numpy are not installed")
class ExportTest(unittest.TestCase):
    def setUp(self):
        fd, self.path = tempfile.mkstemp(suffix=".gguf")
        os.close(fd)

    def tearDown(self):
        os.unlink(self.path)

    def test_keys_tensors_shapes_types(self):
        head = small_head(n_layers=2, feats=(1, 3, 5), bsz=16, dim=32, heads=4, kv=2, ffn=64)
        block.export_block_gguf(head, self.path, name="t", description="d")
        g = gguf_read.GGUFFile(self.path)
        kv = g.kv
        self.assertEqual(g.version, 3)
        self.assertEqual(kv["general.architecture"], "phasemark-block")
        self.assertEqual(kv["general.name"], "t")
        self.assertIn("public domain", kv["general.license"])
        p = "phasemark-block."
        want_u32 = {"block_count": 2, "embedding_length": 32, "feed_forward_length": 64,
                    "attention.head_count": 4, "attention.head_count_kv": 2, "context_length": 64,
                    "block_size": 16, "target.vocab_size": 32, "target.embedding_length": 32}
        for k, v in want_u32.items():
            self.assertEqual((kv[p + k], g.kv_types[p + k]), (v, 4), k)
        self.assertEqual(g.kv_types[p + "attention.layer_norm_rms_epsilon"], 6)
        self.assertAlmostEqual(kv[p + "attention.layer_norm_rms_epsilon"], 1e-5, delta=1e-12)
        self.assertEqual(kv[p + "rope.freq_base"], 10000.0)
        layers = kv[p + "target.layers"]
        self.assertEqual((layers[0], layers[1], layers[2].tolist()), ("array", 4, [1, 3, 5]))
        self.assertNotIn("token_embd.weight", g.tensors)
        self.assertNotIn("output.weight", g.tensors)
        self.assertFalse(any(k.startswith("tokenizer.") for k in kv))
        want = {"fc.weight": ([96, 32], 1), "fc_norm.weight": ([32], 0),
                "mask_embd.weight": ([32], 0), "output_norm.weight": ([32], 0)}
        for i in range(2):
            want.update({f"blk.{i}.attn_norm.weight": ([32], 0),
                         f"blk.{i}.attn_q.weight": ([32, 32], 1),
                         f"blk.{i}.attn_k.weight": ([32, 16], 1),
                         f"blk.{i}.attn_v.weight": ([32, 16], 1),
                         f"blk.{i}.attn_output.weight": ([32, 32], 1),
                         f"blk.{i}.ffn_norm.weight": ([32], 0),
                         f"blk.{i}.ffn_gate.weight": ([32, 64], 1),
                         f"blk.{i}.ffn_up.weight": ([32, 64], 1),
                         f"blk.{i}.ffn_down.weight": ([64, 32], 1)})
        self.assertEqual({n: (t["ne"], t["type"]) for n, t in g.tensors.items()}, want)
        self.assertEqual(list(g.tensors)[:3], ["fc.weight", "fc_norm.weight", "mask_embd.weight"])
        self.assertEqual(list(g.tensors)[-1], "output_norm.weight")

    def test_round_trip_values(self):
        head = small_head(n_layers=1)
        block.export_block_gguf(head, self.path)
        g = gguf_read.GGUFFile(self.path)
        fc = head.fc.weight.detach()
        self.assertTrue(torch.equal(torch.from_numpy(g.tensor("fc.weight")), fc.half().float()))
        self.assertTrue(torch.equal(torch.from_numpy(g.tensor("mask_embd.weight")),
                                    head.mask_embd.detach()))

    def test_loader_refuses_mismatched_target(self):
        # model.Config wants widths in whole Q8_0 blocks of 32.
        head = small_head(n_layers=1, vocab=32, dim=32, ffn=64, feats=(0, 2))
        block.export_block_gguf(head, self.path)
        from model import Config, Transformer
        other = Transformer(Config(vocab_size=48, dim=32, n_layers=3, n_heads=4, n_kv_heads=2,
                                   ffn_dim=64, max_seq_len=64), tied=False)
        with self.assertRaisesRegex(gguf_read.GGUFError, "vocab"):
            block.load_block_gguf(self.path, other)
        fits = Transformer(Config(vocab_size=32, dim=32, n_layers=3, n_heads=4, n_kv_heads=2,
                                  ffn_dim=64, max_seq_len=64), tied=False)
        self.assertEqual(block.load_block_gguf(self.path, fits)[0].cfg.target_layers, [0, 2])
        shallow = Transformer(Config(vocab_size=32, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                     ffn_dim=64, max_seq_len=64), tied=False)
        with self.assertRaisesRegex(gguf_read.GGUFError, "layer"):
            block.load_block_gguf(self.path, shallow)


@unittest.skipUnless(HAVE_TORCH, "torch/numpy are not installed")
class ObjectiveTest(unittest.TestCase):
    def test_row_weights(self):
        w = block.row_weights(torch.tensor([[2, 4]]), 4, 0.5)
        self.assertEqual(w.tolist(), [[[1.0, 0.5, 0.0, 0.0], [1.0, 0.5, 0.25, 0.125]]])

    def test_distill_loss_hard_is_cross_entropy(self):
        # Row 0: uniform logits over 4 tokens, CE = ln 4; row 1: label 0 of
        # logits (ln 3, 0, 0, 0): q_0 = 3/6, CE = ln 2. Weights 1 and 3.
        logits = torch.tensor([[0.0, 0, 0, 0], [math.log(3.0), 0, 0, 0]])
        labels = torch.tensor([2, 0])
        w = torch.tensor([1.0, 3.0])
        loss, ce, kl = block.distill_loss(logits, labels, logits.clone(), w, 1.0)
        want = (math.log(4.0) + 3 * math.log(2.0)) / 4
        self.assertAlmostEqual(float(loss), want, places=6)
        self.assertAlmostEqual(float(ce), want, places=6)
        self.assertAlmostEqual(float(kl), 0.0, places=6)   # same distributions

    def test_distill_loss_soft_is_kl(self):
        # p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln (2/3).
        logits = torch.tensor([[0.0, math.log(3.0)]])
        t_logits = torch.tensor([[0.0, 0.0]])
        want = 0.5 * math.log(2.0) + 0.5 * math.log(2.0 / 3.0)
        loss, _, kl = block.distill_loss(logits, torch.tensor([0]), t_logits, torch.ones(1), 0.0)
        self.assertAlmostEqual(float(loss), want, places=6)
        self.assertAlmostEqual(float(kl), want, places=6)
        # Per-sequence mixing: hard 0.25 -> 0.25 CE (ln 4) + 0.75 KL.
        mixed, _, _ = block.distill_loss(logits, torch.tensor([0]), t_logits, torch.ones(1),
                                         torch.tensor([0.25]))
        self.assertAlmostEqual(float(mixed), 0.25 * math.log(4.0) + 0.75 * want, places=6)

    def test_distill_loss_ignores_unweighted_rows(self):
        logits = torch.tensor([[0.0, 0.0], [50.0, -50.0]])
        t_logits = torch.tensor([[0.0, 0.0], [-50.0, 50.0]])
        loss, _, _ = block.distill_loss(logits, torch.tensor([1, 1]), t_logits,
                                        torch.tensor([1.0, 0.0]), 0.5)
        self.assertAlmostEqual(float(loss), 0.5 * math.log(2.0), places=6)

    def test_row_overlap_and_expected_prefix(self):
        # At T = 1: p = (1/2, 1/2), q = (1/4, 3/4): overlap 1/4 + 1/2.
        ov = block.row_overlap(torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[0.0, 0.0]]), 1.0)
        self.assertAlmostEqual(float(ov[0]), 0.75, places=6)
        # T = 0.5 squares the odds: q = (1/10, 9/10), overlap 1/10 + 1/2.
        ov = block.row_overlap(torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[0.0, 0.0]]), 0.5)
        self.assertAlmostEqual(float(ov[0]), 0.6, places=6)
        e = block.expected_prefix(torch.tensor([[0.5, 0.5, 1.0], [1.0, 0.0, 1.0]]))
        self.assertEqual(e.tolist(), [0.5 + 0.25 + 0.25, 1.0])

    def test_target_logits_from_last_features(self):
        from model import Config, Transformer
        torch.manual_seed(3)
        t = Transformer(Config(vocab_size=32, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                               ffn_dim=64, max_seq_len=16), tied=False).eval()
        ids = torch.randint(0, 32, (2, 7))
        logits, f = block.target_forward(t, ids, [0, 1])
        got = block.target_logits(t, f[..., 32:])
        self.assertLess(float((got - logits).abs().max()), 1e-5)


@unittest.skipUnless(HAVE_TORCH, "torch/numpy are not installed")
class SpecSampleVerifyTest(unittest.TestCase):
    def setUp(self):
        self.q = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]])
        self.p = torch.tensor([[0.25, 0.75, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
        self.drawn = []

    def draw(self, dist):
        self.drawn.append(dist.tolist())
        return 1

    def test_all_accepted_then_bonus(self):
        # Row 0 drafts 1 (p/q = 1.5: always); row 1 drafts 0 (p/q = 2).
        a, out = block.spec_sample_verify([1, 0], self.q, self.p, torch.tensor([0.99, 0.99]), self.draw)
        self.assertEqual((a, out), (2, [1, 0, 1]))
        self.assertEqual(self.drawn, [[0.0, 0.0, 1.0]])      # the bonus row's p

    def test_reject_draws_the_residual(self):
        # Row 0 drafts 0: p/q = 1/2, u = 0.6 rejects; residual max(p - q, 0)
        # = (0, 1/4, 0), normalised (0, 1, 0).
        a, out = block.spec_sample_verify([0, 0], self.q, self.p, torch.tensor([0.6, 0.0]), self.draw)
        self.assertEqual((a, out), (0, [1]))
        self.assertEqual(self.drawn, [[0.0, 1.0, 0.0]])

    def test_accept_below_ratio(self):
        # u = 0.4 < p/q = 1/2 accepts row 0; row 1 drafts 2 (p = 0): rejected
        # whatever u; residual (1/4, 1/4, 0) -> (1/2, 1/2, 0).
        a, out = block.spec_sample_verify([0, 2], self.q, self.p, torch.tensor([0.4, 0.0]), self.draw)
        self.assertEqual((a, out), (1, [0, 1]))
        self.assertEqual(self.drawn, [[0.5, 0.5, 0.0]])


@unittest.skipUnless(HAVE_TORCH, "torch/numpy are not installed")
class ContinueCachedTest(unittest.TestCase):
    def setUp(self):
        from model import Config, Transformer
        torch.manual_seed(4)
        self.t = Transformer(Config(vocab_size=32, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                    ffn_dim=64, max_seq_len=32), tied=False).eval()
        self.prefix = torch.randint(0, 32, (3, 5))

    def test_greedy_rows_match_full_forwards(self):
        temps = torch.tensor([0.0, 0.7, 0.0])
        out = block.continue_cached(self.t, self.prefix, 6, temps, torch.Generator().manual_seed(1))
        self.assertEqual(out.shape, (3, 11))
        self.assertTrue(torch.equal(out[:, :5], self.prefix))
        for r in (0, 2):   # greedy rows: each token the argmax of a full forward
            for j in range(5, 11):
                logits, _ = block.target_forward(self.t, out[r:r + 1, :j])
                self.assertEqual(int(out[r, j]), int(logits[0, -1].argmax()))
        self.assertTrue(torch.equal(block.greedy_cached(self.t, self.prefix, 6)[[0, 2]], out[[0, 2]]))

    def test_sampled_rows_follow_the_generator(self):
        temps = torch.tensor([0.7, 0.7, 0.7])
        a = block.continue_cached(self.t, self.prefix, 8, temps, torch.Generator().manual_seed(5))
        b = block.continue_cached(self.t, self.prefix, 8, temps, torch.Generator().manual_seed(5))
        self.assertTrue(torch.equal(a, b))
        g = block.greedy_cached(self.t, self.prefix, 8)
        self.assertFalse(torch.equal(a, g))   # 24 draws at T = 0.7 from a random model


def need_file(path):
    if not os.path.exists(path):
        raise unittest.SkipTest(f"{path} is missing")


@unittest.skipUnless(HAVE_TORCH, "torch/numpy are not installed")
class ShippedHeadTest(unittest.TestCase):
    def test_layout(self):
        need_file(HEAD)
        g = gguf_read.GGUFFile(HEAD)
        cfg = block.head_config_from_gguf(g)
        self.assertEqual((cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_dim),
                         (512, 2, 8, 4, 1024))
        self.assertEqual((cfg.block_size, cfg.vocab_size, cfg.target_layers), (16, 4096, [1, 3, 5]))
        self.assertEqual(len(g.tensors), 4 + 9 * 2)
        self.assertEqual(g.type_name("blk.1.ffn_down.weight"), "F16")
        self.assertEqual(g.type_name("output_norm.weight"), "F32")
        self.assertLess(os.path.getsize(HEAD), 12_000_000)

    def test_loads_against_shipped_target(self):
        need_file(HEAD)
        need_file(TARGET)
        target = block.load_target(TARGET)
        head, _ = block.load_block_gguf(HEAD, target)
        self.assertEqual(head.cfg.target_layers, [1, 3, 5])

    def test_fixture_matches_shipped_head(self):
        # The C side's fixture must describe the head that ships: its
        # head-only case, fed through this forward, gives the same rows.
        need_file(HEAD)
        need_file(TARGET)
        need_file(FIXTURE)
        import json
        with open(FIXTURE, encoding="utf-8") as f:
            case = next(c for c in json.load(f)["cases"] if c["kind"] == "head_only")
        target = block.load_target(TARGET)
        head, _ = block.load_block_gguf(HEAD, target)
        n, b, ids = case["n"], case["b"], case["ids"]
        feats = torch.tensor([case["features"]], dtype=torch.float32)
        self.assertEqual(tuple(feats.shape), (1, n - 1, 3 * 512))
        with torch.no_grad():
            logits = head(feats, torch.tensor([[ids[-1]]]), torch.tensor([[n - 1]]),
                          torch.tensor([[b]]))[0, 0, :b]
        self.assertEqual(logits.argmax(-1).tolist(), [r["top1"] for r in case["rows"]])
        for row, want in zip(logits, case["rows"]):
            got = row[want["top5_ids"]]
            self.assertLess(float((got - torch.tensor(want["top5_logits"])).abs().max()), 1e-4)


if __name__ == "__main__":
    unittest.main()
