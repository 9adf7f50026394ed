"""Dropout masks are keyed by the ONNX node and the element's place in the whole tensor of the
step (docs/plan-format.md, Dropout), not by the layout: samples/gpt with Dropout in every MLP
(after the GELU, [batch, 16, 128], and on its output, [batch, 16, 32]) trains 6 steps alike,
losses within 1e-5 relative, on one process, on 2 replicas x 2 microbatches, as a 2-stage 1F1B
pipeline of 4 microbatches, and tensor-parallel over 2 ranks (the GELU's Dropout then runs on
blocks of the hidden dimension). Another --seed draws other masks, so the dropout is live."""
import os
import sys
import tempfile
import unittest

import onnx

import harness
from harness import Tools

GLOBAL_BATCH = 8
STEPS = 6
RTOL = 1e-5
RATIO = 0.25
OPTIMIZER = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
LAYOUTS = {
    "single": ({}, []),
    "replicas_microbatches": ({}, [{"op": "split", "dim_name": "MB", "num_microbatches": 2},
                                   {"op": "zero", "stage": 2, "devices": [0, 1]}]),
    "pipeline": ({"annotations": [{"match": "/blocks.0/*", "tags": {"PP": 0}},
                                  {"match": "/blocks.1/*", "tags": {"PP": 1}}]},
                 [{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1],
                   "num_microbatches": 4}]),
    "tensor_parallel": ({"mesh": [["tp", 2]]},
                        [{"op": "shard", "axis": "tp", "params": {
                            "blocks.*.mlp.fc.*": 0, "blocks.*.mlp.out.weight": 1}}]),
}


def export_dropout_gpt(path):
    """samples/gpt whose MLPs drop RATIO of the GELU's output and of their own."""
    sys.path.insert(0, Tools.sample("gpt"))
    import export as gpt
    import torch.nn as nn
    import torch.nn.functional as F

    class DroppingMLP(gpt.MLP):
        def __init__(self, d):
            super().__init__(d)
            self.drop = nn.Dropout(RATIO)

        def forward(self, x):
            return self.drop(self.out(self.drop(F.gelu(self.fc(x)))))

    gpt.torch.manual_seed(gpt.SEED)
    gpt.export_model(gpt.GPT(make_mlp=DroppingMLP), path)
    dropouts = [n for n in onnx.load(path).graph.node if n.op_type == "Dropout"]
    assert len(dropouts) == 4, [n.name for n in dropouts]
    return path


class DropoutLayouts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_dropout_")
        cls.model = export_dropout_gpt(os.path.join(cls.tmp.name, "model.onnx"))
        cls.data = os.path.join(cls.tmp.name, "data")
        harness.save_token_sequences(cls.data, GLOBAL_BATCH * 2, 64, 16, seed=5)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, layout, *flags):
        extra, directives = LAYOUTS[layout]
        work = tempfile.mkdtemp(prefix=layout + "_", dir=self.tmp.name)
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(GLOBAL_BATCH, OPTIMIZER, frozen=["*mask*"], directives=directives,
                             **extra))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, self.model, strategy, "-o", plans])
        metrics = os.path.join(work, "metrics.jsonl")
        common = ["--steps", STEPS, "--data", self.data, "--metrics", metrics, "--timeout", 60]
        if layout == "single":
            harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan")] + common +
                           list(flags))
        else:
            launch = os.path.join(os.path.dirname(Tools.run), "piper-launch")
            harness.run_ok([launch, "--plans", plans] + common + list(flags), timeout=240)
        return [m["loss"] for m in harness.read_metrics(metrics)]

    def test_every_layout_draws_the_same_masks(self):
        reference = self.train("single")
        self.assertEqual(len(reference), STEPS)
        other_seed = self.train("single", "--seed", 7)
        self.assertGreater(max(abs(a - b) / abs(b) for a, b in zip(other_seed, reference)), 1e-3,
                           "another seed draws other masks")
        for layout in ("replicas_microbatches", "pipeline", "tensor_parallel"):
            with self.subTest(layout=layout):
                losses = self.train(layout)
                self.assertEqual(len(losses), STEPS)
                for step, (got, want) in enumerate(zip(losses, reference)):
                    self.assertLessEqual(abs(got - want) / abs(want), RTOL,
                                         f"[{layout}] step {step + 1}: {got} vs {want}")


if __name__ == "__main__":
    harness.main()
