"""samples/gpt and samples/moe trained by piper-plan + piper-run match PyTorch
training the same exported weights (the committed model.onnx, loaded into the
sample's own module) on the same data: 50 AdamW steps, every step's loss within
1e-4 relative, every final weight and every weight's update (final - initial)
within 1e-3 relative (norm of the difference over norm of the reference); the
frozen causal masks do not change.
PyTorch runs here; no reference numbers are stored."""
import math
import os
import tempfile
import time
import unittest

import numpy as np
import onnx
import torch
from onnx import numpy_helper

import harness
from harness import Tools

STEPS = 50
GLOBAL_BATCH = 4
SAMPLES = 32       # sequences; step s uses rows (s*G + i) mod N
LOSS_RTOL = 1e-4
WEIGHT_RTOL = 1e-3
OPTIMIZER = {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01}
FROZEN = ["*mask*"]   # the causal-mask buffers


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)


def relative_error(actual, expected):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def make_data(directory, vocab, block):
    """Learnable token data: each row counts up by a row-specific stride, the
    target is the next token."""
    rng = np.random.default_rng(4321)
    start = rng.integers(0, vocab, size=(SAMPLES, 1))
    stride = rng.integers(1, 4, size=(SAMPLES, 1))
    seq = (start + stride * np.arange(block + 1)) % vocab
    idx = seq[:, :-1].astype(np.int64)
    targets = seq[:, 1:].astype(np.int64)
    np.save(os.path.join(directory, "idx.npy"), idx)
    np.save(os.path.join(directory, "targets.npy"), targets)
    return idx, targets


class SamplesMatchPyTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_samples_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name):
        started = time.monotonic()
        export = harness.sample_module(name)
        model_path = Tools.sample(name, "model.onnx")
        model = export.load_initializers(export.build_model(), model_path)
        gpt = getattr(export, "gpt", export)
        work = os.path.join(self.tmp.name, name)
        data = os.path.join(work, "data")
        os.makedirs(data)
        idx, targets = make_data(data, gpt.VOCAB, gpt.BLOCK)

        # Piper
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(GLOBAL_BATCH, OPTIMIZER, frozen=FROZEN))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, model_path, strategy, "-o", plans])
        metrics = os.path.join(work, "metrics.jsonl")
        trained = os.path.join(work, "trained.onnx")
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"),
                        "--steps", STEPS, "--data", data, "--metrics", metrics,
                        "--save-onnx", trained])
        losses = [record["loss"] for record in harness.read_metrics(metrics)]

        # PyTorch, same weights, same rows
        optimizer = make_optimizer(model.parameters())
        expected = []
        for step in range(STEPS):
            rows = (step * GLOBAL_BATCH + np.arange(GLOBAL_BATCH)) % SAMPLES
            loss = model(torch.from_numpy(idx[rows]), torch.from_numpy(targets[rows]))
            expected.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        self.assertEqual(len(losses), STEPS, f"[{name}] {STEPS} metrics lines expected")
        errors = [abs(got - want) / abs(want) for got, want in zip(losses, expected)]
        for step in (0, 1, STEPS // 2, STEPS - 1):
            print(f"[{name}] step {step:2d}  piper {losses[step]:.7f}  "
                  f"pytorch {expected[step]:.7f}  rel {errors[step]:.2e}")
        worst_step = int(np.argmax(errors))
        print(f"[{name}] worst loss error {errors[worst_step]:.2e} at step {worst_step}")
        for step, (got, want) in enumerate(zip(losses, expected)):
            self.assertTrue(math.isfinite(got), f"[{name}] step {step}: loss {got}")
            self.assertLessEqual(abs(got - want) / abs(want), LOSS_RTOL,
                                 f"[{name}] step {step}: piper {got!r}, pytorch {want!r}")
        self.assertLess(losses[-1], losses[0], f"[{name}] loss did not fall")

        saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(trained).graph.initializer}
        initial = {t.name: numpy_helper.to_array(t)
                   for t in onnx.load(model_path).graph.initializer}
        weight_errors, update_errors = {}, {}
        for param, value in model.named_parameters():
            want = value.detach().numpy()
            self.assertIn(param, saved, f"[{name}] {trained} has no initializer {param!r}")
            self.assertEqual(saved[param].shape, want.shape, param)
            weight_errors[param] = relative_error(saved[param], want)
            update_errors[param] = relative_error(saved[param] - initial[param],
                                                  want - initial[param])
        worst = max(weight_errors, key=weight_errors.get)
        worst_update = max(update_errors, key=update_errors.get)
        print(f"[{name}] final weights: worst {worst} rel {weight_errors[worst]:.2e}; "
              f"updates (final - initial): worst {worst_update} "
              f"rel {update_errors[worst_update]:.2e}")
        print(f"[{name}] weight/update rel: " + ", ".join(
            f"{p} {e:.1e}/{update_errors[p]:.1e}" for p, e in weight_errors.items()))
        for param, error in weight_errors.items():
            self.assertLessEqual(error, WEIGHT_RTOL, f"[{name}] final {param}: rel {error:.3e}")
        for param, error in update_errors.items():
            self.assertLessEqual(error, WEIGHT_RTOL,
                                 f"[{name}] update of {param}: rel {error:.3e}")
        for buffer, value in model.named_buffers():
            np.testing.assert_array_equal(saved[buffer], value.numpy(),
                                          f"[{name}] frozen buffer {buffer} changed")
        print(f"[{name}] {time.monotonic() - started:.1f} s")

    def test_gpt(self):
        self.check("gpt")

    def test_moe(self):
        self.check("moe")


if __name__ == "__main__":
    harness.main()
