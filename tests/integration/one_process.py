"""What the placement tests (tensor and expert parallelism) share: training plans for a few
steps, through piper-launch or on rank 0 alone, and checking a run against the single-process
run of the same model and global batch."""
import os

import numpy as np
import onnx
from onnx import numpy_helper

import harness
from harness import Tools
from test_data_parallel import launch_path

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


def weights_of(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def relative_error(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def train(work, plans, data, steps, launch):
    """`steps` steps from `plans` (every rank through piper-launch, or rank 0 alone); each
    step's loss and the saved weights (--save-onnx gathers split tensors whole)."""
    metrics = os.path.join(work, "metrics.jsonl")
    trained = os.path.join(work, "trained.onnx")
    flags = ["--steps", steps, "--data", data, "--metrics", metrics, "--save-onnx", trained,
             "--timeout", 60]
    if launch:
        harness.run_ok([launch_path(), "--plans", plans] + flags, timeout=240)
    else:
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan")] + flags)
    return [r["loss"] for r in harness.read_metrics(metrics)], weights_of(trained)


def assert_matches(test, name, run, reference, steps, precision="fp32"):
    """Every step's loss and every final weight of `run` within the precision's tolerance of
    `reference`, both (losses, weights)."""
    (losses, weights), (want_losses, want_weights) = run, reference
    loss_rtol, weight_rtol = tolerances(precision)
    test.assertEqual(len(losses), steps, name)
    for step, (got, want) in enumerate(zip(losses, want_losses)):
        test.assertLessEqual(abs(got - want) / abs(want), loss_rtol,
                             f"[{name}] step {step}: {got!r} vs one process {want!r}")
    test.assertEqual(sorted(weights), sorted(want_weights), name)
    for param, want in want_weights.items():
        test.assertEqual(weights[param].shape, want.shape,
                         f"[{name}] {param}: --save-onnx must gather the whole tensor")
        if precision == "fp32":
            error = relative_error(weights[param], want)
            test.assertLessEqual(error, weight_rtol, f"[{name}] final {param}: {error:.2e}")
    if precision != "fp32":
        # AdamW moves a parameter near zero (a bias) by lr whatever its gradient's size, so
        # bf16's rounding shows in small tensors first: bf16 compares the whole model.
        names = sorted(want_weights)
        error = relative_error(np.concatenate([weights[n].ravel() for n in names]),
                               np.concatenate([want_weights[n].ravel() for n in names]))
        test.assertLessEqual(error, weight_rtol, f"[{name}] final weights: {error:.2e}")
    print(f"[{name}] losses match one process to {loss_rtol}, weights to {weight_rtol}")
