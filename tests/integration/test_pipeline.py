"""Pipeline parallelism across real processes: samples/mlp and samples/gpt
split into 2 and 4 stages (PP tags), trained under every schedule generator
(gpipe, 1f1b, interleaved, zb-h1) and under a hand-written order, with and
without recompute, and 2 stages x 2 replicas with ZeRO 1 and 3. Every step's
loss (reported by rank 0, wherever the loss is computed) equals the
single-process run, and the final weights that --save-onnx collects from
every stage equal it too. Orders that contradict dataflow or deadlock across
devices are refused by piper-plan."""
import json
import os
import tempfile
import unittest

import numpy as np
import torch

import harness
from harness import Tools
from test_data_parallel import (GLOBAL_BATCH, OPTIMIZER, STEPS, gpt_data, launch_path,
                                train_plans)

LOSS_RTOL = 1e-5
WEIGHT_RTOL = 1e-4
MICROBATCHES = 4


def pipeline(schedule, devices, chunks=1, microbatches=MICROBATCHES):
    directive = {"op": "pipeline", "schedule": schedule, "devices": devices,
                 "num_microbatches": microbatches}
    if chunks > 1:
        directive["chunks"] = chunks
    return [directive]


def stage_filter(stage, microbatch, pass_):
    return {"PP": stage, "MB": microbatch, "PASS": pass_}


def hand_written_order(microbatches=MICROBATCHES):
    """Two stages, written out: device 0 runs two forwards ahead, then
    alternates; device 1 runs each microbatch's forward and backward."""
    device0 = [stage_filter(0, 0, "F"), stage_filter(0, 1, "F")]
    for mb in range(microbatches):
        device0.append(stage_filter(0, mb, "B"))
        if mb + 2 < microbatches:
            device0.append(stage_filter(0, mb + 2, "F"))
    device1 = []
    for mb in range(microbatches):
        device1 += [stage_filter(1, mb, "F"), stage_filter(1, mb, "B")]
    return [{"op": "split", "dim_name": "MB", "num_microbatches": microbatches},
            {"op": "place", "filter": {"PP": 0}, "devices": [0]},
            {"op": "place", "filter": {"PP": 1}, "devices": [1]},
            {"op": "order", "device": 0, "filters": [[f] for f in device0]},
            {"op": "order", "device": 1, "filters": [[f] for f in device1]}]


class PipelineHarness:
    """Plans and trains one model under strategies, against the single
    process run of the same model."""
    sample = "mlp"
    frozen = []

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix=f"piper_pp_{cls.sample}_")
        cls.data = cls.sample_data()
        cls.reference = cls.train("single", [], [], launch=False)

    @classmethod
    def sample_data(cls):
        return Tools.sample("mlp", "data")

    @classmethod
    def model_path(cls):
        return Tools.sample(cls.sample, "model.onnx")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def plan(cls, name, directives, annotations):
        work = os.path.join(cls.tmp.name, name)
        os.makedirs(work, exist_ok=True)
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(GLOBAL_BATCH, OPTIMIZER, directives=directives,
                             frozen=cls.frozen, annotations=annotations))
        plans = os.path.join(work, "plans")
        result = harness.run([Tools.plan, cls.model_path(), strategy, "-o", plans])
        return work, plans, result

    @classmethod
    def train(cls, name, directives, annotations, launch=True):
        work, plans, result = cls.plan(name, directives, annotations)
        if result.returncode != 0:
            raise AssertionError(result.describe())
        return train_plans(work, plans, cls.data, launch)

    def check(self, name, directives, annotations):
        name = f"{self.sample}_{name}"
        losses, weights = self.train(name, directives, annotations)
        want_losses, want_weights = self.reference
        self.assertEqual(len(losses), STEPS, name)
        for step, (got, want) in enumerate(zip(losses, want_losses)):
            self.assertLessEqual(abs(got - want) / abs(want), LOSS_RTOL,
                                 f"[{name}] step {step}: {got!r} vs one process {want!r}")
        self.assertEqual(sorted(weights), sorted(want_weights), name)
        for param, want in want_weights.items():
            error = np.linalg.norm(weights[param] - want) / np.linalg.norm(want)
            self.assertLessEqual(error, WEIGHT_RTOL, f"[{name}] final {param}: {error:.2e}")
        print(f"[{name}] losses match to {LOSS_RTOL}, weights to {WEIGHT_RTOL}")


def replicate_stages(stage, zero):
    """Two stages over devices [0, 2] and [1, 3]."""
    return [{"op": "replicate", "filter": {"PP": s}, "devices": [s, s + 2],
             "shard_optimizer": zero >= 1, "shard_grads": zero >= 2, "shard_params": zero >= 3}
            for s in range(stage)]


class PipelineMatchesOneProcess(PipelineHarness, unittest.TestCase):
    """samples/mlp; the gpt subclass changes the sample and its stages."""
    two_stages = [{"match": "/fc1/*", "tags": {"PP": 0}},
                  {"match": "/fc2/*", "tags": {"PP": 1}},
                  {"match": "/fc3/*", "tags": {"PP": 1}}]
    four_stages = [{"match": "/fc1/*", "tags": {"PP": 0}},
                   {"match": "/fc2/*", "tags": {"PP": 1}},
                   {"match": "/fc3/*", "tags": {"PP": 2}},
                   {"match": "/SoftmaxCrossEntropyLoss", "tags": {"PP": 3}}]

    def test_two_stages_under_every_schedule(self):
        for schedule in ("gpipe", "1f1b", "zb-h1"):
            with self.subTest(schedule=schedule):
                self.check(f"pp2_{schedule}", pipeline(schedule, [0, 1]), self.two_stages)

    def test_four_stages_under_every_schedule(self):
        for schedule in ("gpipe", "1f1b", "zb-h1"):
            with self.subTest(schedule=schedule):
                self.check(f"pp4_{schedule}", pipeline(schedule, [0, 1, 2, 3]),
                           self.four_stages)

    def test_interleaved_two_chunks_per_device(self):
        self.check("pp2x2_interleaved", pipeline("interleaved", [0, 1], chunks=2),
                   self.four_stages)
        self.check("pp1x2_interleaved", pipeline("interleaved", [0], chunks=2), self.two_stages)

    def test_stages_chosen_by_the_cost_model(self):
        directives = pipeline("1f1b", [0, 1, 2, 3])
        directives[0]["stages"] = "auto"
        self.check("pp4_auto", directives, [])

    def test_hand_written_order(self):
        self.check("pp2_hand", hand_written_order(), self.two_stages)

    def test_recompute_every_stage(self):
        for schedule in ("1f1b", "zb-h1"):
            with self.subTest(schedule=schedule):
                directives = pipeline(schedule, [0, 1]) + [
                    {"op": "recompute", "filter": {"PP": "*"}}]
                self.check(f"pp2_{schedule}_recompute", directives, self.two_stages)

    def test_two_stages_times_two_replicas(self):
        for schedule, zero in (("1f1b", 1), ("1f1b", 3), ("zb-h1", 2)):
            with self.subTest(schedule=schedule, zero=zero):
                directives = pipeline(schedule, [0, 1]) + replicate_stages(2, zero)
                self.check(f"pp2_{schedule}_dp2_zero{zero}", directives, self.two_stages)

    def test_every_rank_reports_the_loss(self):
        work, plans, result = self.plan("every_rank", pipeline("1f1b", [0, 1]) +
                                        replicate_stages(2, 1), self.two_stages)
        self.assertEqual(result.returncode, 0, result.describe())
        metrics = os.path.join(work, "metrics_%r.jsonl")
        harness.run_ok([launch_path(), "--plans", plans, "--steps", 2, "--data", self.data,
                        "--metrics", metrics, "--timeout", 60], timeout=240)
        losses = [[record["loss"] for record in
                   harness.read_metrics(metrics.replace("%r", str(rank)))] for rank in range(4)]
        for rank in range(1, 4):
            self.assertEqual(losses[rank], losses[0], f"rank {rank}")

    def refused(self, name, directives):
        work, plans, result = self.plan(name, directives, self.two_stages)
        self.assertNotEqual(result.returncode, 0, result.describe())
        self.assertFalse(os.path.exists(plans), "a refused plan leaves no directory")
        return result.output

    def test_order_against_dataflow_is_refused(self):
        directives = hand_written_order()[:4] + [
            {"op": "order", "device": 1,
             "filters": [[stage_filter(1, 0, "B")], [stage_filter(1, 0, "F")]]}]
        output = self.refused("against_dataflow", directives)
        self.assertIn("$.directives[4]", output)
        self.assertIn("on device 1", output)
        self.assertIn("contradicts dataflow", output)
        self.assertIn("can never run", output)

    def test_order_deadlocking_across_devices_is_refused(self):
        directives = hand_written_order(2)[:3] + [
            {"op": "order", "device": 0,
             "filters": [[stage_filter(0, 0, "F")], [stage_filter(0, 0, "B")],
                         [stage_filter(0, 1, "F")], [stage_filter(0, 1, "B")]]},
            {"op": "order", "device": 1,
             "filters": [[stage_filter(1, 1, "F")], [stage_filter(1, 1, "B")],
                         [stage_filter(1, 0, "F")], [stage_filter(1, 0, "B")]]}]
        output = self.refused("deadlock", directives)
        self.assertIn("$.directives[4]", output)
        self.assertIn("on device 1", output)
        self.assertIn("deadlocks", output)
        self.assertIn("can never run", output)

    def test_stages_without_tags_are_refused(self):
        # Three devices, but the annotations tag two stages.
        output = self.refused("untagged", pipeline("1f1b", [0, 1, 2]))
        self.assertIn("$.directives[0].filter (place)", output)
        self.assertIn("selects no task", output)
        self.assertIn("\"stages\": \"auto\"", output)

    def test_expand_prints_the_schedule_as_primitives(self):
        work = os.path.join(self.tmp.name, "expand")
        os.makedirs(work)
        strategy = harness.write_json(os.path.join(work, "s.json"), harness.strategy(
            GLOBAL_BATCH, OPTIMIZER, directives=pipeline("1f1b", [0, 1]),
            annotations=self.two_stages))
        expanded = json.loads(harness.run_ok([Tools.plan, "--expand", self.model_path(),
                                              strategy]).stdout)
        ops = [d["op"] for d in expanded["directives"]]
        self.assertEqual(ops, ["split", "place", "place", "order", "order"])
        device1 = expanded["directives"][4]
        self.assertEqual(device1["device"], 1)
        self.assertEqual([group[0]["PASS"] for group in device1["filters"]],
                         ["F", "B"] * MICROBATCHES)
        again = harness.write_json(os.path.join(work, "expanded.json"), expanded)
        harness.run_ok([Tools.plan, self.model_path(), again, "-o", os.path.join(work, "plans")])


class GptPipelineMatchesOneProcess(PipelineMatchesOneProcess):
    sample = "gpt"
    frozen = ["*mask*"]  # the causal-mask buffers
    two_stages = [{"match": "/blocks.0/*", "tags": {"PP": 0}},
                  {"match": "/blocks.1/*", "tags": {"PP": 1}}]
    four_stages = [{"match": "/tok/*", "tags": {"PP": 0}},
                   {"match": "/pos/*", "tags": {"PP": 0}},
                   {"match": "/blocks.0/*", "tags": {"PP": 1}},
                   {"match": "/blocks.1/*", "tags": {"PP": 2}},
                   {"match": "/head/*", "tags": {"PP": 3}}]

    @classmethod
    def sample_data(cls):
        return gpt_data(os.path.join(cls.tmp.name, "data"))


class TiedLm(torch.nn.Module):
    """Token embedding shared with the output projection (tied weights)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(32, 16)
        self.block = torch.nn.Linear(16, 16)

    def forward(self, idx, targets):
        h = torch.tanh(self.block(self.emb(idx)))
        logits = h @ self.emb.weight.t()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 32), targets.reshape(-1))


class TiedEmbeddingAcrossStages(PipelineHarness, unittest.TestCase):
    """The embedding lives on the first stage and the tied output projection
    on the last: the last stage's gradient contribution reaches the update and
    the updated weight comes back, so both copies train as one."""
    sample = "tied"
    stages = [{"match": "/emb/*", "tags": {"PP": 0}},
              {"match": "/block/*", "tags": {"PP": 1}}]

    @classmethod
    def sample_data(cls):
        directory = os.path.join(cls.tmp.name, "data")
        idx = harness.save_token_sequences(directory, GLOBAL_BATCH * 2, 32, 4, seed=3)
        torch.manual_seed(5)
        torch.onnx.export(TiedLm(), (torch.from_numpy(idx[:2]), torch.from_numpy(idx[:2])),
                          cls.model_path(), opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["idx", "targets"], output_names=["loss"],
                          dynamic_axes={"idx": {0: "batch"}, "targets": {0: "batch"}})
        return directory

    @classmethod
    def model_path(cls):
        return os.path.join(cls.tmp.name, "tied.onnx")

    def test_two_stages_share_the_embedding(self):
        for schedule in ("1f1b", "zb-h1"):
            with self.subTest(schedule=schedule):
                self.check(f"pp2_{schedule}", pipeline(schedule, [0, 1]), self.stages)

    def test_two_stages_times_two_replicas(self):
        self.check("pp2_dp2_zero1", pipeline("1f1b", [0, 1]) + replicate_stages(2, 1),
                   self.stages)

    def test_two_stages_times_two_replicas_zero3(self):
        # The first stage keeps slices of the embedding; the last stage reads
        # it whole, so it must receive the gathered value after every update.
        self.check("pp2_dp2_zero3", pipeline("1f1b", [0, 1]) + replicate_stages(2, 3),
                   self.stages)


if __name__ == "__main__":
    harness.main()
