"""Small models built from the indexing, layout and einsum ops, exported here
from PyTorch (opset 17) and trained by Piper and by PyTorch from the same
weights on the same data: token and position embeddings (Gather, Slice), a
fused projection split three ways (Split), attention scores and values by
einsum with a causal Trilu and a masked_fill (Where), Concat, CumSum, Expand,
and a top-2 router (TopK) that gathers expert weights by index and combines
them with a three-operand einsum; losses NegativeLogLikelihoodLoss (with
ignore_index) and the router's ArgMax feeding a Gather; and a scatter model:
T5's shift-right of the labels (ScatterND on int64), x.repeat (Tile),
scatter and scatter_add with fixed indices (ScatterElements, reduction none
and add), and advanced indexing of a parameter table (GatherND). Every step's
loss within 1e-4 relative, final weights within 1e-3 relative."""
import contextlib
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import harness
from harness import Tools

STEPS = 6
GLOBAL_BATCH = 4
SAMPLES = 12
LOSS_RTOL = 1e-4
WEIGHT_RTOL = 1e-3
T, VOCAB, D = 6, 11, 8


class TinyDecoder(nn.Module):
    """Embeddings, one causal attention layer by einsum, NLL on the scores."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(T + 2, D) * 0.3)
        self.qkv = nn.Linear(D, 3 * D)
        self.bias = nn.Parameter(torch.randn(D) * 0.1)
        self.head = nn.Linear(2 * D, VOCAB)
        self.register_buffer("future", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(self, x, y):
        t = x.shape[1]
        h = self.tok(x) + self.pos[1:t + 1]
        q, k, v = self.qkv(h).split(D, dim=-1)
        scores = torch.einsum("bqd,bkd->bqk", q, k) / D ** 0.5
        scores = torch.sigmoid(scores).tril()  # Trilu on activations
        scores = scores.masked_fill(self.future[:t, :t], -0.5)  # Where
        out = torch.einsum("bqk,bkd->bqd", scores, v)
        out = out + self.bias.expand(x.shape[0], t, D)
        mixed = torch.cat([out, torch.cumsum(h, dim=1) / t], dim=-1)
        logits = self.head(mixed)
        return F.nll_loss(logits.reshape(-1, VOCAB), y.reshape(-1), ignore_index=0)


class TopTwoRouter(nn.Module):
    """A gate picks two of four experts per sample (TopK); their weights are gathered by
    index and combined with the gate values by a three-operand einsum."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(D, 4)
        self.experts = nn.Parameter(torch.randn(4, D, 5) * 0.3)
        self.prior = nn.Parameter(torch.randn(4, 5) * 0.1)

    def forward(self, x, y):
        values, chosen = torch.topk(self.gate(x), 2, dim=-1)
        weights = self.experts[chosen]  # Gather: [B, 2, D, 5]
        out = torch.einsum("bd,bkdo,bk->bo", x, weights, torch.sigmoid(values))
        best = torch.argmax(values, dim=-1)  # always 0: the values come sorted
        out = out + self.prior[chosen.gather(1, best.unsqueeze(1)).squeeze(1)]
        return F.nll_loss(out, y, reduction="sum") / x.shape[0]


class ScatterModel(nn.Module):
    """The labels shifted right as T5 does it (ScatterND writes int64 tokens); slot states
    tiled over the batch (Tile) that picked positions overwrite (scatter: ScatterElements),
    and a scatter_add that pools positions into buckets, repeats included (ScatterElements,
    reduction add); and table[rows, cols] (GatherND, repeated pairs accumulating in the
    gradient). index_add exports as a ScatterElements too, but its export slices a shape
    with an open end, which waits for issue 13's point 1 like T5's own shift."""

    START = 1

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.proj = nn.Linear(D, D)
        self.slots = nn.Parameter(torch.randn(3, D) * 0.3)
        self.table = nn.Parameter(torch.randn(T, 4, D) * 0.3)
        self.head = nn.Linear(D, VOCAB)
        self.register_buffer("picked", torch.tensor([4, 0]))
        self.register_buffer("slot_of", torch.tensor([2, 0]))  # slot 1 keeps its state
        self.register_buffer("buckets", torch.tensor([0, 2, 1, 2, 0, 1]).view(T, 1).repeat(1, D))
        self.register_buffer("rows", torch.tensor([0, 5, 2, 0]))
        self.register_buffer("cols", torch.tensor([1, 3, 0, 1]))

    def forward(self, x, y):
        # T5 writes the open-ended y[..., :-1] into shifted[..., 1:]; bounds are explicit here
        # until the planner folds INT64_MAX slice ends exactly (issue 13, point 1).
        shifted = y.new_zeros(y.shape)
        shifted[..., 1:T] = y[..., 0:T - 1].clone()
        shifted[..., 0] = self.START
        h = torch.tanh(self.proj(self.tok(x) + self.tok(shifted)))  # [B, T, D]
        slots = self.slots.unsqueeze(0).repeat(x.shape[0], 1, 1)  # [B, 3, D]
        where = self.slot_of.view(1, 2, 1).expand(x.shape[0], 2, D)
        slots = slots.scatter(1, where, h[:, self.picked])
        pooled = torch.zeros(3, D).scatter_add(0, self.buckets, h.mean(0).reshape(T, D))
        looked_up = self.table[self.rows, self.cols]  # [4, D]
        mixed = h + slots.mean(1, keepdim=True) + pooled.mean(0) + looked_up.sum(0)
        return F.cross_entropy(self.head(mixed).reshape(-1, VOCAB), y.reshape(-1))


@contextlib.contextmanager
def advanced_indexing_as_gather_nd():
    """torch 1.13 exports x[i0, i1] with integer index tensors as a Gather over a flattened
    view, and writes GatherND only after NonZero (boolean masks); for the export of
    ScatterModel, x[i0, ..., ik] becomes GatherND(x, the indices stacked on a last axis).
    Indexing that skips a dimension (x[:, i]) keeps torch's own export."""
    from torch.onnx import symbolic_helper, symbolic_opset11

    def index(g, data, indices):
        parts = symbolic_helper._unpack_list(indices)
        if any(symbolic_helper._is_none(part) for part in parts):
            return symbolic_opset11.index(g, data, indices)
        last = g.op("Constant", value_t=torch.tensor([-1]))
        stacked = g.op("Concat", *[g.op("Unsqueeze", part, last) for part in parts], axis_i=-1)
        return g.op("GatherND", data, stacked)

    torch.onnx.register_custom_op_symbolic("aten::index", index, 17)
    try:
        yield
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::index", 17)


def inputs_for(name, rng):
    if name in ("decoder", "scatter"):
        return (rng.integers(0, VOCAB, (SAMPLES, T)).astype(np.int64),
                rng.integers(0, VOCAB, (SAMPLES, T)).astype(np.int64))
    return (rng.standard_normal((SAMPLES, D)).astype(np.float32),
            rng.integers(0, 5, SAMPLES).astype(np.int64))


MODELS = {"decoder": TinyDecoder, "router": TopTwoRouter, "scatter": ScatterModel}


class IndexingOpsMatchPyTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_indexing_ops_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name, optimizer, make_optimizer):
        torch.manual_seed(11)
        model = MODELS[name]()
        harness.train_exported_model_like_pytorch(
            self, os.path.join(self.tmp.name, name), model,
            inputs_for(name, np.random.default_rng(3)), optimizer,
            make_optimizer, STEPS, GLOBAL_BATCH, LOSS_RTOL, WEIGHT_RTOL)

    def test_decoder_adamw(self):
        self.check("decoder", {"type": "adamw", "lr": 0.01},
                   lambda p: torch.optim.AdamW(p, lr=0.01))

    def test_scatter_adamw(self):
        with advanced_indexing_as_gather_nd():
            self.check("scatter", {"type": "adamw", "lr": 0.01},
                       lambda p: torch.optim.AdamW(p, lr=0.01))

    def test_router_sgd(self):
        self.check("router", {"type": "sgd", "lr": 0.1, "momentum": 0.9},
                   lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))


if __name__ == "__main__":
    harness.main()
