"""PyTorch's forward of bench/decoder_graph.py's model, written from the layers' definitions
(HF's Qwen3 attention and MLP, samples/moe's GShard routing), not from the ONNX graph: the
loss of a batch, for checking the graph (bench/paper_eval.py --toy)."""
import math

import torch
import torch.nn.functional as F

import decoder_graph


def rms_norm(x, weight):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + decoder_graph.RMS_EPS))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def attention(x, w, p, cfg):
    b, t, _ = x.shape
    h, kv, hd = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    split = lambda y, n: y.view(b, t, n, hd).transpose(1, 2)  # noqa: E731
    q = rms_norm(split(x @ w[f"{p}.q.weight"], h), w[f"{p}.q_norm.weight"])
    k = rms_norm(split(x @ w[f"{p}.k.weight"], kv), w[f"{p}.k_norm.weight"])
    v = split(x @ w[f"{p}.v.weight"], kv)
    inv_freq = 1.0 / decoder_graph.ROPE_THETA ** (torch.arange(0, hd, 2).float() / hd)
    freqs = torch.outer(torch.arange(t).float(), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    q = q * emb.cos() + rotate_half(q) * emb.sin()
    k = k * emb.cos() + rotate_half(k) * emb.sin()
    k = k.repeat_interleave(h // kv, dim=1)
    v = v.repeat_interleave(h // kv, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    return (probs @ v).transpose(1, 2).reshape(b, t, h * hd) @ w[f"{p}.o.weight"]


def swiglu(x, gate, up, down):
    return (F.silu(x @ gate) * (x @ up)) @ down


def moe(x, w, p, cfg):
    b, t, d = x.shape
    e, s = cfg["experts"], cfg["group"]
    c = decoder_graph.capacity(s, e)
    x = x.reshape(-1, s, d)
    gates = (x @ w[f"{p}.router.weight"]).softmax(-1)
    top = gates.topk(2, dim=-1).indices
    mask1, mask2 = (F.one_hot(top[..., k], e).float() for k in (0, 1))
    loc1 = mask1.cumsum(1) - 1
    loc2 = mask2.cumsum(1) - 1 + mask1.sum(1, keepdim=True)
    mask1, mask2 = mask1 * (loc1 < c), mask2 * (loc2 < c)
    gate1, gate2 = (gates * mask1).sum(-1), (gates * mask2).sum(-1)
    denom = gate1 + gate2 + 1e-9
    slot1 = mask1[..., None] * F.one_hot((loc1 * mask1).sum(-1).long(), c).float()[:, :, None]
    slot2 = mask2[..., None] * F.one_hot((loc2 * mask2).sum(-1).long(), c).float()[:, :, None]
    combine = (gate1 / denom)[..., None, None] * slot1 + (gate2 / denom)[..., None, None] * slot2
    expert_in = torch.einsum("bsec,bsd->becd", slot1 + slot2, x)
    out = torch.stack([swiglu(expert_in[:, i], w[f"{p}.w_gate"][i], w[f"{p}.w_up"][i],
                              w[f"{p}.w_down"][i]) for i in range(e)], dim=1)
    return torch.einsum("bsec,becd->bsd", combine, out).reshape(b, t, d)


def loss(config, weights, input_ids, labels):
    cfg = decoder_graph.CONFIGS[config]
    w = {name: torch.from_numpy(value) for name, value in weights.items()}
    x = w["embed.weight"][torch.from_numpy(input_ids)]
    for i in range(cfg["layers"]):
        p = f"blocks.{i}"
        x = x + attention(rms_norm(x, w[f"{p}.input_norm.weight"]), w, f"{p}.attn", cfg)
        h = rms_norm(x, w[f"{p}.post_norm.weight"])
        if cfg.get("experts"):
            x = x + moe(h, w, f"{p}.mlp", cfg)
        else:
            x = x + swiglu(h, w[f"{p}.mlp.gate.weight"], w[f"{p}.mlp.up.weight"],
                           w[f"{p}.mlp.down.weight"])
    x = rms_norm(x, w["norm.weight"])
    logits = x @ (w["embed.weight"].T if cfg["tie"] else w["head.weight"])
    return float(F.cross_entropy(logits.reshape(-1, cfg["vocab"]),
                                 torch.from_numpy(labels).reshape(-1)))
