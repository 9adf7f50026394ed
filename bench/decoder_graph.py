#!/usr/bin/python3
"""Writes a decoder-only training graph (Llama/Qwen3-shaped, loss included) as ONNX with
every weight in an external-data file, without materialising the weights.

    /usr/bin/python3 bench/decoder_graph.py --config qwen3_8b --seq 4096 -o /tmp/q8/model.onnx
    /usr/bin/python3 bench/decoder_graph.py --config tiny --seq 32 --weights random -o /tmp/t/model.onnx

The graph is written node by node with onnx.helper, as PyTorch's exporter spells these
layers (opset 17, a dynamic batch axis): token embedding (Gather), per block RMSNorm (Pow,
ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul), grouped-query attention with Qwen3's per-head
q/k RMSNorm and rotary embeddings (HF's rotate_half: Slice, Neg, Concat; cos and sin built
in the graph from Range, which the planner folds into constants), causal attention as
MatMul, Mul by the scale, Where with -inf, Softmax, MatMul (the pattern Piper fuses into
piper.FusedAttention), the key/value heads repeated by Unsqueeze, Expand and Reshape as
HF's repeat_kv exports, a SwiGLU MLP or a GShard top-2 mixture of SwiGLU experts written
as samples/moe writes its experts (batched [E, d, h] weights, dispatch and combine by
Einsum), a final RMSNorm, the head (tied to the embedding where the config ties them) and
SoftmaxCrossEntropyLoss over the flattened [batch*T, vocab] logits.

Weights are float32 initializers whose data lives in one file, `weights.bin`, beside the
model (ONNX external data: a location, an offset and a length). With `--weights none` (the
default) that file is created at its full size with os.truncate and nothing is written to
it: a sparse file holding no data, so a Qwen3-8B graph takes kilobytes of disk. piper-plan
reads only non-float32 external tensors when planning (planner/import/import.h), so it
plans such a model from the shapes alone. `--weights random` writes seeded random weights
instead (for the small models that are trained, bench/paper_eval.py --toy).

Node names follow the exporter's scopes (`/blocks.3/attn/...`), so a strategy annotates
stages by `{"match": "/blocks.3/*"}`; parameter names follow HF's (`blocks.3.attn.q.weight`;
experts `blocks.3.mlp.w_gate` [E, d, h], `w_up`, `w_down` [E, h, d]).
"""
import argparse
import math
import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper

# Public configs (config.json of Qwen/Qwen3-0.6B and Qwen/Qwen3-8B on the HF hub); qwen3_9b_moe
# is the artifact's "qwen3_9b" as this benchmark reads it (bench/README.md): Qwen3-8B's
# attention and depth with each MLP a top-2 mixture of 8 SwiGLU experts of hidden size 1536,
# which keeps Qwen3-8B's parameter count (8 x 3 x 4096 x 1536 = 3 x 4096 x 12288 per block).
CONFIGS = {
    "qwen3_0.6b": dict(vocab=151936, d=1024, layers=28, heads=16, kv_heads=8, head_dim=128,
                       ffn=3072, tie=True),
    "qwen3_8b": dict(vocab=151936, d=4096, layers=36, heads=32, kv_heads=8, head_dim=128,
                     ffn=12288, tie=False),
    "qwen3_9b_moe": dict(vocab=151936, d=4096, layers=36, heads=32, kv_heads=8, head_dim=128,
                         ffn=1536, tie=False, experts=8, group=512),
    # Small shapes of the same graph, for training runs on the CPU.
    "tiny": dict(vocab=64, d=32, layers=8, heads=4, kv_heads=2, head_dim=8, ffn=64, tie=True),
    "tiny_moe": dict(vocab=64, d=32, layers=8, heads=4, kv_heads=2, head_dim=8, ffn=32,
                     tie=False, experts=4, group=16),
}
RMS_EPS = 1e-6
ROPE_THETA = 1e6
CAPACITY_FACTOR = 1.25
SEED = 0


def capacity(tokens_per_group, experts):
    """GShard's expert capacity for top-2 routing, as samples/moe computes it."""
    return int(math.ceil(tokens_per_group * 2 / experts * CAPACITY_FACTOR))


class Graph:
    """Collects nodes, constants and external-data weights of one ONNX graph."""

    def __init__(self, rng):
        self.nodes, self.inits, self.weights = [], [], []
        self.offset = 0
        self.counter = 0
        self.rng = rng  # None: declare weights without values

    def op(self, op_type, inputs, scope, outputs=1, **attrs):
        self.counter += 1
        name = f"{scope}/{op_type}_{self.counter}"
        outs = [f"{name}_out{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, values, dtype=np.int64):
        """A Constant node, as the exporter writes them (a float32 initializer would be a
        parameter)."""
        self.counter += 1
        name = f"/Constant_{self.counter}"
        value = numpy_helper.from_array(np.asarray(values, dtype=dtype), name + "_value")
        self.nodes.append(helper.make_node("Constant", [], [name], name=name, value=value))
        return name

    def weight(self, name, dims, init="normal"):
        """A float32 parameter stored at the next offset of weights.bin."""
        length = 4 * int(np.prod(dims))
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
        for key, value in (("location", "weights.bin"), ("offset", self.offset),
                           ("length", length)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        tensor.data_location = TensorProto.EXTERNAL
        self.inits.append(tensor)
        self.weights.append((self.offset, dims, init, name))
        self.offset += length
        return name

    def write_weights(self, path):
        with open(path, "wb") as f:
            if self.rng is None:
                os.truncate(f.fileno(), self.offset)  # sparse: no data written
                return
            for offset, dims, init, _ in self.weights:
                if init == "ones":
                    values = np.ones(dims, np.float32)
                else:
                    fan_in = dims[-2] if len(dims) >= 2 else dims[-1]
                    values = self.rng.standard_normal(dims).astype(np.float32) / math.sqrt(fan_in)
                f.seek(offset)
                f.write(values.tobytes())


def rms_norm(g, x, weight, scope):
    var = g.op("ReduceMean", [g.op("Pow", [x, g.const(2.0, np.float32)], scope)], scope,
               axes=[-1], keepdims=1)
    inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [var, g.const(RMS_EPS, np.float32)],
                                                  scope)], scope)], scope)
    return g.op("Mul", [weight, g.op("Mul", [x, inv], scope)], scope)


def rope_tables(g, seq, head_dim):
    """cos and sin [T, head_dim] from Range, as HF's rotary embedding computes them."""
    scope = "/rotary"
    inv_freq = 1.0 / ROPE_THETA ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)
    pos = g.op("Range", [g.const(0.0, np.float32), g.const(float(seq), np.float32),
                         g.const(1.0, np.float32)], scope)
    freqs = g.op("Mul", [g.op("Unsqueeze", [pos, g.const([1])], scope),
                         g.const(inv_freq[None, :], np.float32)], scope)
    emb = g.op("Concat", [freqs, freqs], scope, axis=-1)
    return g.op("Cos", [emb], scope), g.op("Sin", [emb], scope)


def apply_rope(g, x, cos, sin, head_dim, scope):
    half = head_dim // 2
    x1 = g.op("Slice", [x, g.const([0]), g.const([half]), g.const([-1])], scope)
    x2 = g.op("Slice", [x, g.const([half]), g.const([head_dim]), g.const([-1])], scope)
    rotated = g.op("Concat", [g.op("Neg", [x2], scope), x1], scope, axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos], scope), g.op("Mul", [rotated, sin], scope)], scope)


def heads(g, x, n, cfg, seq, scope):
    """[b, T, n*hd] -> [b, n, T, hd]."""
    r = g.op("Reshape", [x, g.const([-1, seq, n, cfg["head_dim"]])], scope)
    return g.op("Transpose", [r], scope, perm=[0, 2, 1, 3])


def attention(g, x, cfg, seq, i, cos, sin, causal):
    scope, p = f"/blocks.{i}/attn", f"blocks.{i}.attn"
    d, h, kv, hd = cfg["d"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    q = heads(g, g.op("MatMul", [x, g.weight(f"{p}.q.weight", [d, h * hd])], scope), h, cfg,
              seq, scope)
    k = heads(g, g.op("MatMul", [x, g.weight(f"{p}.k.weight", [d, kv * hd])], scope), kv,
              cfg, seq, scope)
    v = heads(g, g.op("MatMul", [x, g.weight(f"{p}.v.weight", [d, kv * hd])], scope), kv,
              cfg, seq, scope)
    q = rms_norm(g, q, g.weight(f"{p}.q_norm.weight", [hd], "ones"), scope)  # Qwen3's QK-norm
    k = rms_norm(g, k, g.weight(f"{p}.k_norm.weight", [hd], "ones"), scope)
    q = apply_rope(g, q, cos, sin, hd, scope)
    k = apply_rope(g, k, cos, sin, hd, scope)
    if kv != h:  # HF's repeat_kv
        k, v = (g.op("Reshape", [g.op("Expand", [g.op("Unsqueeze", [t, g.const([2])], scope),
                                                  g.const([1, 1, h // kv, 1, 1])], scope),
                                  g.const([-1, h, seq, hd])], scope) for t in (k, v))
    kt = g.op("Transpose", [k], scope, perm=[0, 1, 3, 2])
    scores = g.op("Mul", [g.op("MatMul", [q, kt], scope),
                          g.const(1.0 / math.sqrt(hd), np.float32)], scope)
    masked = g.op("Where", [causal, scores, g.const(float("-inf"), np.float32)], scope)
    probs = g.op("Softmax", [masked], scope, axis=-1)
    out = g.op("Transpose", [g.op("MatMul", [probs, v], scope)], scope, perm=[0, 2, 1, 3])
    out = g.op("Reshape", [out, g.const([-1, seq, h * hd])], scope)
    return g.op("MatMul", [out, g.weight(f"{p}.o.weight", [h * hd, d])], scope)


def swiglu(g, x, cfg, i):
    scope, p = f"/blocks.{i}/mlp", f"blocks.{i}.mlp"
    d, f = cfg["d"], cfg["ffn"]
    gate = g.op("MatMul", [x, g.weight(f"{p}.gate.weight", [d, f])], scope)
    up = g.op("MatMul", [x, g.weight(f"{p}.up.weight", [d, f])], scope)
    act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate], scope)], scope), up], scope)
    return g.op("MatMul", [act, g.weight(f"{p}.down.weight", [f, d])], scope)


def moe(g, x, cfg, seq, i):
    """samples/moe's GShard top-2 routing (groups of `group` tokens, capacity factor 1.25,
    second choices queued behind first ones) over SwiGLU experts."""
    scope, p = f"/blocks.{i}/mlp", f"blocks.{i}.mlp"
    d, f, e, s = cfg["d"], cfg["ffn"], cfg["experts"], cfg["group"]
    c = capacity(s, e)
    one = lambda dims: g.const(dims)  # noqa: E731
    xg = g.op("Reshape", [x, one([-1, s, d])], scope)  # [b*T/s, s, d]
    gates = g.op("Softmax", [g.op("MatMul", [xg, g.weight(f"{p}.router.weight", [d, e])],
                                  scope)], scope, axis=-1)
    _, top = g.op("TopK", [gates, one([2])], scope, outputs=2, axis=-1)
    onehot = lambda idx, depth: g.op("OneHot", [idx, g.const([depth]),  # noqa: E731
                                                g.const([0.0, 1.0], np.float32)], scope, axis=-1)
    pick = lambda k: g.op("Squeeze", [g.op("Slice", [top, one([k]), one([k + 1]), one([-1])],  # noqa: E731
                                           scope), one([-1])], scope)
    mask1, mask2 = onehot(pick(0), e), onehot(pick(1), e)
    fone = g.const(1.0, np.float32)
    loc1 = g.op("Sub", [g.op("CumSum", [mask1, g.const(1)], scope), fone], scope)
    first = g.op("ReduceSum", [mask1, one([1])], scope, keepdims=1)
    loc2 = g.op("Add", [g.op("Sub", [g.op("CumSum", [mask2, g.const(1)], scope), fone], scope),
                        first], scope)
    cap = g.const(float(c), np.float32)
    keep = lambda m, loc: g.op("Mul", [m, g.op("Cast", [g.op("Less", [loc, cap], scope)], scope,  # noqa: E731
                                                to=TensorProto.FLOAT)], scope)
    mask1, mask2 = keep(mask1, loc1), keep(mask2, loc2)
    lastsum = lambda t: g.op("ReduceSum", [t, one([-1])], scope, keepdims=0)  # noqa: E731
    pos1 = lastsum(g.op("Mul", [loc1, mask1], scope))
    pos2 = lastsum(g.op("Mul", [loc2, mask2], scope))
    gate1 = lastsum(g.op("Mul", [gates, mask1], scope))
    gate2 = lastsum(g.op("Mul", [gates, mask2], scope))
    denom = g.op("Add", [g.op("Add", [gate1, gate2], scope), g.const(1e-9, np.float32)], scope)
    gate1 = g.op("Div", [gate1, denom], scope)
    gate2 = g.op("Div", [gate2, denom], scope)
    unsq = lambda t, axes: g.op("Unsqueeze", [t, one(axes)], scope)  # noqa: E731

    def slot(mask, pos):
        pos_oh = onehot(g.op("Cast", [pos], scope, to=TensorProto.INT64), c)   # [b, s, c]
        return g.op("Mul", [unsq(mask, [-1]), unsq(pos_oh, [2])], scope)      # [b, s, e, c]

    slot1, slot2 = slot(mask1, pos1), slot(mask2, pos2)
    dispatch = g.op("Add", [slot1, slot2], scope)
    combine = g.op("Add", [g.op("Mul", [unsq(gate1, [-1, -2]), slot1], scope),
                           g.op("Mul", [unsq(gate2, [-1, -2]), slot2], scope)], scope)
    expert_in = g.op("Einsum", [dispatch, xg], scope, equation="bsec,bsd->becd")
    w = lambda name, dims: g.weight(f"{p}.{name}", dims)  # noqa: E731
    gate = g.op("Einsum", [expert_in, w("w_gate", [e, d, f])], scope, equation="becd,edh->bech")
    up = g.op("Einsum", [expert_in, w("w_up", [e, d, f])], scope, equation="becd,edh->bech")
    act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate], scope)], scope), up], scope)
    expert_out = g.op("Einsum", [act, w("w_down", [e, f, d])], scope, equation="bech,ehd->becd")
    out = g.op("Einsum", [combine, expert_out], scope, equation="bsec,becd->bsd")
    return g.op("Reshape", [out, one([-1, seq, d])], scope)


def build(cfg, seq, rng=None):
    """The ModelProto (weights external, in Graph.weights) and its Graph."""
    g = Graph(rng)
    d, vocab = cfg["d"], cfg["vocab"]
    embed = g.weight("embed.weight", [vocab, d])
    x = g.op("Gather", [embed, "input_ids"], "/embed", axis=0)
    cos, sin = rope_tables(g, seq, cfg["head_dim"])
    rows = g.op("Range", [g.const(0), g.const(seq), g.const(1)], "/mask")
    causal = g.op("LessOrEqual", [g.op("Unsqueeze", [rows, g.const([0])], "/mask"),
                                  g.op("Unsqueeze", [rows, g.const([1])], "/mask")], "/mask")
    for i in range(cfg["layers"]):
        scope = f"/blocks.{i}"
        h = rms_norm(g, x, g.weight(f"blocks.{i}.input_norm.weight", [d], "ones"), scope)
        x = g.op("Add", [x, attention(g, h, cfg, seq, i, cos, sin, causal)], scope)
        h = rms_norm(g, x, g.weight(f"blocks.{i}.post_norm.weight", [d], "ones"), scope)
        mlp = moe(g, h, cfg, seq, i) if cfg.get("experts") else swiglu(g, h, cfg, i)
        x = g.op("Add", [x, mlp], scope)
    x = rms_norm(g, x, g.weight("norm.weight", [d], "ones"), "/norm")
    if cfg["tie"]:
        head = g.op("Transpose", [embed], "/head", perm=[1, 0])
    else:
        head = g.weight("head.weight", [d, vocab])
    logits = g.op("MatMul", [x, head], "/head")
    flat = g.op("Reshape", [logits, g.const([-1, vocab])], "/loss")
    labels = g.op("Reshape", ["labels", g.const([-1])], "/loss")
    g.op("SoftmaxCrossEntropyLoss", [flat, labels], "/loss", reduction="mean")
    g.nodes[-1].output[0] = "loss"  # the graph's output
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", seq])
           for n in ("input_ids", "labels")]
    graph = helper.make_graph(g.nodes, "decoder", ids,
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="piper bench/decoder_graph.py")
    return model, g


def read_weights(config, seq, path):
    """{name: array} of a model that write() wrote with --weights random."""
    _, g = build(CONFIGS[config], seq)
    data = os.path.join(os.path.dirname(os.path.abspath(path)), "weights.bin")
    return {name: np.fromfile(data, np.float32, int(np.prod(dims)), offset=offset).reshape(dims)
            for offset, dims, _, name in g.weights}


def write(config, seq, path, weights="none", seed=SEED, overrides=None):
    """Writes the model to `path` and its weights.bin beside it; returns the parameter count."""
    cfg = dict(CONFIGS[config], **(overrides or {}))
    rng = np.random.default_rng(seed) if weights == "random" else None
    model, g = build(cfg, seq, rng)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    g.write_weights(os.path.join(folder, "weights.bin"))
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return sum(int(np.prod(dims)) for _, dims, _, _ in g.weights)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="qwen3_8b")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--weights", choices=("none", "random"), default="none",
                        help="none: a sparse weights.bin of the full size, nothing written")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    n = write(args.config, args.seq, args.output, args.weights, args.seed)
    print(f"wrote {args.output}: {args.config}, T={args.seq}, {n} parameters "
          f"({4 * n / 2**30:.2f} GiB float32 in weights.bin)")


if __name__ == "__main__":
    main()
