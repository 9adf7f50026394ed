#!/usr/bin/env python3
"""Exports the sample mixture-of-experts GPT, loss included, as a training-mode ONNX model.

    /usr/bin/python3 samples/moe/export.py [-o samples/moe/model.onnx]

The model is samples/gpt's (imported from ../gpt/export.py) with each block's
MLP replaced by a GShard-style top-2 mixture of experts with a capacity
factor. Tokens are routed per group of one sequence (T tokens), so every
shape in the graph is static apart from the batch. The module is importable
like samples/gpt's: `build_model()`, `load_initializers(model, onnx_path)`.
The causal masks are buffers; strategies must list them as frozen
(`"frozen": ["*mask*"]`).
"""
import argparse
import importlib.util
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_gpt():
    spec = importlib.util.spec_from_file_location(
        "piper_sample_gpt", os.path.join(HERE, "..", "gpt", "export.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpt = _load_gpt()

EXPERTS = 4
CAPACITY_FACTOR = 1.25
HIDDEN_MULT = 2   # expert hidden size = HIDDEN_MULT * d
SEED = 0


def capacity(tokens_per_group, experts=EXPERTS, factor=CAPACITY_FACTOR):
    """GShard's expert capacity for top-2 routing: ceil(2 * S / E * factor)."""
    return int(math.ceil(tokens_per_group * 2 / experts * factor))


class MoE(nn.Module):
    """Top-2 gated mixture of experts (GShard). For each group (one sequence,
    S tokens): router softmax, top-2 experts by topk, each token's position in
    its expert's buffer by cumsum over one-hot masks (second choices queue
    behind all first choices), tokens beyond the capacity C dropped, the
    top-2 gates renormalised, then dispatch [S, E, C] and combine [S, E, C]
    tensors move tokens to and from the experts by einsum. Expert weights are
    batched parameters [E, d, h] / [E, h, d]."""

    def __init__(self, d, experts=EXPERTS, hidden_mult=HIDDEN_MULT):
        super().__init__()
        h = hidden_mult * d
        self.experts = experts
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, h) * (1.0 / math.sqrt(d)))
        self.b1 = nn.Parameter(torch.zeros(experts, h))
        self.w2 = nn.Parameter(torch.randn(experts, h, d) * (1.0 / math.sqrt(h)))
        self.b2 = nn.Parameter(torch.zeros(experts, d))

    def forward(self, x):
        b, s, d = x.shape
        e = self.experts
        c = capacity(int(s), e)
        gates = F.softmax(self.router(x), dim=-1)                   # [b, s, e]
        _, top = torch.topk(gates, 2, dim=-1)                       # [b, s, 2]
        mask1 = F.one_hot(top[:, :, 0], e).to(x.dtype)              # [b, s, e]
        mask2 = F.one_hot(top[:, :, 1], e).to(x.dtype)
        # positions within each expert's buffer
        loc1 = torch.cumsum(mask1, dim=1) - 1.0
        loc2 = torch.cumsum(mask2, dim=1) - 1.0 + mask1.sum(dim=1, keepdim=True)
        mask1 = mask1 * (loc1 < c).to(x.dtype)
        mask2 = mask2 * (loc2 < c).to(x.dtype)
        pos1 = (loc1 * mask1).sum(dim=-1)                           # [b, s]
        pos2 = (loc2 * mask2).sum(dim=-1)
        gate1 = (gates * mask1).sum(dim=-1)                         # [b, s]
        gate2 = (gates * mask2).sum(dim=-1)
        denom = gate1 + gate2 + 1e-9
        gate1 = gate1 / denom
        gate2 = gate2 / denom
        pos1_oh = F.one_hot(pos1.to(torch.int64), c).to(x.dtype)    # [b, s, c]
        pos2_oh = F.one_hot(pos2.to(torch.int64), c).to(x.dtype)
        slot1 = mask1.unsqueeze(-1) * pos1_oh.unsqueeze(2)          # [b, s, e, c]
        slot2 = mask2.unsqueeze(-1) * pos2_oh.unsqueeze(2)
        dispatch = slot1 + slot2
        combine = gate1.unsqueeze(-1).unsqueeze(-1) * slot1 \
            + gate2.unsqueeze(-1).unsqueeze(-1) * slot2
        expert_in = torch.einsum("bsec,bsd->becd", dispatch, x)     # [b, e, c, d]
        hidden = F.gelu(torch.einsum("becd,edh->bech", expert_in, self.w1)
                        + self.b1.unsqueeze(1))
        expert_out = torch.einsum("bech,ehd->becd", hidden, self.w2) + self.b2.unsqueeze(1)
        return torch.einsum("bsec,becd->bsd", combine, expert_out)


def build_model(seed=SEED):
    """The sample's module with its fixed initial weights."""
    torch.manual_seed(seed)
    return gpt.GPT(make_mlp=MoE)


load_initializers = gpt.load_initializers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=os.path.join(HERE, "model.onnx"),
                        help="where to write the model")
    args = parser.parse_args()
    gpt.export_model(build_model(), args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
