"""What the placement tests (tensor and expert parallelism) share: training plans for a few
steps, through piper-launch or on rank 0 alone, and checking a run against the single-process
run of the same model and global batch."""
import json
import os
import shutil
import tempfile

import numpy as np

import harness
import test_data_parallel as dp
from harness import Tools

LOSS_RTOL = 1e-5
WEIGHT_RTOL = 1e-4
# bf16 (docs/strategy.md, "Precision"): a partial sum is added in float32 and rounded once, as
# one process rounds its whole product, all-to-alls move values unchanged, the CPU sums each
# bfloat16 product in an order fixed by K alone (engine/cpu/split_invariant_gemm.h) and the rows
# of a norm's or bias's gradient, of a sum over the batch and of the embedding's scatter-add in
# an order that halving the rows does not change (engine/cpu/split_invariant_sum.h), so tensor,
# sequence, data and expert parallelism over two members compute one process's weights and meet
# LOSS_RTOL and WEIGHT_RTOL over a whole run. Vocabulary parallelism still adds the softmax's
# sums over the vocabulary's halves in another order than one process's row of the whole
# vocabulary: within its last bit of a rounding boundary such a sum rounds to the other
# bfloat16 neighbour, and that 2^-8 step grows through the next roundings and AdamW's updates.
# Each step trained from one process's state still matches one process's step within LOSS_RTOL
# and WEIGHT_RTOL (SplitModels.each_step); whole runs of that layout within these:
BF16_DRIFT_RTOL = (1e-3, 1e-2)  # (loss, whole model's weights)


def tolerances(precision, drift=None):
    """(loss, weight) relative tolerances against one process over a run: float32's, or for a
    bf16 run the `drift` its caller allows where it gives one."""
    return drift if precision != "fp32" and drift is not None else (LOSS_RTOL, WEIGHT_RTOL)


def relative_error(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def train(work, plans, data, steps, launch, more_flags=()):
    """`steps` steps from `plans` (every rank through piper-launch, or rank 0 alone); each
    step's loss and the saved weights (--save-onnx gathers split tensors whole)."""
    records, weights = dp.train_plans_metrics(work, plans, data, launch, steps, more_flags)
    return [record["loss"] for record in records], weights


def whole_model_error(weights, want_weights):
    names = sorted(want_weights)
    return relative_error(np.concatenate([weights[n].ravel() for n in names]),
                          np.concatenate([want_weights[n].ravel() for n in names]))


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
    def train(cls, work, plans, launch, more_flags=()):
        return train(work, plans, cls.data, cls.steps, launch, more_flags)

    @classmethod
    def single(cls, model, precision):
        """The single-process plans of `model` (work folder, plans), planned once."""
        key = (model, precision, "plans")
        if key not in cls.references:
            cls.references[key] = cls.plan(model, f"single_{precision}", {"precision": precision})
        return cls.references[key]

    @classmethod
    def reference(cls, model, precision="fp32"):
        """The single-process run of `model` with the same global batch."""
        key = (model, precision)
        if key not in cls.references:
            work, plans = cls.single(model, precision)
            cls.references[key] = cls.train(work, plans, launch=False)
        return cls.references[key]

    @classmethod
    def each_step(cls, model, precision, work, plans, launch=True):
        """Every step s trained alone from one process's state after s steps (its checkpoint;
        the initial weights for s = 0) by `plans` and by one process: per step, both runs'
        (loss, weights after the step)."""
        key = (model, precision, "each step")
        if key not in cls.references:
            single_work, single_plans = cls.single(model, precision)
            checkpoints = os.path.join(single_work, "checkpoints")
            cls.train(single_work, single_plans, launch=False,
                      more_flags=["--checkpoint-dir", checkpoints, "--save-every", 1])
            cls.references[key] = checkpoints, [
                cls.train_step(single_work, single_plans, False, step, checkpoints)
                for step in range(cls.steps)]
        checkpoints, references = cls.references[key]
        return [(cls.train_step(work, plans, launch, step, checkpoints), references[step])
                for step in range(cls.steps)]

    @classmethod
    def train_step(cls, work, plans, launch, step, checkpoints):
        """Step `step` of `plans` from one process's checkpoint of it: (loss, weights)."""
        run = os.path.join(work, f"step{step}")
        shutil.rmtree(run, ignore_errors=True)
        os.makedirs(run)
        flags = []
        if step > 0:
            folder = f"step-{step:06d}"
            shutil.copytree(os.path.join(checkpoints, folder), os.path.join(run, "from", folder))
            flags = ["--checkpoint-dir", os.path.join(run, "from"), "--resume"]
        records, weights = dp.train_plans_metrics(run, plans, cls.data, launch, step + 1, flags)
        assert [r["step"] for r in records] == [step + 1], records
        return records[0]["loss"], weights

    @staticmethod
    def dump(plans, rank=0):
        path = os.path.join(plans, f"rank{rank}.plan")
        return json.loads(harness.run_ok([Tools.dump, "--json", path]).stdout)


def assert_matches(test, name, run, reference, steps, precision="fp32", drift=None,
                   weight_rtol=None):
    """Every step's loss and every final weight of `run` within the precision's tolerance of
    `reference`, both (losses, weights); bf16 runs within `drift` where given (the whole model's
    weights), else as float32 runs; `weight_rtol`, where given, replaces the float32 weight
    tolerance (the caller says why)."""
    (losses, weights), (want_losses, want_weights) = run, reference
    loss_rtol, default_weight_rtol = tolerances(precision, drift)
    weight_rtol = default_weight_rtol if weight_rtol is None else weight_rtol
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
        if precision == "fp32" or drift is None:
            error = relative_error(weights[param], want)
            largest["weight"] = max(largest["weight"], error)
            test.assertLessEqual(error, weight_rtol, f"[{name}] final {param}: {error:.2e}")
    if precision != "fp32" and drift is not None:
        # AdamW moves a parameter near zero (a bias) by lr whatever its gradient's size, so
        # bf16's rounding shows in small tensors first: bf16 compares the whole model.
        error = whole_model_error(weights, want_weights)
        largest["weight"] = error
        test.assertLessEqual(error, weight_rtol, f"[{name}] final weights: {error:.2e}")
    print(f"[{name}] losses match one process to {loss_rtol} (largest {largest['loss']:.1e}), "
          f"weights to {weight_rtol} (largest {largest['weight']:.1e})")


def assert_each_step_matches(test, name, steps):
    """Each step trained from one process's state (SplitModels.each_step): its loss within
    LOSS_RTOL of one process's and the whole model after it within WEIGHT_RTOL (bf16 compares
    the whole model, as assert_matches does)."""
    largest = {"loss": 0.0, "weight": 0.0}
    for step, ((loss, weights), (want_loss, want_weights)) in enumerate(steps):
        loss_error = abs(loss - want_loss) / abs(want_loss)
        weight_error = whole_model_error(weights, want_weights)
        test.assertLessEqual(loss_error, LOSS_RTOL,
                             f"[{name}] step {step} from one process's state: {loss!r} vs "
                             f"{want_loss!r}")
        test.assertLessEqual(weight_error, WEIGHT_RTOL,
                             f"[{name}] weights after step {step} from one process's state: "
                             f"{weight_error:.2e}")
        largest = {"loss": max(largest["loss"], loss_error),
                   "weight": max(largest["weight"], weight_error)}
    print(f"[{name}] each step from one process's state: losses within {LOSS_RTOL} (largest "
          f"{largest['loss']:.1e}), weights after it within {WEIGHT_RTOL} (largest "
          f"{largest['weight']:.1e})")
