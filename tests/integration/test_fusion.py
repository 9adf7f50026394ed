"""The fusion pass end to end (planner/fusion, `piper-plan --no-fuse`).

- samples/gpt planned with fusion (the default) and with --no-fuse and trained
  STEPS AdamW steps on the same data: every step's loss and every final weight
  agree within float32 rounding (DIFF_RTOL relative).
- A decoder exported here whose patterns differ from the sample's (LayerNorm
  written as ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add, tanh GELU, attention scaled by
  Div and masked by adding a frozen -inf buffer): piper-plan reports the fused
  ops it expects, the fused plan trains like PyTorch (losses within 1e-4,
  weights within 1e-3, as test_samples_vs_pytorch) and like the unfused plan.
- Planned peak activation memory of samples/gpt's architecture at T = 256 is
  lower with fusion than without (no [B, H, T, T] probabilities kept for the
  backward); the numbers are printed.
PyTorch runs here; no reference numbers are stored."""
import json
import math
import os
import re
import tempfile
import unittest

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

import harness
from harness import Tools

STEPS = 20
GLOBAL_BATCH = 4
SAMPLES = 16
# Fused kernels round otherwise than the ops they replace (the fused attention's products are
# OpenBLAS's), and 20 AdamW steps carry those roundings into the weights, most into those with
# near-zero gradients: the variant decoder's positional embedding was 4.8e-6, 1.1e-5 and 4.9e-6
# off as the products' leaves went from 8 to 16 terms and exp's polynomial took fused
# multiply-adds (docs/strategy.md).
DIFF_RTOL = 2e-5
OPTIMIZER = {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01}
FROZEN = ["*mask*"]


def tokens(vocab, block):
    """Random token rows and their next-token targets."""
    rng = np.random.default_rng(99)
    seq = rng.integers(0, vocab, size=(SAMPLES, block + 1)).astype(np.int64)
    return seq[:, :-1], seq[:, 1:]


def plan(work, model_path, fuse, global_batch=GLOBAL_BATCH):
    """Plans `model_path` into work/plans_{fused|unfused}; returns the plan directory and
    piper-plan's output."""
    strategy = harness.write_json(os.path.join(work, "strategy.json"),
                                  harness.strategy(global_batch, OPTIMIZER, frozen=FROZEN))
    plans = os.path.join(work, "plans_" + ("fused" if fuse else "unfused"))
    result = harness.run_ok([Tools.plan, model_path, strategy, "-o", plans]
                            + ([] if fuse else ["--no-fuse"]))
    return plans, result.stdout


def train(work, plans, data, tag):
    metrics = os.path.join(work, f"metrics_{tag}.jsonl")
    trained = os.path.join(work, f"trained_{tag}.onnx")
    harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", STEPS,
                    "--data", data, "--metrics", metrics, "--save-onnx", trained], timeout=300)
    losses = [record["loss"] for record in harness.read_metrics(metrics)]
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(trained).graph.initializer}
    return losses, weights


def fused_counts(plan_output):
    """{rule: count} from piper-plan's "fused:" line."""
    line = re.search(r"^\s*fused:(.*)$", plan_output, re.MULTILINE)
    if not line:
        return {}
    words = line.group(1).split()
    return {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}


def activation_peak(plans):
    dumped = harness.run_ok([Tools.dump, "--json", os.path.join(plans, "rank0.plan")])
    return int(json.loads(dumped.stdout)["memory"]["activation_bytes"])


class HandNorm(nn.Module):
    """LayerNorm written out, as in code that predates nn.LayerNorm."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(d))
        self.bias = nn.Parameter(0.1 * torch.randn(d))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class VariantBlock(nn.Module):
    """Attention scaled by Div and masked by adding a frozen buffer of 0 / -inf; an MLP with
    tanh GELU. The q, k, v projection has no bias: a key bias's gradient is zero up to
    rounding (softmax cancels it), which AdamW would turn into updates no two
    implementations reproduce alike (see samples/gpt/export.py)."""

    def __init__(self, d, heads, block):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = HandNorm(d), HandNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.triu(torch.full((block, block), float("-inf")), 1))

    def attention(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = (y.reshape(b, t, self.heads, hd).transpose(1, 2)
                   for y in self.qkv(x).split(d, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd) + self.mask[:t, :t]
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class VariantDecoder(nn.Module):
    VOCAB, BLOCK, D, HEADS, LAYERS = 32, 8, 16, 2, 2

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(self.VOCAB, self.D)
        self.pos = nn.Parameter(0.1 * torch.randn(self.BLOCK, self.D))
        self.blocks = nn.ModuleList([VariantBlock(self.D, self.HEADS, self.BLOCK)
                                     for _ in range(self.LAYERS)])
        self.ln_f = HandNorm(self.D)
        self.head = nn.Linear(self.D, self.VOCAB)

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.tok(idx) + self.pos[:t]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(b * t, -1), targets.reshape(b * t))


class Fusion(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_fusion_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_same_training(self, name, fused, unfused):
        (fused_losses, fused_weights), (losses, weights) = fused, unfused
        self.assertEqual(len(fused_losses), STEPS)
        errors = [abs(a - b) / abs(b) for a, b in zip(fused_losses, losses)]
        print(f"[{name}] fused vs unfused: worst loss rel {max(errors):.2e} "
              f"(step {int(np.argmax(errors))}); last losses {fused_losses[-1]:.7f} / "
              f"{losses[-1]:.7f}")
        for step, error in enumerate(errors):
            self.assertLessEqual(error, DIFF_RTOL, f"[{name}] step {step}: fused "
                                 f"{fused_losses[step]!r}, unfused {losses[step]!r}")
        worst, worst_name = 0.0, None
        for param, want in weights.items():
            got = fused_weights[param]
            if np.array_equal(got, want):  # also frozen buffers holding -inf
                continue
            error = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
            if error >= worst:
                worst, worst_name = error, param
            self.assertLessEqual(error, DIFF_RTOL, f"[{name}] final {param}: rel {error:.3e}")
        print(f"[{name}] fused vs unfused: worst final weight rel {worst:.2e} ({worst_name})")

    def test_gpt_sample_fused_trains_like_unfused(self):
        gpt = harness.sample_module("gpt")
        work = os.path.join(self.tmp.name, "gpt")
        data = os.path.join(work, "data")
        os.makedirs(data)
        for name, array in zip(("idx", "targets"), tokens(gpt.VOCAB, gpt.BLOCK)):
            np.save(os.path.join(data, name + ".npy"), array)
        model_path = Tools.sample("gpt", "model.onnx")
        fused_plans, output = plan(work, model_path, fuse=True)
        self.assertEqual(fused_counts(output),
                         {"fuse-attention": gpt.LAYERS, "fuse-bias-gelu": gpt.LAYERS,
                          "fuse-layer-norm": 0, "fuse-linear": 6 * gpt.LAYERS + 1,
                          "fuse-linear-gelu": 0}, output)
        unfused_plans, output = plan(work, model_path, fuse=False)
        self.assertEqual(fused_counts(output), {}, output)
        self.assert_same_training("gpt", train(work, fused_plans, data, "fused"),
                                  train(work, unfused_plans, data, "unfused"))

    def test_variant_decoder_matches_pytorch_and_unfused(self):
        torch.manual_seed(3)
        model = VariantDecoder()
        work = os.path.join(self.tmp.name, "variant")
        harness.train_exported_model_like_pytorch(
            self, work, model, tokens(model.VOCAB, model.BLOCK), OPTIMIZER,
            lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01), STEPS, GLOBAL_BATCH,
            1e-4, 1e-3, frozen=FROZEN)
        model_path = os.path.join(work, "model.onnx")
        data = os.path.join(work, "data")
        fused_plans, output = plan(work, model_path, fuse=True)
        # LayerNorm: two per block and the final one. Linear: qkv, proj, fc and out per
        # block, and the head. The tanh GELU goes into fc's product.
        self.assertEqual(fused_counts(output),
                         {"fuse-attention": 2, "fuse-bias-gelu": 2, "fuse-layer-norm": 5,
                          "fuse-linear": 9, "fuse-linear-gelu": 2}, output)
        unfused_plans, _ = plan(work, model_path, fuse=False)
        self.assert_same_training("variant", train(work, fused_plans, data, "fused"),
                                  train(work, unfused_plans, data, "unfused"))

    def test_fusion_cuts_planned_activation_memory_at_long_sequences(self):
        gpt = harness.sample_module("gpt")
        block = 256
        work = os.path.join(self.tmp.name, "long")
        os.makedirs(work)
        model_path = os.path.join(work, "model.onnx")
        torch.manual_seed(0)
        gpt.export_model(gpt.GPT(block=block), model_path, block=block)
        peaks = {}
        for fuse in (True, False):
            plans, _ = plan(work, model_path, fuse, global_batch=8)
            peaks[fuse] = activation_peak(plans)
        print(f"[long] samples/gpt architecture at T={block}, batch 8: planned activation peak "
              f"{peaks[True] / 2**20:.1f} MiB fused, {peaks[False] / 2**20:.1f} MiB unfused "
              f"({peaks[True] / peaks[False]:.2f}x)")
        self.assertLess(peaks[True], peaks[False])


if __name__ == "__main__":
    harness.main()
