"""Models beyond the sample, exported here from PyTorch and trained by Piper and
by PyTorch from the same weights on the same data: 3-D inputs (MatMul + Add),
sigmoid and mean pooling, a weight used twice (tied), a frozen buffer, Flatten,
an MSE loss built from Sub/Mul/ReduceMean, Div by a learned scale, an
annotated strategy, a bool input (a mask) fed from a bool .npy, and the
activations with attributes (PReLU, LeakyReLU, Softplus, ELU, SELU, CELU,
Hardsigmoid, Hardswish, ReLU6 and clamp, abs, Mish), and rotary embeddings
(cos, sin) with Softsign, sin, atan and undifferentiated floor, sign, isinf,
isnan and int64 abs and sign. Every step's loss within 1e-4 relative, final weights within 1e-3
relative. PyTorch runs here; no reference numbers are stored."""
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import harness
from harness import Tools

STEPS = 8
GLOBAL_BATCH = 8
SAMPLES = 24
LOSS_RTOL = 1e-4
WEIGHT_RTOL = 1e-3


class Pooled3d(nn.Module):
    """[B, 4, 8] -> Linear on the last dim (MatMul + Add) -> sigmoid -> mean over
    the sequence -> Linear -> cross-entropy."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)
        self.head = nn.Linear(16, 5)

    def forward(self, x, y):
        h = torch.sigmoid(self.proj(x)).mean(dim=1)
        return F.cross_entropy(self.head(h), y)


class TiedWithBuffer(nn.Module):
    """Flatten, a weight used by two layers, a frozen buffer, Div and Sub."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16) * 0.2)
        self.scale = nn.Parameter(torch.full((16,), 2.0))
        self.register_buffer("mask", (torch.arange(16) % 3 != 0).float())
        self.head = nn.Linear(16, 4)

    def forward(self, x, y):
        h = torch.flatten(x, 1)
        h = torch.tanh(h @ self.w.t()) * self.mask
        h = F.relu(h @ self.w) / self.scale - 0.1
        return F.cross_entropy(self.head(h), y, reduction="sum") / x.shape[0]


class Regression(nn.Module):
    """Mean squared error from Sub, Mul and ReduceMean, with a float target."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 12)
        self.fc2 = nn.Linear(12, 3)

    def forward(self, x, t):
        d = self.fc2(torch.relu(self.fc1(x))) - t
        return (d * d).mean()


class MaskedInput(nn.Module):
    """A bool graph input (a mask of features to drop), fed from a bool .npy."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 12)
        self.head = nn.Linear(12, 3)

    def forward(self, x, keep, y):
        x = torch.where(keep, x, torch.zeros_like(x))
        return F.cross_entropy(self.head(torch.relu(self.fc(x))), y)


class Activations(nn.Module):
    """Every activation with attributes, on one hidden layer, summed: PRelu (a learned slope
    per feature), LeakyRelu, Softplus, Elu, Selu, Celu, HardSigmoid, HardSwish, Clip (ReLU6,
    clamp), Abs, and Mish (Softplus, Tanh and Mul); an MSE loss. Not in MODELS, which
    test_precision also trains under PyTorch's bfloat16 autocast: PyTorch 1.13 has no CPU
    bfloat16 kernels for mish or the clamp backward."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.prelu = nn.PReLU(16, init=0.3)
        self.head = nn.Linear(16, 3)

    def forward(self, x, t):
        h = self.fc1(x)
        a = (self.prelu(h) + F.leaky_relu(h, 0.1) + F.softplus(h) + F.elu(h, 0.5)
             + F.selu(h) + F.celu(h, 2.0) + F.hardsigmoid(3 * h) + F.hardswish(4 * h)
             + F.relu6(5 * h) + torch.clamp(h, -0.5, 0.25) + torch.abs(h) + F.mish(h))
        d = self.head(a) - t
        return (d * d).mean()


class RotaryMath(nn.Module):
    """Rotary position embeddings as Llama computes them each call (torch.cos and torch.sin of
    positions times a frozen buffer of frequencies) on a projection of [B, 6, 8] inputs; a
    mixing over positions weighted by the int64 abs and sign of their offsets (T5's relative
    positions); Softsign, sin and atan of the result; floor of the positions, and sign, isinf
    (exported through a Cast to double) and isnan of the input in branches no gradient reaches; mean over positions, a head and an MSE loss. Not
    in MODELS (test_precision's bfloat16 autocast), for the same reason as Activations."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)
        self.softsign = nn.Softsign()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)))

    def forward(self, x, t):
        length = x.shape[1]
        positions = torch.arange(length, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        h = self.proj(x)
        rotated = torch.cat((-h[..., 4:8], h[..., 0:4]), dim=-1)
        h = h * angles.cos() + rotated * angles.sin()
        relative = torch.arange(length)[None, :] - torch.arange(length)[:, None]
        bias = -0.5 * torch.abs(relative).float() + 0.2 * torch.sign(relative).float()
        h = torch.matmul(torch.softmax(bias, dim=-1), h)
        a = self.softsign(h) + torch.sin(3 * h) + 0.5 * torch.atan(2 * h) + 0.1 * torch.sign(x)
        a = a / (torch.floor(positions / 2) + 1)[:, None]
        a = a + torch.isinf(x).float() + torch.isnan(x).float()  # zero for finite data
        d = self.head(a.mean(dim=1)) - t
        return (d * d).mean()


def inputs_for(name, rng):
    if name == "pooled3d":
        return (rng.standard_normal((SAMPLES, 4, 8)).astype(np.float32),
                rng.integers(0, 5, SAMPLES).astype(np.int64))
    if name == "rotary":
        return (rng.standard_normal((SAMPLES, 6, 8)).astype(np.float32),
                rng.standard_normal((SAMPLES, 3)).astype(np.float32))
    if name == "tied":
        return (rng.standard_normal((SAMPLES, 2, 8)).astype(np.float32),
                rng.integers(0, 4, SAMPLES).astype(np.int64))
    return (rng.standard_normal((SAMPLES, 6)).astype(np.float32),
            rng.standard_normal((SAMPLES, 3)).astype(np.float32))


MODELS = {"pooled3d": Pooled3d, "tied": TiedWithBuffer, "regression": Regression}
# Trained here only (see Activations).
OTHER_MODELS = {"activations": Activations, "rotary": RotaryMath}


class VariantsMatchPyTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_variants_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name, optimizer, make_optimizer, **strategy_extra):
        torch.manual_seed(7)
        model = {**MODELS, **OTHER_MODELS}[name]()
        work = os.path.join(self.tmp.name, name + "_" + optimizer["type"])
        harness.train_exported_model_like_pytorch(
            self, work, model, inputs_for(name, np.random.default_rng(5)), optimizer,
            make_optimizer, STEPS, GLOBAL_BATCH, LOSS_RTOL, WEIGHT_RTOL, **strategy_extra)

    def test_pooled3d_adamw(self):
        self.check("pooled3d", {"type": "adamw", "lr": 0.01},
                   lambda p: torch.optim.AdamW(p, lr=0.01))

    def test_tied_weights_and_frozen_buffer_sgd(self):
        self.check("tied", {"type": "sgd", "lr": 0.1, "momentum": 0.5, "dampening": 0.1},
                   lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5, dampening=0.1),
                   frozen=["mask"])

    def test_regression_with_annotations(self):
        self.check("regression", {"type": "adamw", "lr": 0.02, "weight_decay": 0.1},
                   lambda p: torch.optim.AdamW(p, lr=0.02, weight_decay=0.1),
                   annotations=[{"match": "/fc1/*", "tags": {"LAYER": 0}},
                                {"match": "/fc2/*", "tags": {"LAYER": 1}}],
                   directives=[{"op": "place", "filter": {"LAYER": 1}, "devices": [0]}])

    def test_activations_sgd(self):
        self.check("activations", {"type": "sgd", "lr": 0.005},
                   lambda p: torch.optim.SGD(p, lr=0.005))

    def test_rotary_and_unary_math_adamw(self):
        self.check("rotary", {"type": "adamw", "lr": 0.01},
                   lambda p: torch.optim.AdamW(p, lr=0.01), frozen=["inv_freq"])

    def test_bool_input(self):
        torch.manual_seed(7)
        model = MaskedInput()
        rng = np.random.default_rng(5)
        inputs = {"x": rng.standard_normal((SAMPLES, 6)).astype(np.float32),
                  "keep": rng.random((SAMPLES, 6)) > 0.3,
                  "y": rng.integers(0, 3, SAMPLES).astype(np.int64)}
        work = os.path.join(self.tmp.name, "bool_input")
        os.makedirs(os.path.join(work, "data"))
        for name, value in inputs.items():
            np.save(os.path.join(work, "data", name + ".npy"), value)
        model_path = os.path.join(work, "model.onnx")
        torch.onnx.export(model, tuple(torch.from_numpy(v[:2]) for v in inputs.values()),
                          model_path, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=list(inputs), output_names=["loss"],
                          dynamic_axes={name: {0: "batch"} for name in inputs})
        strategy = harness.write_json(os.path.join(work, "strategy.json"),
                                      harness.strategy(GLOBAL_BATCH, {"type": "sgd", "lr": 0.1}))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, model_path, strategy, "-o", plans])
        metrics = os.path.join(work, "metrics.jsonl")
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", STEPS,
                        "--data", os.path.join(work, "data"), "--metrics", metrics])
        losses = [record["loss"] for record in harness.read_metrics(metrics)]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step, got in enumerate(losses):
            rows = (step * GLOBAL_BATCH + np.arange(GLOBAL_BATCH)) % SAMPLES
            loss = model(*(torch.from_numpy(v[rows]) for v in inputs.values()))
            self.assertLessEqual(abs(got - loss.item()) / loss.item(), LOSS_RTOL,
                                 f"step {step}: piper {got!r}, pytorch {loss.item()!r}")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        self.assertEqual(len(losses), STEPS)
        # Without --data, synthetic masks train too.
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", 2])


if __name__ == "__main__":
    harness.main()
