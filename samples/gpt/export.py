#!/usr/bin/env python3
"""Exports the sample decoder-only GPT, loss included, as a training-mode ONNX model.

    /usr/bin/python3 samples/gpt/export.py [-o samples/gpt/model.onnx]

The module is importable: tests build the PyTorch reference from `build_model()`
and copy the exported initializers into it by name (`load_initializers`).
The causal mask is a buffer (`blocks.N.attn.mask`); strategies must list it as
frozen (`"frozen": ["*mask*"]`).
"""
import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64
BLOCK = 16      # sequence length T
D_MODEL = 32
LAYERS = 2
HEADS = 2
SEED = 0


class CausalSelfAttention(nn.Module):
    """Multi-head attention written with plain ops: q, k, v projections, heads by
    reshape/transpose, q @ k^T * scale, causal mask (a tril buffer) by
    masked_fill, softmax, @ v, output projection."""

    def __init__(self, d, heads, block):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        # No key bias: it adds q.b_k to every score of a query, which softmax
        # cancels, so its gradient is zero up to rounding and AdamW would turn
        # that rounding noise into full-size updates that no two
        # implementations reproduce alike.
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads

        def split(y):
            return y.reshape(b, t, self.heads, hd).transpose(1, 2)  # [b, h, t, hd]

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d, heads, block, mlp):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, block)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = mlp

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """forward(idx [b, T] int64, targets [b, T] int64) -> mean cross-entropy
    over all positions. `make_mlp(d)` builds each block's feed-forward part
    (samples/moe swaps in a mixture of experts)."""

    def __init__(self, vocab=VOCAB, block=BLOCK, d=D_MODEL, layers=LAYERS, heads=HEADS,
                 make_mlp=MLP):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.blocks = nn.ModuleList([Block(d, heads, block, make_mlp(d)) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets):
        b, t = idx.shape
        positions = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(b * t, -1), targets.reshape(b * t))


def build_model(seed=SEED):
    """The sample's module with its fixed initial weights."""
    torch.manual_seed(seed)
    return GPT()


def load_initializers(model, onnx_path):
    """Copies the ONNX file's initializers into `model`'s parameters (and
    buffers) by name. Fails if a parameter has no initializer."""
    import onnx
    from onnx import numpy_helper

    values = {t.name: numpy_helper.to_array(t) for t in onnx.load(onnx_path).graph.initializer}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name not in values:
                raise KeyError(f"{onnx_path} has no initializer named {name!r}")
            param.copy_(torch.from_numpy(values[name].copy()))
        for name, buf in model.named_buffers():
            if name in values:
                buf.copy_(torch.from_numpy(values[name].copy()))
    return model


def export_model(model, path, vocab=VOCAB, block=BLOCK, batch=2):
    idx = torch.randint(0, vocab, (batch, block))
    targets = torch.randint(0, vocab, (batch, block))
    torch.onnx.export(
        model,
        (idx, targets),
        path,
        opset_version=17,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        input_names=["idx", "targets"],
        output_names=["loss"],
        dynamic_axes={"idx": {0: "batch"}, "targets": {0: "batch"}},
    )
    import onnx

    onnx.checker.check_model(onnx.load(path), full_check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model.onnx")
    parser.add_argument("-o", "--output", default=default, help="where to write the model")
    args = parser.parse_args()
    export_model(build_model(), args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
