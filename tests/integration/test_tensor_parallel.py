"""Tensor parallelism (Megatron's plan through the `shard` directive) across
real processes: samples/gpt and the variants of tp_models.py (4 heads with
biases, GQA, tied embeddings, SwiGLU with RMSNorm) trained 10 AdamW steps
under TP=2, TP=4, TP=2 x DP=2 with ZeRO-1 and with ZeRO-3 (2 microbatches)
and TP=2 x PP=2 (1F1B), and with the embedding and head split along the
vocabulary too (vocabulary parallelism, under TP=2, TP=4, sequence
parallelism, bf16, DP and PP), launched with piper-launch (Gloo over localhost),
give every step's loss within 1e-5 relative of the single-process run of the
same model and global batch, and final weights (--save-onnx gathers the
tensor-parallel blocks into whole initializers) within 1e-4, under TP=2 in
bf16 too (the CPU sums bfloat16 products in an order that splitting them does
not change: one process's weights bit for bit) and with sequence parallelism in bf16 (whose
norms' gradient rows split along the sequence are added in another order:
within the float32 tolerances, not bit for bit). In bf16 with vocabulary
parallelism each step trained from the single process's state after the steps
before it (its checkpoint) matches its step within 1e-5 (loss) and 1e-4 (the
whole model after it), and whole runs drift as the softmax's sums split over
the vocabulary take bf16 (1e-3, 1e-2; see one_process.py). The plans themselves: parameter, gradient and optimizer bytes
per rank drop as 1/TP for the sharded parameters, and rank 0's tensor-parallel
all-reduces are Megatron's, per layer and microbatch two of b*s*h elements in
the forward (attention and MLP outputs) and two in the backward (the inputs of
the two column-parallel blocks); in bf16 they move float32 and the backward
sums each column-parallel product's input gradient alone (one all-reduce per
column-parallel weight), so that each is rounded once. The single-process
baselines are themselves checked against PyTorch.

One strategy per test method, so each runs alone:
    /usr/bin/python3 tests/integration/test_tensor_parallel.py --piper-plan ... \
        TensorParallel.test_tp2
"""
import fnmatch
import os
import re
import unittest

import numpy as np
import onnx
import torch

import harness
import one_process
import tp_models

STEPS = 10
GLOBAL_BATCH = 8
SAMPLES = 2 * GLOBAL_BATCH
MICROBATCHES = 2
OPTIMIZER = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
FROZEN = ["*mask*"]  # the causal-mask buffers
# The single-process baseline against PyTorch, as test_samples_vs_pytorch.py checks it.
PYTORCH_LOSS_RTOL = 1e-4
PYTORCH_WEIGHT_RTOL = 1e-3
MODELS = ["gpt"] + list(tp_models.VARIANTS)


class Layout:
    """A strategy over a device mesh and what rank 0 holds under it."""

    def __init__(self, name, mesh, directives, annotations=(), zero=0, microbatches=1,
                 layers=tp_models.LAYERS, sequence_parallel=False, precision="fp32",
                 vocab=False, weight_rtol=None, drift=None):
        self.name = name
        self.drift = drift  # bf16: the whole run's tolerances where not float32's
        self.weight_rtol = weight_rtol  # None: one_process's float32 tolerance
        self.vocab = vocab  # the embedding and head split along the vocabulary too
        self.sequence_parallel = sequence_parallel
        self.precision = precision  # bf16: one_process.tolerances and assert_each_step_matches
        self.mesh = mesh
        self.directives = directives
        self.annotations = list(annotations)
        self.zero = zero
        self.microbatches = microbatches
        self.layers = layers  # transformer layers on rank 0
        sizes = dict(mesh)
        self.tp, self.dp = sizes["tp"], sizes.get("dp", 1)

    def strategy(self, params):
        shard = {"op": "shard", "axis": "tp", "params": params}
        if self.sequence_parallel:
            shard["sequence_parallel"] = True
        return {"mesh": [list(axis) for axis in self.mesh],
                "directives": [dict(d) for d in self.directives] + [shard],
                "annotations": self.annotations, "precision": self.precision}

    def tp_group(self):
        """Rank 0's tensor-parallel group: tp is the last mesh axis, the fastest."""
        return list(range(self.tp))

    def rows(self):
        """b in Megatron's formula: rank 0's rows per microbatch."""
        return GLOBAL_BATCH // self.dp // self.microbatches


def suffix(vocab):
    return "_vocab" if vocab else ""


def tp_only(degree, vocab=False):
    return Layout(f"tp{degree}" + suffix(vocab), [("tp", degree)], [], vocab=vocab)


def tp_sequence_parallel(vocab=False):
    return Layout("tp2_sp" + suffix(vocab), [("tp", 2)], [], sequence_parallel=True, vocab=vocab)


def tp_bf16(vocab=False, sequence_parallel=False):
    # Vocabulary parallelism splits the softmax's sums over the vocabulary: those runs drift
    # (one_process.py). Sequence parallelism splits the norms' gradient rows along the sequence,
    # which the split-invariant row sums halve along the batch: float32's tolerances. Plain
    # TP=2 computes one process's bits: every final weight equal.
    drift = one_process.BF16_DRIFT_RTOL if vocab else None
    exact = not vocab and not sequence_parallel
    return Layout("tp2" + ("_sp" if sequence_parallel else "") + "_bf16" + suffix(vocab),
                  [("tp", 2)], [], precision="bf16", vocab=vocab,
                  sequence_parallel=sequence_parallel, drift=drift,
                  weight_rtol=0.0 if exact else None)


def tp_dp(zero, vocab=False):
    return Layout(f"tp2_dp2_zero{zero}" + suffix(vocab), [("dp", 2), ("tp", 2)],
                  [{"op": "split", "dim_name": "MB", "num_microbatches": MICROBATCHES},
                   {"op": "zero", "stage": zero, "axis": "dp"}],
                  zero=zero, microbatches=MICROBATCHES, vocab=vocab)


def tp_pp(vocab=False):
    half = tp_models.LAYERS // 2
    stages = [{"match": f"/blocks.{layer}/*", "tags": {"PP": layer // half}}
              for layer in range(tp_models.LAYERS)]
    return Layout("tp2_pp2_1f1b" + suffix(vocab), [("pp", 2), ("tp", 2)],
                  [{"op": "pipeline", "schedule": "1f1b", "axis": "pp",
                    "num_microbatches": MICROBATCHES}],
                  stages, microbatches=MICROBATCHES, layers=half, vocab=vocab)


# Each strategy and the models it trains: every model under TP=2; TP=4 needs 4 query and
# KV heads; the compositions take samples/gpt and one variant each.
CASES = {
    "tp2": (tp_only(2), MODELS),
    "tp4": (tp_only(4), ["heads4"]),
    "tp2_sp": (tp_sequence_parallel(), ["gpt", "swiglu", "gqa"]),
    "tp2_bf16": (tp_bf16(), MODELS),
    "tp2_sp_bf16": (tp_bf16(sequence_parallel=True), ["gpt"]),
    "tp2_dp2_zero1": (tp_dp(1), ["gpt", "swiglu"]),
    "tp2_dp2_zero3": (tp_dp(3), ["gpt", "gqa"]),
    "tp2_pp2_1f1b": (tp_pp(), ["gpt", "tied"]),
    # Vocabulary parallelism: samples/gpt's head has a bias, "tied" reads the embedding as its
    # head, "swiglu"'s head has no bias; with dp, microbatches make the token mean global.
    "tp2_vocab": (tp_only(2, vocab=True), ["gpt", "tied", "swiglu"]),
    "tp4_vocab": (tp_only(4, vocab=True), ["heads4"]),
    "tp2_sp_vocab": (tp_sequence_parallel(vocab=True), ["gpt"]),
    "tp2_bf16_vocab": (tp_bf16(vocab=True), ["tied"]),
    "tp2_dp2_zero1_vocab": (tp_dp(1, vocab=True), ["gpt", "tied"]),
    "tp2_pp2_1f1b_vocab": (tp_pp(vocab=True), ["tied"]),
}


class TensorParallel(one_process.SplitModels, unittest.TestCase):
    steps, global_batch, optimizer, frozen = STEPS, GLOBAL_BATCH, OPTIMIZER, FROZEN

    samples = ("gpt",)

    @classmethod
    def setUpClass(cls):
        cls.set_up("piper_tp_", SAMPLES, tp_models.VOCAB, tp_models.BLOCK, seed=15)

    @staticmethod
    def export(model, path):
        tp_models.export(model, path)

    @classmethod
    def torch_model(cls, model):
        """The PyTorch module of `model` holding the weights of its ONNX file."""
        gpt = harness.sample_module("gpt")
        module = gpt.build_model() if model == "gpt" else tp_models.build_model(model)
        return gpt.load_initializers(module, cls.model_path(model))

    @classmethod
    def plan_layout(cls, model, layout):
        params = tp_models.megatron_params(cls.torch_model(model))
        if layout.vocab:
            params.update(tp_models.vocab_params(cls.torch_model(model)))
        return cls.plan(model, layout.name, layout.strategy(params))

    def check_case(self, case):
        layout, models = CASES[case]
        for model in models:
            with self.subTest(model=model):
                self.check_training(model, layout)

    def check_training(self, model, layout):
        work, plans = self.plan_layout(model, layout)
        name = f"{model}_{layout.name}"
        one_process.assert_matches(self, name, self.train(work, plans, launch=True),
                                   self.reference(model, layout.precision), STEPS,
                                   layout.precision, layout.drift, layout.weight_rtol)
        if layout.precision == "bf16":
            one_process.assert_each_step_matches(
                self, name, self.each_step(model, layout.precision, work, plans))

    def test_single_process_matches_pytorch(self):
        """The baselines: every model's single-process Piper run trains what
        PyTorch trains from the same weights on the same rows."""
        targets = np.roll(self.idx, -1, axis=1)
        for model in MODELS:
            with self.subTest(model=model):
                losses, weights = self.reference(model)
                module = self.torch_model(model)
                expected = harness.train_like_piper(
                    module, (self.idx, targets),
                    lambda p: torch.optim.AdamW(p, lr=OPTIMIZER["lr"],
                                                weight_decay=OPTIMIZER["weight_decay"]),
                    STEPS, GLOBAL_BATCH)
                self.assertEqual(len(losses), STEPS, model)
                for step, (got, want) in enumerate(zip(losses, expected)):
                    self.assertLessEqual(abs(got - want) / abs(want), PYTORCH_LOSS_RTOL,
                                         f"[{model}] step {step}: piper {got!r}, "
                                         f"pytorch {want!r}")
                self.assertLess(losses[-1], losses[0], f"[{model}] loss did not fall")
                for param, value in module.named_parameters():
                    error = one_process.relative_error(weights[param], value.detach().numpy())
                    self.assertLessEqual(error, PYTORCH_WEIGHT_RTOL,
                                         f"[{model}] final {param}: {error:.2e}")
                for buffer, value in module.named_buffers():
                    np.testing.assert_array_equal(weights[buffer], value.numpy(),
                                                  f"[{model}] frozen {buffer} changed")
                print(f"[{model}] one process matches PyTorch: losses {losses[0]:.4f} .. "
                      f"{losses[-1]:.4f}")

    def test_tp2(self):
        self.check_case("tp2")

    def test_tp4(self):
        self.check_case("tp4")

    def test_tp2_sequence_parallel(self):
        self.check_case("tp2_sp")

    def test_tp2_bf16(self):
        self.check_case("tp2_bf16")

    def test_tp2_sequence_parallel_bf16(self):
        self.check_case("tp2_sp_bf16")

    def test_tp2_dp2_zero1(self):
        self.check_case("tp2_dp2_zero1")

    def test_tp2_dp2_zero3(self):
        self.check_case("tp2_dp2_zero3")

    def test_tp2_pp2_1f1b(self):
        self.check_case("tp2_pp2_1f1b")

    def test_tp2_vocab(self):
        self.check_case("tp2_vocab")

    def test_tp4_vocab(self):
        self.check_case("tp4_vocab")

    def test_tp2_sequence_parallel_vocab(self):
        self.check_case("tp2_sp_vocab")

    def test_tp2_bf16_vocab(self):
        self.check_case("tp2_bf16_vocab")

    def test_tp2_dp2_zero1_vocab(self):
        self.check_case("tp2_dp2_zero1_vocab")

    def test_tp2_pp2_1f1b_vocab(self):
        self.check_case("tp2_pp2_1f1b_vocab")

    def test_vocab_parallel_never_holds_the_vocabulary_whole(self):
        """Split along the vocabulary, the embedding and the head are never
        gathered, nor are the logits or their gradient: no tensor of rank 0's
        plan has the whole vocabulary as a dimension ("swiglu" has no other
        dimension of that size), where the plan with only the layers split
        holds the whole logits; no collective moves more than b*s*h elements."""
        vocab = tp_models.VOCAB
        layout = CASES["tp2_vocab"][0]
        _, plans = self.plan_layout("swiglu", CASES["tp2"][0])
        whole = [t["name"] for t in self.dump(plans)["tensors"]
                 if str(vocab) in t.get("shape", [])]
        self.assertTrue(whole, "the layers-only plan should hold the whole logits")
        for model in CASES["tp2_vocab"][1]:
            with self.subTest(model=model):
                _, plans = self.plan_layout(model, layout)
                plan = self.dump(plans)
                hidden = self.torch_model(model).tok.weight.shape[1]
                elements = layout.rows() * tp_models.BLOCK * hidden
                moved = self.tp_all_reduces(plan, layout,
                                            ("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER"))
                self.assertEqual([m for m in moved if m[1] > elements], [], f"[{model}]")
                instructions = [i for s in plan["streams"] for i in s.get("instructions", [])]
                kernels = {i["kernel"]["op_type"] for i in instructions if "kernel" in i}
                self.assertFalse(kernels & {"SoftmaxCrossEntropyLoss",
                                            "piper.SoftmaxCrossEntropyLossGrad"}, f"[{model}]")
                # Neither the vocabulary-split weights nor their gradients are gathered.
                for i in instructions:
                    collective = i.get("collective", {})
                    names = [plan["tensors"][t]["name"] for side in ("inputs", "outputs")
                             for t in collective.get(side, [])]
                    self.assertEqual([n for n in names if n.split("/")[-1].startswith(
                        ("tok.weight", "head."))], [], f"[{model}] {i.get('label')}")
                if model == "swiglu":
                    whole = [(t["name"], t["shape"]) for t in plan["tensors"]
                             if str(vocab) in t.get("shape", [])]
                    self.assertEqual(whole, [], f"[{model}] tensors of the whole vocabulary")
                print(f"[{model} tp2_vocab] no collective moves more than {elements} "
                      f"elements; the loss and lookup run on vocabulary blocks")

    def sharded_bytes(self, model):
        """Bytes of the initializers the Megatron plan splits."""
        globs = tp_models.megatron_params(self.torch_model(model))
        return sum(4 * int(np.prod(t.dims))
                   for t in onnx.load(self.model_path(model)).graph.initializer
                   if any(fnmatch.fnmatchcase(t.name, glob) for glob in globs))

    def test_memory_scales_as_one_over_tp(self):
        """Per rank, a sharded parameter's bytes, its gradient's and its AdamW
        state's are 1/TP of the whole; replicated ones stay whole; ZeRO over
        dp then divides what its stage shards by DP."""
        for case in ("tp2", "tp4", "tp2_dp2_zero1", "tp2_dp2_zero3"):
            layout, models = CASES[case]
            model = models[-1]
            with self.subTest(case=case, model=model):
                _, single = self.plan(model, "single_memory", {})
                full = {k: int(v) for k, v in self.dump(single)["memory"].items()}
                _, plans = self.plan_layout(model, layout)
                got = {k: int(v) for k, v in self.dump(plans)["memory"].items()}
                saved = self.sharded_bytes(model) * (1 - 1 / layout.tp)
                states = full["optimizer_bytes"] / full["parameter_bytes"]  # AdamW: m and v
                want = {"parameter_bytes": full["parameter_bytes"] - saved,
                        "gradient_bytes": full["gradient_bytes"] - saved,
                        "optimizer_bytes": full["optimizer_bytes"] - states * saved}
                for role, stage in (("optimizer_bytes", 1), ("gradient_bytes", 2),
                                    ("parameter_bytes", 3)):
                    if layout.zero >= stage:
                        want[role] /= layout.dp
                # ZeRO pads each slice to whole elements.
                tensors = len(self.dump(single)["parameters"])
                for role, value in want.items():
                    self.assertAlmostEqual(got[role], value,
                                           delta=4 * layout.tp * layout.dp * tensors,
                                           msg=f"[{model} {case}] {role}: {got[role]} B, "
                                               f"whole model {full[role]} B")
                print(f"[{model} {case}] " + ", ".join(
                    f"{role} {got[role]} B of {full[role]} B" for role in want))

    @staticmethod
    def reported_volume(plans, rank=0):
        """piper-plan's communication report for `rank`, {kind: bytes}: its
        line "rank 0: communication per step: tensor/expert-parallel
        all-reduce 1024 B (1.00 KiB) in 8; ...", saved beside the plans."""
        with open(os.path.join(os.path.dirname(plans), "piper-plan.txt")) as f:
            printed = f.read()
        line = re.search(rf"^  rank {rank}: communication per step: (.*)$", printed, re.M)
        if line is None:
            raise AssertionError(f"piper-plan printed no communication for rank {rank}:\n"
                                 f"{printed}")
        if line.group(1) == "none":
            return {}
        return {m.group(1): int(m.group(2)) for m in
                (re.fullmatch(r"(.+) (\d+) B \(.*\) in \d+", entry)
                 for entry in line.group(1).split("; "))}

    def tp_all_reduces(self, plan, layout, kinds=("ALL_REDUCE",)):
        """Rank 0's collectives of `kinds` over its tensor-parallel group, as
        (pass, elements, stream, label, bytes) per tensor: the whole tensor (a
        reduce-scatter's input, an all-gather's output). Scalars (the loss, the
        gradient norm's sum of squares) are left out: Megatron's volume counts
        activations."""
        group = layout.tp_group()
        groups = [g["id"] for g in plan["groups"] if sorted(g["ranks"]) == group]
        found = []
        for stream in plan["streams"]:
            for instruction in stream.get("instructions", []):
                collective = instruction.get("collective")
                if not collective or collective.get("kind", "ALL_REDUCE") not in kinds:
                    continue
                if collective.get("group", 0) not in groups:
                    continue
                side = "outputs" if collective.get("kind") == "ALL_GATHER" else "inputs"
                for tensor in collective[side]:
                    shape = [int(n) for n in plan["tensors"][tensor].get("shape", [])]
                    if shape:
                        found.append((instruction.get("pass"), int(np.prod(shape)),
                                      stream["name"], instruction.get("label"),
                                      int(plan["tensors"][tensor]["bytes"])))
        return found

    def test_communication_volume_matches_megatron(self):
        """Per layer and microbatch, rank 0 all-reduces b*s*h elements twice
        in the forward and twice in the backward over its TP group, where b is
        its rows per microbatch, s the sequence and h the hidden size (bf16:
        in the backward once per column-parallel weight)."""
        for case, (layout, models) in CASES.items():
            for model in models:
                if layout.vocab:
                    continue  # test_vocab_parallel_never_holds_the_vocabulary_whole
                with self.subTest(case=case, model=model):
                    _, plans = self.plan_layout(model, layout)
                    if layout.sequence_parallel:
                        self.check_sequence_parallel_volume(model, layout, plans)
                        continue
                    found = self.tp_all_reduces(self.dump(plans), layout)
                    hidden = self.torch_model(model).tok.weight.shape[1]
                    elements = layout.rows() * tp_models.BLOCK * hidden
                    count = 2 * layout.layers * layout.microbatches
                    listing = "\n".join(f"  {p} {n} elements on '{s}': {label}"
                                        for p, n, s, label, _ in found)
                    # A norm written as element-wise ops (RMSNorm) gets its weight's gradient
                    # from partial terms: one all-reduce of its h elements, beyond Megatron's
                    # (whose fused norm backward reads the all-reduced input gradient).
                    norm_gradients = [(p, n, label, b) for p, n, _, label, b in found
                                      if p == "BACKWARD" and n == hidden and
                                      label.startswith("grad/")]
                    activations = [(p, n, b) for p, n, _, label, b in found
                                   if (p, n, label, b) not in norm_gradients]
                    backward = count + self.more_backward_sums(model, layout)
                    for pass_, expected in (("FORWARD", count), ("BACKWARD", backward)):
                        self.assertEqual(
                            [n for p, n, _ in activations if p == pass_], [elements] * expected,
                            f"[{model} {case}] {pass_} all-reduces over ranks "
                            f"{layout.tp_group()}; rank 0 has:\n{listing}")
                    # In bf16 the norm reads its input gradient whole: there are none.
                    self.assertEqual(len(norm_gradients),
                                     2 * layout.layers * layout.microbatches
                                     if model == "swiglu" and backward == count else 0,
                                     f"[{model} {case}] all-reduces beyond Megatron's:\n"
                                     f"{listing}")
                    # piper-plan's report: those all-reduces in bytes (bf16 runs move them in
                    # float32), and the norm's extra.
                    megatron = sum(b for _, _, b in activations)
                    reported = self.reported_volume(plans)
                    self.assertEqual(
                        reported.get("tensor/expert-parallel all-reduce"),
                        megatron + sum(b for _, _, _, b in norm_gradients),
                        f"[{model} {case}] piper-plan reports {reported}")
                    print(f"[{model} {case}] {count + backward} all-reduces of {elements} "
                          f"elements: {(count + backward) * elements} per step, as Megatron's "
                          f"formula ({layout.precision}); piper-plan reports {reported}")


    def more_backward_sums(self, model, layout):
        """Rank 0's backward sums over its TP group beyond Megatron's two per layer and
        microbatch: bf16 sums each column-parallel product's input gradient alone (in float32),
        so that each is rounded once, as one process rounds it."""
        if layout.precision == "fp32":
            return 0
        columns = [glob for glob, dim in
                   tp_models.megatron_params(self.torch_model(model)).items()
                   if dim == 0 and glob.endswith(".weight")]
        return (len(columns) - 2) * layout.layers * layout.microbatches

    def check_sequence_parallel_volume(self, model, layout, plans):
        """With sequence parallelism each of Megatron's all-reduces in a layer
        becomes a reduce-scatter and an all-gather of the same b*s*h elements.
        (Around the layers, a replicated head gathers what it reads.)"""
        everywhere = self.tp_all_reduces(self.dump(plans), layout,
                                         ("REDUCE_SCATTER", "ALL_GATHER"))
        found = [entry for entry in everywhere if "blocks." in entry[3]]
        hidden = self.torch_model(model).tok.weight.shape[1]
        elements = layout.rows() * tp_models.BLOCK * hidden
        count = 4 * layout.layers * layout.microbatches
        listing = "\n".join(f"  {p} {n} elements on '{s}': {label}"
                             for p, n, s, label, _ in found)
        # An RMSNorm written as element-wise ops reduce-scatters twice in its backward: its
        # input gradient dY (for the weight's gradient) and dY * weight (for the input's), one
        # more than Megatron's fused norm, which reads dY once.
        extra = 2 * layout.layers * layout.microbatches if model == "swiglu" else 0
        extra += self.more_backward_sums(model, layout)
        for pass_, more in (("FORWARD", 0), ("BACKWARD", extra)):
            self.assertEqual([n for p, n, _, _, _ in found if p == pass_],
                             [elements] * (count + more),
                             f"[{model} sp] {pass_}; rank 0 has:\n{listing}")
        # piper-plan's report: the same reshards, the head's gathers too, in bytes.
        reported = self.reported_volume(plans)
        self.assertEqual(reported.get("tensor/expert-parallel reduce-scatter", 0) +
                         reported.get("tensor/expert-parallel all-gather", 0),
                         sum(b for _, _, _, _, b in everywhere),
                         f"[{model} sp] piper-plan reports {reported}; rank 0 has:\n{listing}")
        print(f"[{model} {layout.name}] {2 * count + extra} reduce-scatters and all-gathers of "
              f"{elements} elements, as Megatron's sequence parallelism; piper-plan reports "
              f"{reported}")


if __name__ == "__main__":
    harness.main()
