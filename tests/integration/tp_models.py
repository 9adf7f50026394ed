#!/usr/bin/env python3
"""Decoder variants for the tensor-parallel tests, exported like samples/gpt
(opset 17, training mode, the loss as the only output, no constant folding):

    /usr/bin/python3 tests/integration/tp_models.py -o DIR   # writes DIR/<variant>.onnx

Each variant differs from samples/gpt in what a Megatron plan has to split:
  heads4  4 heads (TP=4 gives each rank one), biases on q, v, o and the MLP
  gqa     grouped-query attention: 4 query heads, 2 key/value heads
          repeat_interleave'd to the 4 as HF Llama's repeat_kv does it (one KV
          head per rank under TP=2)
  tied    the output head's weight is the token embedding
  swiglu  down(silu(gate(x)) * up(x)) and RMSNorm, no biases (Llama's block)
All have vocabulary 64, 16 positions and 2 layers. No variant has a key bias:
softmax cancels it, so its gradient is zero up to rounding and AdamW would
turn that rounding into full-size updates no two runs reproduce (see
samples/gpt/export.py).

Importable: `build_model(name)` gives a variant with its fixed initial
weights, `export(name, path)` writes it, `megatron_params(model)` gives the
`params` of a Megatron `shard` directive for it (or for samples/gpt's module).
"""
import argparse
import dataclasses
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import harness

VOCAB = 64
BLOCK = 16  # sequence length
LAYERS = 2
SEED = 7

# Megatron's plan on PyTorch's [out, in] weights: column-parallel blocks split their
# outputs (dim 0, and their biases with them), row-parallel blocks their inputs (dim 1;
# their biases are added after the all-reduce, so stay whole).
COLUMN_PARALLEL = ("attn.q", "attn.k", "attn.v", "mlp.fc", "mlp.gate", "mlp.up")
ROW_PARALLEL = ("attn.o", "attn.proj", "mlp.out", "mlp.down")


@dataclasses.dataclass(frozen=True)
class Variant:
    d: int
    heads: int
    kv_heads: int
    ffn: int
    bias: bool
    tied: bool = False
    swiglu: bool = False


VARIANTS = {
    "heads4": Variant(d=32, heads=4, kv_heads=4, ffn=128, bias=True),
    "gqa": Variant(d=64, heads=4, kv_heads=2, ffn=128, bias=True),
    "tied": Variant(d=32, heads=2, kv_heads=2, ffn=128, bias=True, tied=True),
    "swiglu": Variant(d=32, heads=2, kv_heads=2, ffn=96, bias=False, swiglu=True),
}


class RMSNorm(nn.Module):
    """Llama's: x / sqrt(mean(x^2) + eps) * weight (PyTorch 1.13 has no nn.RMSNorm)."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    """Causal attention with `kv_heads` key/value heads shared by groups of
    query heads, written with plain ops as samples/gpt's is."""

    def __init__(self, v):
        super().__init__()
        self.heads, self.kv_heads = v.heads, v.kv_heads
        self.head_dim = v.d // v.heads
        kv = self.kv_heads * self.head_dim
        self.q = nn.Linear(v.d, v.d, bias=v.bias)
        self.k = nn.Linear(v.d, kv, bias=False)
        self.v = nn.Linear(v.d, kv, bias=v.bias)
        self.o = nn.Linear(v.d, v.d, bias=v.bias)
        self.register_buffer("mask", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def repeat_kv(self, y, b, t):
        """repeat_interleave(y, heads // kv_heads, dim=1) as HF Llama's repeat_kv
        writes it (Unsqueeze, Expand, Reshape): torch 1.13 exports
        repeat_interleave itself as a Split per KV head with run-time Expands."""
        group = self.heads // self.kv_heads
        y = y[:, :, None, :, :].expand(b, self.kv_heads, group, t, self.head_dim)
        return y.reshape(b, self.heads, t, self.head_dim)

    def forward(self, x):
        b, t, d = x.shape

        def split(y, heads):
            return y.reshape(b, t, heads, self.head_dim).transpose(1, 2)  # [b, heads, t, hd]

        q = split(self.q(x), self.heads)
        k = split(self.k(x), self.kv_heads)
        v = split(self.v(x), self.kv_heads)
        if self.kv_heads != self.heads:
            k, v = self.repeat_kv(k, b, t), self.repeat_kv(v, b, t)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.o(y)


class GeluMLP(nn.Module):
    def __init__(self, v):
        super().__init__()
        self.fc = nn.Linear(v.d, v.ffn, bias=v.bias)
        self.out = nn.Linear(v.ffn, v.d, bias=v.bias)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x)))


class SwiGLU(nn.Module):
    def __init__(self, v):
        super().__init__()
        self.gate = nn.Linear(v.d, v.ffn, bias=v.bias)
        self.up = nn.Linear(v.d, v.ffn, bias=v.bias)
        self.down = nn.Linear(v.ffn, v.d, bias=v.bias)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def norm(v):
    return RMSNorm(v.d) if v.swiglu else nn.LayerNorm(v.d)


class Block(nn.Module):
    def __init__(self, v):
        super().__init__()
        self.ln1 = norm(v)
        self.attn = Attention(v)
        self.ln2 = norm(v)
        self.mlp = SwiGLU(v) if v.swiglu else GeluMLP(v)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    """forward(idx [b, T] int64, targets [b, T] int64) -> mean cross-entropy
    over all positions, as samples/gpt's GPT."""

    def __init__(self, v):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, v.d)
        self.pos = nn.Embedding(BLOCK, v.d)
        self.blocks = nn.ModuleList([Block(v) for _ in range(LAYERS)])
        self.ln_f = norm(v)
        self.head = None if v.tied else nn.Linear(v.d, VOCAB, bias=v.bias)
        if v.tied:
            # Logits of about unit scale from the normalized features, as the head's own
            # initialization gives them; nn.Embedding's N(0, 1) would make them sqrt(d) times that.
            nn.init.normal_(self.tok.weight, std=v.d**-0.5)

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        logits = x @ self.tok.weight.t() if self.head is None else self.head(x)
        return F.cross_entropy(logits.reshape(b * t, -1), targets.reshape(b * t))


def build_model(name):
    """Variant `name` with its fixed initial weights."""
    torch.manual_seed(SEED)
    return Decoder(VARIANTS[name])


def export(name, path):
    """Writes variant `name` to `path` exactly as samples/gpt/export.py writes the sample."""
    harness.sample_module("gpt").export_model(build_model(name), path, vocab=VOCAB, block=BLOCK)
    return path


def megatron_params(model):
    """The `params` of a Megatron `shard` directive for `model`: one glob over
    the layers per column- or row-parallel weight, and the column-parallel
    biases the model has."""
    names = {name for name, _ in model.named_parameters()}
    params = {}
    for layer in range(LAYERS):
        prefix = f"blocks.{layer}."
        for module in COLUMN_PARALLEL:
            for kind in ("weight", "bias"):
                if f"{prefix}{module}.{kind}" in names:
                    params[f"blocks.*.{module}.{kind}"] = 0
        for module in ROW_PARALLEL:
            if f"{prefix}{module}.weight" in names:
                params[f"blocks.*.{module}.weight"] = 1
    return params


def vocab_params(model):
    """The `params` that split the token embedding and an untied output head along the
    vocabulary (dimension 0 of their [V, d] weights, and the head's bias)."""
    names = {name for name, _ in model.named_parameters()}
    params = {"tok.weight": 0}
    if "head.weight" in names:
        params["head.*"] = 0
    return params


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="directory for <variant>.onnx")
    args = parser.parse_args()
    os.makedirs(args.output, exist_ok=True)
    for name in VARIANTS:
        print(f"wrote {export(name, os.path.join(args.output, name + '.onnx'))}")


if __name__ == "__main__":
    main()
