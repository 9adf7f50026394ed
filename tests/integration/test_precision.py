"""The strategy's `precision` against PyTorch. samples/gpt and samples/moe
trained 50 AdamW steps with "bf16" track PyTorch's CPU autocast to bfloat16 on
the same weights and rows, and the float32 run within 2e-2 relative per step;
the saved weights are float32 master weights, and activations take less
memory. bf16 under data parallelism with ZeRO-3, and under a 1F1B pipeline of
two microbatches (bfloat16 activations cross ranks), trains one process's
weights bit for bit; with four microbatches what one process trains within
1e-4 (loss) and 5e-4 (weights). "tf32" marks the
matrix products, which the CPU computes exactly: its losses equal float32's.
PyTorch runs here; no reference numbers are stored."""
import json
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import harness
import test_data_parallel as dp
import test_samples_vs_pytorch as samples
import test_variants_vs_pytorch as variants
from harness import Tools

STEPS = 50
AUTOCAST_RTOL = 1e-2   # Piper bf16 vs PyTorch bf16 autocast, per step
FLOAT32_RTOL = 2e-2    # Piper bf16 vs Piper float32, per step
# A bf16 strategy vs one bf16 process: (loss, all final weights). Replicas sum their halves of
# the batch rows as one process's halves (docs/strategy.md, Precision), and so do two
# microbatches: data parallelism and a pipeline of two microbatches give one process's weights
# bit for bit. The printed loss is the mean of the replicas' (or microbatches') means, each
# rounded to float, where one process rounds one mean: a float rounding apart (1.2e-7 and 5.8e-8
# here). A pipeline of four microbatches adds their weight gradients one after the other where
# one process adds the halves of its rows pairwise, which bfloat16 rounding and AdamW carry on:
# 9e-6 and 3e-5, 3.2e-5 and 1.1e-4, 3e-8 and 2e-8 here as the kernels' roundings changed.
MEAN_ROUNDING_RTOL = 3e-7
EXACT_RTOL = (MEAN_ROUNDING_RTOL, 0.0)
FOUR_MICROBATCHES_RTOL = (1e-4, 5e-4)


def memory(plans):
    dumped = harness.run_ok([Tools.dump, "--json", os.path.join(plans, "rank0.plan")])
    return {k: int(v) for k, v in json.loads(dumped.stdout)["memory"].items()}


def worst_relative(actual, expected):
    return max(abs(a - e) / abs(e) for a, e in zip(actual, expected))


class PrecisionMatchesPyTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_precision_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train_piper(self, work, name, precision, data):
        strategy = harness.write_json(
            os.path.join(work, f"{precision}.json"),
            harness.strategy(samples.GLOBAL_BATCH, samples.OPTIMIZER, frozen=samples.FROZEN,
                             precision=precision))
        plans = os.path.join(work, f"plans_{precision}")
        planned = harness.run_ok([Tools.plan, Tools.sample(name, "model.onnx"), strategy, "-o",
                                  plans])
        self.assertEqual("precision bf16:" in planned.stdout, precision == "bf16", planned.stdout)
        metrics = os.path.join(work, f"{precision}.jsonl")
        trained = os.path.join(work, f"{precision}.onnx")
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps",
                        STEPS, "--data", data, "--metrics", metrics, "--save-onnx", trained])
        return plans, [r["loss"] for r in harness.read_metrics(metrics)], dp.weights_of(trained)

    def train_pytorch_autocast(self, name, idx, targets):
        export = harness.sample_module(name)
        model = export.load_initializers(export.build_model(), Tools.sample(name, "model.onnx"))
        return harness.train_like_piper(model, (idx, targets), samples.make_optimizer, STEPS,
                                        samples.GLOBAL_BATCH, autocast=True)

    def check_bf16(self, name):
        work = os.path.join(self.tmp.name, name)
        data = os.path.join(work, "data")
        os.makedirs(data)
        gpt = getattr(harness.sample_module(name), "gpt", harness.sample_module(name))
        idx, targets = samples.make_data(data, gpt.VOCAB, gpt.BLOCK)

        plans, bf16, weights = self.train_piper(work, name, "bf16", data)
        fp32_plans, fp32, _ = self.train_piper(work, name, "fp32", data)
        autocast = self.train_pytorch_autocast(name, idx, targets)

        for step in (0, 1, STEPS // 2, STEPS - 1):
            print(f"[{name}] step {step:2d}  piper bf16 {bf16[step]:.6f}  "
                  f"pytorch autocast {autocast[step]:.6f}  piper fp32 {fp32[step]:.6f}")
        to_autocast, to_fp32 = worst_relative(bf16, autocast), worst_relative(bf16, fp32)
        print(f"[{name}] worst per-step loss difference: to PyTorch autocast {to_autocast:.2e}, "
              f"to float32 {to_fp32:.2e}; PyTorch autocast to float32 "
              f"{worst_relative(autocast, fp32):.2e}")
        self.assertEqual(len(bf16), STEPS)
        self.assertLessEqual(to_autocast, AUTOCAST_RTOL)
        self.assertLessEqual(to_fp32, FLOAT32_RTOL)
        self.assertGreater(to_fp32, 0, "bf16 computed exactly what float32 did: no casts?")
        self.assertLess(bf16[-1], bf16[0], f"[{name}] bf16 did not train")
        for param, value in weights.items():
            self.assertEqual(value.dtype, np.float32, f"{param} is not a float32 master weight")

        bf16_memory, fp32_memory = memory(plans), memory(fp32_plans)
        print(f"[{name}] activations at peak: bf16 {bf16_memory['activation_bytes']} B, "
              f"fp32 {fp32_memory['activation_bytes']} B")
        self.assertLess(bf16_memory["activation_bytes"], 0.9 * fp32_memory["activation_bytes"])
        for kind in ("parameter_bytes", "gradient_bytes", "optimizer_bytes"):
            self.assertEqual(bf16_memory[kind], fp32_memory[kind], kind)

        dump = harness.run_ok([Tools.dump, os.path.join(plans, "rank0.plan")]).stdout
        tensors = [line.split() for line in dump.splitlines() if " bf16[" in line]
        self.assertTrue(any("activation" in row for row in tensors),
                        "no bfloat16 activations in the plan")
        self.assertFalse(any("parameter" in row or "optimizer_state" in row or "gradient" in row
                             for row in tensors),
                         "parameters, gradients and optimizer state must stay float32")

    def test_gpt_bf16(self):
        self.check_bf16("gpt")

    def test_moe_bf16(self):
        self.check_bf16("moe")

    def test_tf32_is_exact_float32_on_cpu(self):
        work = os.path.join(self.tmp.name, "tf32")
        data = os.path.join(work, "data")
        os.makedirs(data)
        samples.make_data(data, 64, 16)
        plans, tf32, _ = self.train_piper(work, "gpt", "tf32", data)
        _, fp32, _ = self.train_piper(work, "gpt", "fp32", data)
        self.assertEqual(tf32, fp32)
        dump = harness.run_ok([Tools.dump, os.path.join(plans, "rank0.plan")]).stdout
        self.assertIn("tf32=1", dump.replace(" ", ""))


class Bf16StrategiesMatchOneProcess(unittest.TestCase):
    """samples/gpt in bf16: ZeRO-3 over two ranks and a two-stage 1F1B pipeline of two and of
    four microbatches against one process in bf16, six steps."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_precision_dp_")
        cls.data = dp.gpt_data(os.path.join(cls.tmp.name, "data"))
        cls.reference = cls.train("single", [], launch=False)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def train(cls, label, directives, launch, annotations=()):
        work = os.path.join(cls.tmp.name, label)
        os.makedirs(work)
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(dp.GLOBAL_BATCH, dp.OPTIMIZER, frozen=["*mask*"], precision="bf16",
                             annotations=list(annotations), directives=directives))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, Tools.sample("gpt", "model.onnx"), strategy, "-o", plans])
        return dp.train_plans(work, plans, cls.data, launch)

    def check(self, label, directives, tolerances, annotations=()):
        loss_rtol, weight_rtol = tolerances
        losses, weights = self.train(label, directives, launch=True, annotations=annotations)
        want_losses, want_weights = self.reference
        print(f"[{label}] worst loss difference {worst_relative(losses, want_losses):.2e}")
        self.assertEqual(len(losses), len(want_losses))
        self.assertLessEqual(worst_relative(losses, want_losses), loss_rtol)
        # AdamW turns a rounding flip in a small gradient into a full-size update, so
        # near-zero weights (fresh LayerNorm biases) differ more than the model does.
        params = sorted(want_weights)
        error = samples.relative_error(np.concatenate([weights[p].ravel() for p in params]),
                                       np.concatenate([want_weights[p].ravel() for p in params]))
        print(f"[{label}] all weights: rel {error:.2e}")
        self.assertLessEqual(error, weight_rtol)

    def test_zero3_two_ranks(self):
        self.check("zero3", [{"op": "zero", "stage": 3, "devices": [0, 1]}], EXACT_RTOL)

    def test_1f1b_two_stages(self):
        self.check_1f1b(2, EXACT_RTOL)

    def test_1f1b_four_microbatches(self):
        self.check_1f1b(4, FOUR_MICROBATCHES_RTOL)

    def check_1f1b(self, microbatches, tolerances):
        self.check(f"1f1b_{microbatches}mb",
                   [{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1],
                     "num_microbatches": microbatches}], tolerances,
                   annotations=[{"match": "/blocks.0/*", "tags": {"PP": 0}},
                                {"match": "/blocks.1/*", "tags": {"PP": 1}}])


class RmsNormSilu(nn.Module):
    """RMSNorm written out (Pow, ReduceMean, Add, Sqrt, Div) and SiLU."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 24)
        self.gain = nn.Parameter(torch.ones(24))
        self.fc2 = nn.Linear(24, 5)

    def forward(self, x, y):
        h = self.fc1(x)
        h = h / torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * self.gain
        return F.cross_entropy(self.fc2(F.silu(h)), y)


class TiedLanguageModel(nn.Module):
    """An embedding whose weight is also the output projection, a LayerNorm, a
    tanh-approximated GELU and a cross-entropy over [B*T, V] logits."""

    def __init__(self, vocab=20, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.fc = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, idx, targets):
        # The LayerNorm reads the float32 embedding: PyTorch 1.13's CPU autocast has no
        # LayerNorm of a bfloat16 input with float32 weights.
        h = F.gelu(self.fc(self.norm(self.embed(idx))), approximate="tanh")
        logits = h @ self.embed.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class Bf16VariantsMatchPyTorchAutocast(unittest.TestCase):
    """Models beyond the samples, exported here, trained in bf16 by Piper and
    under CPU autocast by PyTorch from the same weights on the same rows."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_precision_variants_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name, model, inputs, **strategy_extra):
        work = os.path.join(self.tmp.name, name)
        model_path = harness.export_two_input_model(model, inputs, work)
        optimizer = {"type": "adamw", "lr": 0.01}
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(variants.GLOBAL_BATCH, optimizer, precision="bf16",
                             **strategy_extra))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, model_path, strategy, "-o", plans])
        metrics = os.path.join(work, "metrics.jsonl")
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps",
                        variants.STEPS, "--data", os.path.join(work, "data"),
                        "--metrics", metrics])
        losses = [r["loss"] for r in harness.read_metrics(metrics)]
        expected = harness.train_like_piper(
            model, inputs, lambda p: torch.optim.AdamW(p, lr=0.01), variants.STEPS,
            variants.GLOBAL_BATCH, autocast=True)
        print(f"[{name}] piper bf16 {losses[0]:.5f} -> {losses[-1]:.5f}, pytorch autocast "
              f"{expected[0]:.5f} -> {expected[-1]:.5f}; worst per-step difference "
              f"{worst_relative(losses, expected):.2e}")
        self.assertEqual(len(losses), variants.STEPS)
        self.assertLessEqual(worst_relative(losses, expected), AUTOCAST_RTOL)

    def test_exported_variants(self):
        for name, make in variants.MODELS.items():
            with self.subTest(name):
                torch.manual_seed(7)
                self.check(name, make(), variants.inputs_for(name, np.random.default_rng(5)),
                           frozen=["mask"] if name == "tied" else [])

    def test_rms_norm_and_silu(self):
        torch.manual_seed(3)
        rng = np.random.default_rng(3)
        self.check("rms_silu", RmsNormSilu(),
                   (rng.standard_normal((24, 8)).astype(np.float32),
                    rng.integers(0, 5, 24).astype(np.int64)))

    def test_tied_embedding_language_model(self):
        torch.manual_seed(4)
        rng = np.random.default_rng(4)
        tokens = rng.integers(0, 20, (24, 7)).astype(np.int64)
        self.check("tied_lm", TiedLanguageModel(), (tokens[:, :-1].copy(), tokens[:, 1:].copy()))


if __name__ == "__main__":
    harness.main()
