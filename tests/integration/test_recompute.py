"""The recompute directive (activation checkpointing): samples/mlp and
samples/gpt, annotated with a LAYER tag per block, train 6 AdamW steps to the
same losses (1e-6 relative) and final weights (1e-5) with and without
recompute of every block: on one process, with 4 microbatches, and on 2
replicas with ZeRO-3 (piper-launch), recompute written before or after the
zero directive. With recompute the planned activation peak is lower."""
import json
import os
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

import harness
from harness import Tools

STEPS = 6
GLOBAL_BATCH = 16
LOSS_RTOL = 1e-6
WEIGHT_RTOL = 1e-5
OPTIMIZER = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
RECOMPUTE = {"op": "recompute", "filter": {"LAYER": "*"}}
SPLIT = {"op": "split", "dim_name": "MB", "num_microbatches": 4}
ZERO3 = {"op": "zero", "stage": 3, "devices": [0, 1]}


def weights_of(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


class MlpRecomputeMatches(unittest.TestCase):
    """samples/mlp; the subclass changes the sample."""
    sample = "mlp"
    frozen = []
    # Two blocks whose insides (the Relu's and the Tanh's outputs) the backward reads.
    annotations = [{"match": "/fc[12]/*", "tags": {"LAYER": 0}},
                   {"match": "/Relu", "tags": {"LAYER": 0}},
                   {"match": "/Tanh", "tags": {"LAYER": 1}},
                   {"match": "/fc3/*", "tags": {"LAYER": 1}}]

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix=f"piper_recompute_{cls.sample}_")
        cls.data = cls.sample_data()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def sample_data(cls):
        return Tools.sample("mlp", "data")

    def plan(self, name, directives):
        work = os.path.join(self.tmp.name, name)
        os.makedirs(work)
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(GLOBAL_BATCH, OPTIMIZER, directives=directives,
                             frozen=self.frozen, annotations=self.annotations))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, Tools.sample(self.sample, "model.onnx"), strategy, "-o",
                        plans])
        return work, plans

    def train(self, name, directives, launch=False):
        work, plans = self.plan(name, directives)
        metrics = os.path.join(work, "metrics.jsonl")
        trained = os.path.join(work, "trained.onnx")
        flags = ["--steps", STEPS, "--data", self.data, "--metrics", metrics,
                 "--save-onnx", trained, "--timeout", 60]
        self.last_plans = plans
        if launch:
            launcher = os.path.join(os.path.dirname(Tools.run), "piper-launch")
            harness.run_ok([launcher, "--plans", plans] + flags, timeout=240)
        else:
            harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan")] + flags)
        losses = [record["loss"] for record in harness.read_metrics(metrics)]
        self.assertEqual(len(losses), STEPS, name)
        return losses, weights_of(trained)

    def activation_peak(self, plans):
        dumped = harness.run_ok([Tools.dump, "--json", os.path.join(plans, "rank0.plan")])
        return int(json.loads(dumped.stdout)["memory"]["activation_bytes"])

    def check_same(self, name, got, want):
        (losses, weights), (want_losses, want_weights) = got, want
        for step, (a, b) in enumerate(zip(losses, want_losses)):
            self.assertLessEqual(abs(a - b) / abs(b), LOSS_RTOL,
                                 f"[{name}] step {step}: {a!r} with recompute, {b!r} without")
        for param, value in want_weights.items():
            error = np.linalg.norm(weights[param] - value) / max(np.linalg.norm(value), 1e-30)
            self.assertLessEqual(error, WEIGHT_RTOL, f"[{name}] final {param}: {error:.2e}")
        print(f"[{self.sample} {name}] losses and weights equal with and without recompute")

    def test_one_process(self):
        want = self.train("plain", [])
        self.check_same("one process", self.train("recompute", [RECOMPUTE]), want)
        _, plain = self.plan("plain_memory", [])
        _, recomputed = self.plan("recompute_memory", [RECOMPUTE])
        before, after = self.activation_peak(plain), self.activation_peak(recomputed)
        print(f"[{self.sample}] planned activation peak {before} B, with recompute {after} B")
        self.assertLess(after, before)

    def test_four_microbatches(self):
        want = self.train("split", [SPLIT])
        self.check_same("4 microbatches", self.train("split_recompute", [SPLIT, RECOMPUTE]), want)

    def test_two_replicas_zero3(self):
        want = self.train("zero3", [SPLIT, ZERO3], launch=True)
        before = self.activation_peak(self.last_plans)
        self.check_same("ZeRO-3, recompute after zero",
                        self.train("zero3_recompute", [SPLIT, ZERO3, RECOMPUTE], launch=True),
                        want)
        after = self.activation_peak(self.last_plans)
        print(f"[{self.sample}] ZeRO-3 x 2, 4 microbatches: planned activation peak {before} B, "
              f"with recompute after zero {after} B")
        self.assertLess(after, before)
        self.check_same("ZeRO-3, recompute before zero",
                        self.train("recompute_zero3", [SPLIT, RECOMPUTE, ZERO3], launch=True),
                        want)


class GptRecomputeMatches(MlpRecomputeMatches):
    sample = "gpt"
    frozen = ["*mask*"]  # the causal-mask buffers
    annotations = [{"match": f"/blocks.{i}/*", "tags": {"LAYER": i}} for i in range(2)]

    @classmethod
    def sample_data(cls):
        """Token sequences (vocabulary 64, 16 positions)."""
        directory = os.path.join(cls.tmp.name, "data")
        harness.save_token_sequences(directory, GLOBAL_BATCH * 2, 64, 16, seed=5)
        return directory


if __name__ == "__main__":
    harness.main()
