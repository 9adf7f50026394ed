"""Pipelines over a mesh axis that the other axes replicate: `{"op": "pipeline", "axis": "pp",
"zero": Z}` in a mesh with a `dp` axis puts stage s on the pp leaders and replicates each stage
over the devices that differ from its leader only along dp (one replicate per stage, at ZeRO
stage Z).

samples/gpt under dp=2 x pp=2 (1F1B with ZeRO-1, and GPipe with ZeRO-3, 4 microbatches each),
launched with piper-launch (Gloo over localhost), trains 10 AdamW steps to every step's loss
within 1e-5 relative of the single-process run and final weights within 1e-4. The mesh form
plans exactly what the hand-written flat form (pipeline devices [0, 1], then one replicate per
stage over [0, 2] and [1, 3]) plans: every rank's piper-dump is the same but for the plan id.
An 8-device dp x pp x tp strategy is planned (8 plans) and its `--expand` output is the flat
expansion docs/strategy.md shows.

One strategy per test method, so each runs alone:
    /usr/bin/python3 tests/integration/test_mesh_pipeline.py --piper-plan ... \\
        MeshPipeline.test_dp2_pp2_1f1b_zero1
"""
import json
import os
import re
import unittest

import harness
import one_process
import tp_models
from harness import Tools

STEPS = 10
GLOBAL_BATCH = 8
SAMPLES = 2 * GLOBAL_BATCH
MICROBATCHES = 4
OPTIMIZER = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
FROZEN = ["*mask*"]  # the causal-mask buffers
STAGES = [{"match": f"/blocks.{layer}/*", "tags": {"PP": layer}} for layer in range(2)]


def mesh_pipeline(schedule, zero):
    """dp x pp in mesh form: the generator replicates each stage along dp."""
    return {"mesh": [["dp", 2], ["pp", 2]], "annotations": STAGES,
            "directives": [{"op": "pipeline", "schedule": schedule, "axis": "pp",
                            "num_microbatches": MICROBATCHES, "zero": zero}]}


def flat_pipeline(schedule, zero):
    """The same by hand, as samples/strategies/gpt_pipeline.json writes it."""
    flags = {1: {"shard_optimizer": True}, 3: {"shard_params": True}}[zero]
    return {"annotations": STAGES,
            "directives": [{"op": "pipeline", "schedule": schedule, "devices": [0, 1],
                            "num_microbatches": MICROBATCHES},
                           {"op": "replicate", "filter": {"PP": 0}, "devices": [0, 2], **flags},
                           {"op": "replicate", "filter": {"PP": 1}, "devices": [1, 3], **flags}]}


# docs/strategy.md's dp x pp x tp example: 8 devices, stages on the pp leaders 0 and 2, each
# replicated along dp ([0, 4] and [2, 6]), each device leading a tensor-parallel pair.
DP_PP_TP = {
    "mesh": [["dp", 2], ["pp", 2], ["tp", 2]],
    "annotations": STAGES,
    "directives": [
        {"op": "pipeline", "schedule": "1f1b", "axis": "pp", "num_microbatches": 2, "zero": 1},
        {"op": "shard", "axis": "tp", "params": {
            "blocks.*.attn.q.*": 0, "blocks.*.attn.k.weight": 0, "blocks.*.attn.v.*": 0,
            "blocks.*.attn.proj.weight": 1, "blocks.*.mlp.fc.*": 0,
            "blocks.*.mlp.out.weight": 1}}]}


def expected_dp_pp_tp_expansion():
    """--expand of DP_PP_TP, in flat device lists: split, the stages' places, each device's
    1F1B order, the stages' replicates along dp, then the shard's groups."""
    order = {0: [(0, "F"), (1, "F"), (0, "B"), (1, "B")],
             2: [(0, "F"), (0, "B"), (1, "F"), (1, "B")]}
    return ([{"op": "split", "dim_name": "MB", "filter": {}, "num_microbatches": 2}] +
            [{"op": "place", "devices": [device], "filter": {"PP": stage}, "stream": "compute"}
             for stage, device in enumerate([0, 2])] +
            [{"op": "order", "device": device,
              "filters": [[{"MB": mb, "PASS": p, "PP": stage}] for mb, p in order[device]]}
             for stage, device in enumerate([0, 2])] +
            [{"op": "replicate", "devices": devices, "filter": {"PP": stage},
              "bucket_size": 26214400, "shard_optimizer": True, "shard_grads": False,
              "shard_params": False, "gather_stream": "dp_gather", "reduce_stream": "dp_reduce"}
             for stage, devices in enumerate([[0, 4], [2, 6]])] +
            [{"op": "shard", "devices": [[0, 1], [2, 3], [4, 5], [6, 7]], "filter": {},
              "params": DP_PP_TP["directives"][1]["params"], "sequence_parallel": False,
              "stream": "compute"}])


PLAN_ID = re.compile(r"plan[ _]id[^\n]*", re.IGNORECASE)


class MeshPipeline(one_process.SplitModels, unittest.TestCase):
    steps, global_batch, optimizer, frozen = STEPS, GLOBAL_BATCH, OPTIMIZER, FROZEN

    samples = ("gpt",)

    @classmethod
    def setUpClass(cls):
        cls.set_up("piper_meshpp_", SAMPLES, tp_models.VOCAB, tp_models.BLOCK, seed=15)

    def check_training(self, name, extra):
        work, plans = self.plan("gpt", name, extra)
        one_process.assert_matches(self, name, self.train(work, plans, launch=True),
                                   self.reference("gpt"), STEPS)

    def test_dp2_pp2_1f1b_zero1(self):
        self.check_training("dp2_pp2_1f1b_zero1", mesh_pipeline("1f1b", 1))

    def test_dp2_pp2_gpipe_zero3(self):
        self.check_training("dp2_pp2_gpipe_zero3", mesh_pipeline("gpipe", 3))

    def dumps(self, plans):
        """Every rank's piper-dump without its plan id, which each planning run draws anew."""
        ranks = sorted(f for f in os.listdir(plans) if f.endswith(".plan"))
        return {rank: PLAN_ID.sub("", harness.run_ok([Tools.dump, os.path.join(plans, rank)])
                                  .stdout) for rank in ranks}

    def test_mesh_form_plans_as_the_flat_form(self):
        for schedule, zero in [("1f1b", 1), ("gpipe", 3)]:
            with self.subTest(schedule=schedule, zero=zero):
                _, mesh = self.plan("gpt", f"mesh_{schedule}", mesh_pipeline(schedule, zero))
                _, flat = self.plan("gpt", f"flat_{schedule}", flat_pipeline(schedule, zero))
                mesh_dumps, flat_dumps = self.dumps(mesh), self.dumps(flat)
                self.assertEqual(sorted(mesh_dumps), [f"rank{r}.plan" for r in range(4)])
                self.assertEqual(mesh_dumps, flat_dumps)

    def test_dp_pp_tp_plans_eight_ranks_and_expands_flat(self):
        work, plans = self.plan("gpt", "dp2_pp2_tp2", DP_PP_TP)
        self.assertEqual(sorted(f for f in os.listdir(plans) if f.endswith(".plan")),
                         sorted(f"rank{r}.plan" for r in range(8)))
        expanded = json.loads(harness.run_ok(
            [Tools.plan, self.model_path("gpt"), os.path.join(work, "strategy.json"),
             "--expand"]).stdout)
        self.assertEqual(expanded["mesh"], DP_PP_TP["mesh"])
        self.assertEqual(expanded["directives"], expected_dp_pp_tp_expansion())


if __name__ == "__main__":
    harness.main()
