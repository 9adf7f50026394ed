"""Expert parallelism over the data-parallel axis (GShard): samples/moe, whose
experts are batched parameters [E, d, h] routed by einsum with a static
capacity, and a variant with 8 experts, trained 10 AdamW steps with the
`shard` directive splitting the experts over the replicas
({"op": "shard", "axis": "dp", "params": {"blocks.*.mlp.w1": 0, ...}}),
under EP=2, EP=4, EP=2 with ZeRO-2 and 2 microbatches, EP=2 x PP=2 (1F1B;
in flat device lists, and in mesh form with the pipeline's replicates at
ZeRO-2), EP=2 in bf16, and EP=2 over the dp axis composed with Megatron's
tensor parallelism over a tp axis (EP=2 x TP=2 on 4 processes, the two shard
directives in either order, plain, with ZeRO-1 over dp, with ZeRO-2 and 2
microbatches, and in bf16), launched with
piper-launch (Gloo over localhost), give
every step's loss within 1e-5 relative of the single-process run and final
weights within 1e-4; in bf16 (EP=2, and EP=2 x TP=2) the final weights are
one process's bit for bit (the CPU sums the rows that the replicas split in
an order that splitting them in halves does not change: docs/strategy.md,
"Precision"), and each step trained from one process's state matches its
step. The plans: every replica holds 1/EP of the experts, their
gradients are in no data-parallel collective, and tokens reach their experts
by all-to-all and come back by all-to-all (two per MoE layer and microbatch
in the forward, two in the backward). The single-process baselines are
checked against PyTorch.

One strategy per test method, so each runs alone:
    /usr/bin/python3 tests/integration/test_expert_parallel.py --piper-plan ... \\
        ExpertParallel.test_ep2
"""
import fnmatch
import importlib.util
import os
import unittest

import numpy as np
import onnx
import torch
import torch.nn.functional as F

import harness
import one_process
import tp_models
from harness import Tools

STEPS = 10
GLOBAL_BATCH = 8
SAMPLES = 2 * GLOBAL_BATCH
MICROBATCHES = 2
LAYERS = 2
OPTIMIZER = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
FROZEN = ["*mask*"]  # the causal-mask buffers
EXPERT_PARAMS = {"blocks.*.mlp.w1": 0, "blocks.*.mlp.b1": 0, "blocks.*.mlp.w2": 0,
                 "blocks.*.mlp.b2": 0}
EXPERT_GLOBS = tuple(EXPERT_PARAMS)
PYTORCH_LOSS_RTOL = 1e-4
PYTORCH_WEIGHT_RTOL = 1e-3


def moe_sample():
    spec = importlib.util.spec_from_file_location("piper_sample_moe",
                                                  Tools.sample("moe", "export.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Models: the sample, 8 narrower experts (EP=4 gives each replica two), and the sample with
# GShard's load-balancing loss added to its loss.
VARIANTS = {"moe": {}, "moe8": {"experts": 8, "hidden_mult": 1}, "moe_aux": {}}
AUX_WEIGHT = 0.5


def build_model(name):
    moe = moe_sample()
    torch.manual_seed(moe.SEED)
    options = VARIANTS[name]
    if name != "moe_aux":
        return moe.gpt.GPT(make_mlp=lambda d: moe.MoE(d, **options))

    class BalancedMoE(moe.MoE):
        """GShard's auxiliary loss: E x sum over experts of (the fraction of tokens whose
        first choice is e) x (e's mean router probability), both means over every token of
        the batch, so a product of batch means."""

        def forward(self, x):
            gates = F.softmax(self.router(x), dim=-1)
            first = F.one_hot(torch.argmax(gates, dim=-1), self.experts).to(x.dtype)
            self.aux = self.experts * torch.sum(first.mean(dim=(0, 1)) * gates.mean(dim=(0, 1)))
            return super().forward(x)

    class BalancedGPT(moe.gpt.GPT):
        def forward(self, idx, targets):
            loss = super().forward(idx, targets)
            return loss + AUX_WEIGHT * sum(block.mlp.aux for block in self.blocks)

    return BalancedGPT(make_mlp=BalancedMoE)


def tensor_params():
    """Megatron's plan for the sample's attention (q, k, v along their outputs, the output
    projection along its inputs); its MLPs are the experts."""
    return tp_models.megatron_params(build_model("moe"))


def strategy(ep, precision="fp32", zero=0, microbatches=1, pipeline=False, tp=0,
             sequence_parallel=False):
    """EP over the dp axis, with replicate (or zero) over the same axis; with `tp`, Megatron's
    attention split over a tp axis too (its shard first for tp > 0, after the experts' for
    tp < 0), with sequence parallelism if asked."""
    directives = []
    annotations = [{"match": f"/blocks.{layer}/*", "tags": {"PP": layer}}
                   for layer in range(LAYERS)]
    if pipeline == "mesh":
        # The same in mesh form: the generator replicates each stage along dp at ZeRO stage
        # `zero`, and the shard's dp groups are those replicas.
        directives = [{"op": "pipeline", "schedule": "1f1b", "axis": "pp",
                       "num_microbatches": microbatches, "zero": zero, "replica_axes": ["dp"]},
                      {"op": "shard", "axis": "dp", "params": EXPERT_PARAMS}]
        return {"mesh": [["pp", LAYERS], ["dp", ep]], "directives": directives,
                "annotations": annotations, "precision": precision}
    if pipeline:
        # Stage s on devices [s * ep, (s + 1) * ep), replicated over them, in flat device lists.
        groups = [list(range(s * ep, (s + 1) * ep)) for s in range(LAYERS)]
        directives.append({"op": "pipeline", "schedule": "1f1b",
                           "devices": [group[0] for group in groups],
                           "num_microbatches": microbatches})
        directives += [{"op": "replicate", "filter": {"PP": s}, "devices": group}
                       for s, group in enumerate(groups)]
        directives.append({"op": "shard", "devices": groups, "params": EXPERT_PARAMS})
        return {"directives": directives, "annotations": annotations, "precision": precision}
    else:
        if microbatches > 1:
            directives.append({"op": "split", "dim_name": "MB",
                               "num_microbatches": microbatches})
        directives.append({"op": "zero", "stage": zero, "axis": "dp"} if zero
                          else {"op": "replicate", "axis": "dp"})
    experts = {"op": "shard", "axis": "dp", "params": EXPERT_PARAMS}
    if not tp:
        return {"mesh": [["dp", ep]], "directives": directives + [experts],
                "precision": precision}
    tensor = {"op": "shard", "axis": "tp", "params": tensor_params(),
              "sequence_parallel": sequence_parallel}
    shards = [tensor, experts] if tp > 0 else [experts, tensor]
    return {"mesh": [["dp", ep], ["tp", abs(tp)]], "directives": directives + shards,
            "precision": precision}


CASES = {
    "ep2": (dict(ep=2), ["moe", "moe8"]),
    "ep4": (dict(ep=4), ["moe8"]),
    "ep2_zero2_mb2": (dict(ep=2, zero=2, microbatches=MICROBATCHES), ["moe"]),
    "ep4_zero2_mb2": (dict(ep=4, zero=2, microbatches=MICROBATCHES), ["moe"]),
    "ep2_pp2_1f1b": (dict(ep=2, pipeline=True, microbatches=MICROBATCHES), ["moe"]),
    "ep2_pp2_1f1b_mesh_zero2": (dict(ep=2, pipeline="mesh", zero=2, microbatches=MICROBATCHES),
                                ["moe"]),
    "ep2_bf16": (dict(ep=2, precision="bf16"), ["moe"]),
    "ep2_zero2": (dict(ep=2, zero=2), ["moe_aux"]),
    "ep2_tp2": (dict(ep=2, tp=2), ["moe"]),
    "ep2_tp2_zero1": (dict(ep=2, tp=-2, zero=1), ["moe"]),
    "ep2_tp2_zero2_mb2": (dict(ep=2, tp=2, zero=2, microbatches=MICROBATCHES), ["moe"]),
    "ep2_tp2_sp": (dict(ep=2, tp=2, sequence_parallel=True), ["moe"]),
    "ep2_tp2_bf16": (dict(ep=2, tp=2, precision="bf16"), ["moe"]),
}


def is_expert(name):
    return any(fnmatch.fnmatchcase(name, glob) for glob in EXPERT_GLOBS)


class ExpertParallel(one_process.SplitModels, unittest.TestCase):
    steps, global_batch, optimizer, frozen = STEPS, GLOBAL_BATCH, OPTIMIZER, FROZEN

    samples = ("moe",)

    @classmethod
    def setUpClass(cls):
        gpt = moe_sample().gpt
        cls.set_up("piper_ep_", SAMPLES, gpt.VOCAB, gpt.BLOCK, seed=15)

    @staticmethod
    def export(model, path):
        moe_sample().gpt.export_model(build_model(model), path)

    def check_case(self, case):
        options, models = CASES[case]
        for model in models:
            with self.subTest(model=model):
                self.check_training(model, case, options)

    def check_training(self, model, case, options):
        name = f"{model}_{case}"
        precision = options.get("precision", "fp32")
        work, plans = self.plan(model, case, strategy(**options))
        self.check_plan(model, name, plans, options)
        # bf16: the weights bit for bit (the losses, means whose sums over tokens the replicas
        # split, within LOSS_RTOL).
        one_process.assert_matches(self, name, self.train(work, plans, launch=True),
                                   self.reference(model, precision), STEPS, precision,
                                   weight_rtol=0.0 if precision == "bf16" else None)
        if precision == "bf16":
            one_process.assert_each_step_matches(
                self, name, self.each_step(model, precision, work, plans))

    def check_plan(self, model, name, plans, options):
        """Rank 0 holds 1/EP of every expert tensor, reduces no expert gradient over the
        replicas, and exchanges tokens by two all-to-alls per MoE layer and microbatch each
        way."""
        plan = self.dump(plans)
        ep = options["ep"]
        tensors = plan["tensors"]
        experts = {t.name: t.dims[0] for t in onnx.load(self.model_path(model))
                   .graph.initializer if is_expert(t.name)}
        loaded = {load["initializer"]: load for load in plan["parameters"]}
        for initializer, count in experts.items():
            if initializer not in loaded:
                continue  # a pipeline stage's rank holds its own layers
            block = loaded[initializer].get("block")
            self.assertIsNotNone(block, f"[{name}] {initializer} is not split")
            self.assertEqual((int(block["dim"]), int(block["size"]) * ep), (0, count),
                             f"[{name}] {initializer}: rank 0 holds experts {block}")
        streams = plan["streams"]
        instructions = [inst for stream in streams for inst in stream.get("instructions", [])]
        exchanges = [inst for inst in instructions
                     if inst.get("collective", {}).get("kind") == "ALL_TO_ALL"]
        layers = LAYERS // 2 if options.get("pipeline") else LAYERS
        microbatches = options.get("microbatches", 1)
        self.assertEqual(len(exchanges), 4 * layers * microbatches,
                         f"[{name}] all-to-alls on rank 0: " +
                         ", ".join(inst.get("label", "") for inst in exchanges))
        # The expert biases' gradients sum each replica's rows of their experts by a small
        # reduce-scatter (E x d); no all-reduce or data-parallel collective reads an expert's.
        for inst in instructions:
            collective = inst.get("collective")
            if not collective or collective.get("kind") == "ALL_TO_ALL":
                continue
            if inst.get("label", "").endswith("tp_reduce_scatter"):
                continue
            for index in collective.get("inputs", []):
                tensor = tensors[int(index)]["name"]
                self.assertFalse(
                    tensor.startswith("grad/") and is_expert(tensor[len("grad/"):].split("/")[0]),
                    f"[{name}] the expert gradient {tensor} is reduced by "
                    f"{inst.get('label', '')}")

    def test_single_process_matches_pytorch(self):
        """The baselines train what PyTorch trains from the same weights."""
        targets = np.roll(self.idx, -1, axis=1)
        moe = moe_sample()
        for model in VARIANTS:
            with self.subTest(model=model):
                losses, weights = self.reference(model)
                module = moe.load_initializers(build_model(model), self.model_path(model))
                expected = harness.train_like_piper(
                    module, (self.idx, targets),
                    lambda p: torch.optim.AdamW(p, lr=OPTIMIZER["lr"],
                                                weight_decay=OPTIMIZER["weight_decay"]),
                    STEPS, GLOBAL_BATCH)
                for step, (got, want) in enumerate(zip(losses, expected)):
                    self.assertLessEqual(abs(got - want) / abs(want), PYTORCH_LOSS_RTOL,
                                         f"[{model}] step {step}: piper {got!r}, "
                                         f"pytorch {want!r}")
                for param, value in module.named_parameters():
                    error = one_process.relative_error(weights[param], value.detach().numpy())
                    self.assertLessEqual(error, PYTORCH_WEIGHT_RTOL,
                                         f"[{model}] final {param}: {error:.2e}")

    def test_ep2(self):
        self.check_case("ep2")

    def test_ep4(self):
        self.check_case("ep4")

    def test_ep2_zero2_microbatches(self):
        self.check_case("ep2_zero2_mb2")

    def test_ep4_zero2_microbatches(self):
        self.check_case("ep4_zero2_mb2")

    def test_ep2_pp2_1f1b(self):
        self.check_case("ep2_pp2_1f1b")

    def test_ep2_pp2_1f1b_mesh_zero2(self):
        self.check_case("ep2_pp2_1f1b_mesh_zero2")

    def test_ep2_bf16(self):
        self.check_case("ep2_bf16")

    def test_ep2_tp2(self):
        """Experts over dp, attention over tp: rank 0 holds half the experts and half of
        each attention weight."""
        self.check_case("ep2_tp2")
        self.check_tensor_parallel_blocks("moe", "ep2_tp2")

    def test_ep2_tp2_zero1(self):
        """The same with ZeRO-1 over dp, the experts' shard written first."""
        self.check_case("ep2_tp2_zero1")

    def test_ep2_tp2_zero2_microbatches(self):
        """With ZeRO-2 over dp and 2 microbatches."""
        self.check_case("ep2_tp2_zero2_mb2")

    def test_ep2_tp2_sequence_parallel(self):
        """With Megatron's sequence parallelism over tp."""
        self.check_case("ep2_tp2_sp")

    def test_ep2_tp2_bf16(self):
        """EP=2 x TP=2 in bf16: the attention's partial sums are added in float32 over the tp
        group before their one rounding, the tokens' all-to-alls move bfloat16 unchanged."""
        self.check_case("ep2_tp2_bf16")

    def check_tensor_parallel_blocks(self, model, case):
        """Rank 0 holds the first half of every Megatron-split weight along its dimension,
        split over its tp group; its tokens' all-to-alls run over its dp group [0, 2] and its
        attention's all-reduces over its tp group [0, 1]."""
        plan = self.dump(os.path.join(self.tmp.name, f"{model}_{case}", "plans"))
        groups = {int(group.get("id", 0)): [int(r) for r in group["ranks"]]
                  for group in plan["groups"]}
        kinds = {}
        for stream in plan["streams"]:
            for inst in stream.get("instructions", []):
                collective = inst.get("collective")
                if collective and (collective.get("kind") == "ALL_TO_ALL" or
                                   inst.get("label", "").endswith("tp_all_reduce")):
                    kinds.setdefault(collective.get("kind", "ALL_REDUCE"), set()).add(
                        tuple(groups[int(collective.get("group", 0))]))
        self.assertEqual(kinds, {"ALL_TO_ALL": {(0, 2)}, "ALL_REDUCE": {(0, 1)}}, case)
        loaded = {load["initializer"]: load for load in plan["parameters"]}
        for glob, dim in tensor_params().items():
            names = [name for name in loaded if fnmatch.fnmatchcase(name, glob)]
            self.assertTrue(names, glob)
            for name in names:
                block = loaded[name].get("block")
                self.assertIsNotNone(block, f"[{case}] {name} is not split")
                self.assertEqual(int(block.get("dim", 0)), dim, f"[{case}] {name}: {block}")
                self.assertEqual(int(block.get("start", 0)), 0, f"[{case}] {name}: {block}")

    def test_ep2_zero2_load_balancing_loss(self):
        """A product of batch means: each replica averages the means with the others'."""
        self.check_case("ep2_zero2")

    def test_load_balancing_loss_two_replicas_zero2(self):
        """Data parallelism alone: the means are averaged over the replicas, where the mean of
        each replica's own product (what DDP trains) is another objective, and a split of the
        batch into microbatches is refused naming the mean."""
        model = "moe_aux"
        work, plans = self.plan(model, "dp2_zero2", {
            "directives": [{"op": "zero", "stage": 2, "devices": [0, 1]}]})
        one_process.assert_matches(self, f"{model}_dp2_zero2", self.train(work, plans, True),
                                   self.reference(model), STEPS)
        averages = [inst for stream in self.dump(plans)["streams"]
                    for inst in stream.get("instructions", [])
                    if inst.get("label", "").endswith("/replica_average")]
        self.assertEqual(len(averages), 2 * LAYERS,  # the two means of each layer's term
                         f"[dp2] replica averages: {[i.get('label') for i in averages]}")
        path = harness.write_json(
            os.path.join(work, "split.json"),
            harness.strategy(GLOBAL_BATCH, OPTIMIZER, frozen=FROZEN, directives=[
                {"op": "split", "dim_name": "MB", "num_microbatches": 2},
                {"op": "zero", "stage": 2, "devices": [0, 1]}]))
        refused = harness.run([Tools.plan, self.model_path(model), path, "-o",
                               os.path.join(work, "split_plans")])
        self.assertNotEqual(refused.returncode, 0, refused.describe())
        self.assertIn("takes a mean over the batch's rows", refused.stderr)
        self.assertIn("ReduceMean", refused.stderr)

    def test_expert_memory_is_one_over_ep(self):
        """The expert parameters' bytes, their gradients' and AdamW state's on rank 0 are
        1/EP of one process's; the rest stay whole."""
        model = "moe8"
        _, single = self.plan(model, "single_memory", {})
        full = {k: int(v) for k, v in self.dump(single)["memory"].items()}
        experts = sum(4 * int(np.prod(t.dims))
                      for t in onnx.load(self.model_path(model)).graph.initializer
                      if is_expert(t.name))
        for ep in (2, 4):
            with self.subTest(ep=ep):
                _, plans = self.plan(model, f"ep{ep}_memory", strategy(ep=ep))
                got = {k: int(v) for k, v in self.dump(plans)["memory"].items()}
                saved = experts * (1 - 1 / ep)
                self.assertEqual(got["parameter_bytes"], full["parameter_bytes"] - saved)
                self.assertEqual(got["gradient_bytes"], full["gradient_bytes"] - saved)
                self.assertEqual(got["optimizer_bytes"], full["optimizer_bytes"] - 2 * saved)


if __name__ == "__main__":
    harness.main()
