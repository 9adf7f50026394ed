"""What the placement tests (tensor and expert parallelism) share: training plans for a few
steps, through piper-launch or on rank 0 alone, and checking a run against the single-process
run of the same model and global batch."""
import json
import os
import tempfile

import numpy as np

import harness
import test_data_parallel as dp
from harness import Tools

LOSS_RTOL = 1e-5
WEIGHT_RTOL = 1e-4
# In bf16 each member rounds its partial results to bf16 before a collective adds them (as
# Megatron's bf16 all-reduce does), where one process rounds the whole once: the runs agree to
# bf16's rounding, not to float32's.
BF16_LOSS_RTOL = 1e-3
BF16_WEIGHT_RTOL = 1e-2


def tolerances(precision):
    """(loss, weight) relative tolerances against one process."""
    return (LOSS_RTOL, WEIGHT_RTOL) if precision == "fp32" else (BF16_LOSS_RTOL, BF16_WEIGHT_RTOL)


def relative_error(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def train(work, plans, data, steps, launch):
    """`steps` steps from `plans` (every rank through piper-launch, or rank 0 alone); each
    step's loss and the saved weights (--save-onnx gathers split tensors whole)."""
    records, weights = dp.train_plans_metrics(work, plans, data, launch, steps)
    return [record["loss"] for record in records], weights


class SplitModels:
    """A test class's plumbing: a temporary folder of token data and models, the single-process
    references, plans of its strategies and their runs. setUpClass calls `set_up`; a model the
    class names is a sample (`samples` lists them) or exported by the class's `export(model,
    path)` on first use."""
    steps = 10
    global_batch = 8
    optimizer = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
    frozen = ["*mask*"]  # the causal-mask buffers
    samples = ()

    @classmethod
    def set_up(cls, prefix, rows, vocab, positions, seed):
        """`tmp`, `data` (token rows and their shifted targets, see harness) and `idx`."""
        import torch

        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix=prefix)
        cls.data = os.path.join(cls.tmp.name, "data")
        cls.idx = harness.save_token_sequences(cls.data, rows, vocab, positions, seed=seed)
        cls.model_paths = {name: Tools.sample(name, "model.onnx") for name in cls.samples}
        cls.references = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def model_path(cls, model):
        if model not in cls.model_paths:
            path = os.path.join(cls.tmp.name, f"{model}.onnx")
            cls.export(model, path)
            cls.model_paths[model] = path
        return cls.model_paths[model]

    @classmethod
    def plan(cls, model, name, extra):
        work = os.path.join(cls.tmp.name, f"{model}_{name}")
        plans, printed = harness.plan_strategy(
            work, cls.model_path(model),
            harness.strategy(cls.global_batch, cls.optimizer, frozen=cls.frozen, **extra))
        with open(os.path.join(work, "piper-plan.txt"), "w") as f:
            f.write(printed.stdout)
        return work, plans

    @classmethod
    def train(cls, work, plans, launch):
        return train(work, plans, cls.data, cls.steps, launch)

    @classmethod
    def reference(cls, model, precision="fp32"):
        """The single-process run of `model` with the same global batch."""
        key = (model, precision)
        if key not in cls.references:
            work, plans = cls.plan(model, f"single_{precision}", {"precision": precision})
            cls.references[key] = cls.train(work, plans, launch=False)
        return cls.references[key]

    @staticmethod
    def dump(plans, rank=0):
        path = os.path.join(plans, f"rank{rank}.plan")
        return json.loads(harness.run_ok([Tools.dump, "--json", path]).stdout)


def assert_matches(test, name, run, reference, steps, precision="fp32"):
    """Every step's loss and every final weight of `run` within the precision's tolerance of
    `reference`, both (losses, weights)."""
    (losses, weights), (want_losses, want_weights) = run, reference
    loss_rtol, weight_rtol = tolerances(precision)
    test.assertEqual(len(losses), steps, name)
    largest = {"loss": 0.0, "weight": 0.0}
    for step, (got, want) in enumerate(zip(losses, want_losses)):
        largest["loss"] = max(largest["loss"], abs(got - want) / abs(want))
        test.assertLessEqual(abs(got - want) / abs(want), loss_rtol,
                             f"[{name}] step {step}: {got!r} vs one process {want!r}")
    test.assertEqual(sorted(weights), sorted(want_weights), name)
    for param, want in want_weights.items():
        test.assertEqual(weights[param].shape, want.shape,
                         f"[{name}] {param}: --save-onnx must gather the whole tensor")
        if precision == "fp32":
            error = relative_error(weights[param], want)
            largest["weight"] = max(largest["weight"], error)
            test.assertLessEqual(error, weight_rtol, f"[{name}] final {param}: {error:.2e}")
    if precision != "fp32":
        # AdamW moves a parameter near zero (a bias) by lr whatever its gradient's size, so
        # bf16's rounding shows in small tensors first: bf16 compares the whole model.
        names = sorted(want_weights)
        error = relative_error(np.concatenate([weights[n].ravel() for n in names]),
                               np.concatenate([want_weights[n].ravel() for n in names]))
        largest["weight"] = error
        test.assertLessEqual(error, weight_rtol, f"[{name}] final weights: {error:.2e}")
    print(f"[{name}] losses match one process to {loss_rtol} (largest {largest['loss']:.1e}), "
          f"weights to {weight_rtol} (largest {largest['weight']:.1e})")
