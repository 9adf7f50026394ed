"""The global gradient norm (issue 14, point 3). Every step's `grad_norm` in the metrics equals
PyTorch's total norm (what torch.nn.utils.clip_grad_norm_ returns) of samples/mlp trained on the
same rows, within 1e-5 relative, on one rank, under ZeRO-2 over 2 ranks and in a 2-stage 1F1B
pipeline, and is the same on every rank. A NaN in one batch stops the run at that step on every
rank (exit 3) naming the first non-finite gradient; with --on-nonfinite skip both ranks leave
that step's update out and train on, ending with the weights of a run that never saw that
batch."""
import os
import re
import tempfile
import unittest

import numpy as np
import torch

import harness
from harness import Tools
from test_data_parallel import launch_path, weights_of
from test_mlp_vs_pytorch import GLOBAL_BATCH, SAMPLES, make_data, sample_module

STEPS = 5
NORM_RTOL = 1e-5
SGD = {"type": "sgd", "lr": 0.05, "momentum": 0.9}
ADAMW = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
TWO_STAGES = [{"match": "/fc1/*", "tags": {"PP": 0}},
              {"match": "/fc2/*", "tags": {"PP": 1}},
              {"match": "/fc3/*", "tags": {"PP": 1}}]
ZERO2 = [{"op": "split", "dim_name": "MB", "num_microbatches": 2},
         {"op": "zero", "stage": 2, "devices": [0, 1]}]
PIPELINE = [{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1], "num_microbatches": 4}]


def pytorch_norms(x, y):
    """The total gradient norm of every step of PyTorch training samples/mlp with SGD, step s
    on rows (s*G + i) mod N."""
    export = sample_module()
    model = export.load_initializers(export.build_model(), Tools.sample("mlp", "model.onnx"))
    optimizer = torch.optim.SGD(model.parameters(), lr=SGD["lr"], momentum=SGD["momentum"])
    norms = []
    for step in range(STEPS):
        rows = (step * GLOBAL_BATCH + np.arange(GLOBAL_BATCH)) % SAMPLES
        optimizer.zero_grad()
        model(torch.from_numpy(x[rows]), torch.from_numpy(y[rows])).backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item())
        optimizer.step()
    return norms


class GradientNorm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_grad_norm_")
        cls.data = cls.path("data")
        os.mkdir(cls.data)
        cls.x, cls.y = make_data(cls.data)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def path(cls, *parts):
        return os.path.join(cls.tmp.name, *parts)

    def plan(self, name, optimizer, directives=(), annotations=()):
        work = self.path(name)
        os.mkdir(work)
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(GLOBAL_BATCH, optimizer, directives=list(directives),
                             annotations=list(annotations)))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"), strategy, "-o", plans])
        return work, plans

    def train(self, work, plans, ranks, data, steps, *flags, ok=True):
        """Trains every rank; returns the result and each rank's metrics."""
        metrics = os.path.join(work, "metrics_%r.jsonl")
        args = ["--steps", steps, "--data", data, "--metrics", metrics, "--save-onnx",
                os.path.join(work, "trained.onnx"), "--timeout", 60, *flags]
        if ranks == 1:
            argv = [Tools.run, "--plan", os.path.join(plans, "rank0.plan")] + args
        else:
            argv = [launch_path(), "--plans", plans] + args
        result = (harness.run_ok if ok else harness.run)(argv, timeout=240)
        records = []
        for rank in range(ranks):
            path = metrics.replace("%r", str(rank))
            records.append(harness.read_metrics(path) if os.path.exists(path) else [])
        return result, records

    def check_norms(self, name, ranks, directives=(), annotations=()):
        work, plans = self.plan(name, SGD, directives, annotations)
        _, records = self.train(work, plans, ranks, self.data, STEPS)
        expected = pytorch_norms(self.x, self.y)
        for rank in range(ranks):
            norms = [record["grad_norm"] for record in records[rank]]
            self.assertEqual(len(norms), STEPS, f"[{name}] rank {rank}: {records[rank]}")
            for step, (got, want) in enumerate(zip(norms, expected)):
                error = abs(got - want) / want
                print(f"[{name}] rank {rank} step {step + 1}: piper {got:.7g} "
                      f"pytorch {want:.7g} rel {error:.1e}")
                self.assertLessEqual(error, NORM_RTOL, f"[{name}] rank {rank} step {step + 1}")
            self.assertEqual(norms, [r["grad_norm"] for r in records[0]],
                             f"[{name}] rank {rank} reports another norm than rank 0")
            self.assertFalse(any(r["skipped"] for r in records[rank]), records[rank])

    def test_one_rank_matches_pytorch(self):
        self.check_norms("single", 1)

    def test_zero2_over_two_ranks_matches_pytorch(self):
        self.check_norms("zero2", 2, ZERO2)

    def test_two_stage_pipeline_matches_pytorch(self):
        self.check_norms("pp2", 2, PIPELINE, TWO_STAGES)

    def nan_data(self, name, drop_batch=False):
        """samples/mlp data with a NaN in one row of step 2's batch, or without that batch."""
        data = self.path(name)
        os.mkdir(data)
        x, y = self.x.copy(), self.y
        x[GLOBAL_BATCH + 3, 5] = np.nan
        if drop_batch:
            keep = np.r_[0:GLOBAL_BATCH, 2 * GLOBAL_BATCH:SAMPLES]
            x, y = x[keep], y[keep]
        np.save(os.path.join(data, "x.npy"), x)
        np.save(os.path.join(data, "y.npy"), y)
        return data

    def test_a_nan_gradient_stops_every_rank_at_that_step_naming_the_gradient(self):
        work, plans = self.plan("nan_stop", ADAMW, ZERO2)
        result, records = self.train(work, plans, 2, self.nan_data("nan_stop_data"), STEPS,
                                     ok=False)
        self.assertNotEqual(result.returncode, 0, result.describe())
        for rank in range(2):
            self.assertRegex(result.output, rf"rank {rank} exited with status 3", result.describe())
            match = re.search(rf"step 2: the loss is NaN on rank {rank}, and the gradient norm "
                              r"NaN \(the first non-finite gradient on this rank: "
                              r"'(fc\d\.(weight|bias))' \(NaN at element \d+\)\)", result.output)
            self.assertTrue(match, result.describe())
            self.assertEqual(len(records[rank]), 2, records[rank])
            self.assertIsNone(records[rank][-1]["grad_norm"])
        self.assertFalse(os.path.exists(os.path.join(work, "trained.onnx")))

    def test_skip_leaves_the_step_out_on_every_rank_and_trains_on(self):
        work, plans = self.plan("nan_skip", ADAMW, ZERO2)
        _, records = self.train(work, plans, 2, self.nan_data("nan_skip_data"), 4,
                                "--on-nonfinite", "skip")
        for rank in range(2):
            self.assertEqual([r["skipped"] for r in records[rank]], [False, True, False, False])
            self.assertEqual(records[rank][-1]["skipped_steps"], 1)
            self.assertIsNone(records[rank][1]["grad_norm"])
            for record in records[rank][2:]:
                self.assertTrue(np.isfinite(record["loss"]) and np.isfinite(record["grad_norm"]),
                                record)
        skipped = weights_of(os.path.join(work, "trained.onnx"))
        # The same plan, three steps on the data without step 2's batch: AdamW's step count
        # and state must not have moved on the skipped step.
        work, plans = self.plan("nan_dropped", ADAMW, ZERO2)
        self.train(work, plans, 2, self.nan_data("nan_dropped_data", drop_batch=True), 3)
        without = weights_of(os.path.join(work, "trained.onnx"))
        self.assertEqual(sorted(skipped), sorted(without))
        for name, value in without.items():
            np.testing.assert_array_equal(skipped[name], value, err_msg=name)


if __name__ == "__main__":
    harness.main()
