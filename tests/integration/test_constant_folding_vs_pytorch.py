"""Constant subgraphs as real exports write them, folded by piper-plan into
constants and checked against PyTorch by training: T5's relative-position
buckets (Range, Sub, Greater, Abs or Min and Neg, Less, Cast, Div, Log, Mul,
Add, Min, Where on constants; log(0) = -inf cast to int64 and discarded by
Where), bidirectional (encoder) and causal (decoder), index a trained bias
table; the decoder also adds a causal mask built with Expand, LessOrEqual,
Not, Or and Tile. Exported with a dynamic batch and no constant folding, so
the folding is Piper's. Every step's loss within 1e-4 relative, final weights
within 1e-3 relative, and --list shows the bucket arithmetic folded away."""
import math
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn

import harness
from harness import Tools

STEPS = 4
GLOBAL_BATCH = 4
SAMPLES = 8
LOSS_RTOL = 1e-4
WEIGHT_RTOL = 1e-3
L, NUM_BUCKETS, MAX_DISTANCE = 24, 32, 64


def t5_relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """transformers' T5Attention._relative_position_bucket (4.40), verbatim."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


class RelativeBias(nn.Module):
    """x + bias[bucket(j - i)] against a target, as T5 adds its position bias to the
    attention scores; the decoder form also masks the future with a Tile of its mask."""

    def __init__(self, bidirectional):
        super().__init__()
        self.bidirectional = bidirectional
        self.bias = nn.Embedding(NUM_BUCKETS, 1)

    def forward(self, x, target):
        length = x.shape[1]
        context = torch.arange(length, dtype=torch.long)[:, None]
        memory = torch.arange(length, dtype=torch.long)[None, :]
        buckets = t5_relative_position_bucket(memory - context, self.bidirectional,
                                              NUM_BUCKETS, MAX_DISTANCE)
        scores = x + self.bias(buckets)[..., 0]
        if not self.bidirectional:
            rows = torch.arange(length)[:, None].expand(length, length)
            past = (torch.arange(length)[None, :] <= rows) | ~torch.ones_like(rows).bool()
            keep = past.repeat(1, 1).to(scores.dtype)
            scores = scores * keep
        return ((scores - target) ** 2).mean()


def inputs(rng):
    shape = (SAMPLES, L, L)
    return (rng.standard_normal(shape).astype(np.float32),
            rng.standard_normal(shape).astype(np.float32))


class ConstantFoldingMatchesPyTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_constant_folding_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name, bidirectional):
        torch.manual_seed(5)
        model = RelativeBias(bidirectional)
        work = os.path.join(self.tmp.name, name)
        harness.train_exported_model_like_pytorch(
            self, work, model, inputs(np.random.default_rng(7)),
            {"type": "sgd", "lr": 0.5}, lambda p: torch.optim.SGD(p, lr=0.5), STEPS,
            GLOBAL_BATCH, LOSS_RTOL, WEIGHT_RTOL)
        listing = harness.run_ok([Tools.plan, "--list", os.path.join(work, "model.onnx")]).stdout
        folded, kept = set(), set()
        for line in listing.splitlines():
            parts = line.split()
            if line.startswith("  ") and len(parts) >= 2 and not parts[1].startswith("["):
                (folded if "(folded into a constant" in line else kept).add(parts[1])
        chain = {"Range", "Sub", "Less", "Log", "Div", "Cast", "Min", "Where"}
        chain |= {"Abs", "Greater"} if bidirectional else {"Neg", "Expand", "LessOrEqual", "Not",
                                                            "Or", "Tile"}
        self.assertLessEqual(chain, folded, listing)
        left = (chain - {"Sub"}) & kept  # the loss's Sub reads activations
        self.assertFalse(left, f"not folded: {left}\n{listing}")

    def test_encoder_buckets(self):
        self.check("encoder", bidirectional=True)

    def test_decoder_buckets_and_mask(self):
        self.check("decoder", bidirectional=False)


if __name__ == "__main__":
    harness.main()
