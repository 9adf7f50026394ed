"""Run-time extents: a dropless mixture of experts written as HuggingFace's Mixtral writes
it (torch.where of the top-2 routing mask, which exports as NonZero; the chosen tokens
gathered, each expert's SwiGLU MLP on just those rows, the results weighted and put back with
index_add_, which exports as ScatterElements), exported from PyTorch and trained by Piper
and by PyTorch from the same weights on the same data: one process, and two microbatches
(each with its own counts). How many tokens reach each expert changes from step to step;
every step's loss must be within 1e-4 relative and the final weights within 1e-3. A second
model splits a dispatch across a 2-stage pipeline: the dispatched rows cross the stage
boundary at their bound, with their count, forward and (as gradients) backward."""
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import harness
from harness import Tools
from test_data_parallel import launch_path, weights_of

STEPS = 8
GLOBAL_BATCH = 4
SAMPLES = 16
LOSS_RTOL = 1e-4
WEIGHT_RTOL = 1e-3
T, VOCAB, D, HIDDEN, EXPERTS = 6, 13, 8, 12, 4


class DroplessMoE(nn.Module):
    """Embedding, one sparse MoE block (top-2 of 4 experts, no capacity limit), LM head."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.gate = nn.Linear(D, EXPERTS, bias=False)
        self.w1 = nn.ModuleList(nn.Linear(D, HIDDEN, bias=False) for _ in range(EXPERTS))
        self.w3 = nn.ModuleList(nn.Linear(D, HIDDEN, bias=False) for _ in range(EXPERTS))
        self.w2 = nn.ModuleList(nn.Linear(HIDDEN, D, bias=False) for _ in range(EXPERTS))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, x, y):
        h = self.tok(x).reshape(-1, D)  # [tokens, D]
        weights = F.softmax(self.gate(h), dim=1)
        weights, chosen = torch.topk(weights, 2, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        mask = F.one_hot(chosen, num_classes=EXPERTS).permute(2, 1, 0)  # [experts, 2, tokens]
        out = torch.zeros_like(h)
        for e in range(EXPERTS):
            choice, token = torch.where(mask[e])
            rows = h[None, token].reshape(-1, D)
            act = F.silu(self.w1[e](rows)) * self.w3[e](rows)
            expert = self.w2[e](act) * weights[token, choice, None]
            out.index_add_(0, token, expert)
        logits = self.head(h + out)
        return F.cross_entropy(logits, y.reshape(-1))


class DispatchAcrossStages(nn.Module):
    """Tokens whose embedding sums above zero (NonZero) go through two layers, the first on
    stage 0 and the second on stage 1, and are added back where they came from."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.first = nn.Linear(D, HIDDEN)
        self.second = nn.Linear(HIDDEN, D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, x, y):
        h = self.tok(x).reshape(-1, D)
        token = torch.where(h.sum(-1) > 0)[0]
        rows = torch.tanh(self.first(h[token]))
        out = torch.zeros_like(h).index_add(0, token, self.second(rows))
        return F.cross_entropy(self.head(h + out), y.reshape(-1))


STAGES = [{"match": "/tok/*", "tags": {"PP": 0}}, {"match": "/first/*", "tags": {"PP": 0}},
          {"match": "/second/*", "tags": {"PP": 1}}, {"match": "/head/*", "tags": {"PP": 1}}]


def token_data(rng):
    return (rng.integers(0, VOCAB, (SAMPLES, T)).astype(np.int64),
            rng.integers(0, VOCAB, (SAMPLES, T)).astype(np.int64))


class DynamicExtentsMatchPyTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_dynamic_extents_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name, **strategy_extra):
        torch.manual_seed(5)
        model = DroplessMoE()
        inputs = token_data(np.random.default_rng(9))
        harness.train_exported_model_like_pytorch(
            self, os.path.join(self.tmp.name, name), model, inputs, {"type": "adamw", "lr": 0.02},
            lambda p: torch.optim.AdamW(p, lr=0.02), STEPS, GLOBAL_BATCH, LOSS_RTOL, WEIGHT_RTOL,
            **strategy_extra)

    def test_one_process(self):
        self.check("single")

    def test_two_microbatches_count_their_own_tokens(self):
        self.check("microbatches",
                   directives=[{"op": "split", "dim_name": "batch", "num_microbatches": 2}])

    def test_dispatched_rows_cross_a_pipeline_stage(self):
        torch.manual_seed(6)
        model = DispatchAcrossStages()
        inputs = token_data(np.random.default_rng(10))
        work = os.path.join(self.tmp.name, "pipeline")
        model_path = harness.export_two_input_model(model, inputs, work)
        strategy = harness.write_json(os.path.join(work, "strategy.json"), harness.strategy(
            GLOBAL_BATCH, {"type": "adamw", "lr": 0.02}, annotations=STAGES,
            directives=[{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1],
                         "num_microbatches": 2}]))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, model_path, strategy, "-o", plans])
        # Stage 1 receives the dispatched rows at their bound (every token) and their count.
        dump = harness.run_ok([Tools.dump, os.path.join(plans, "rank1.plan")]).stdout
        self.assertRegex(dump, r"recv /NonZero_output_0/count ")
        self.assertRegex(dump, r"recv /Tanh_output_0 +/Tanh_output_0 f32\[<=12@t\d+,12\]")
        metrics = os.path.join(work, "metrics.jsonl")
        trained = os.path.join(work, "trained.onnx")
        harness.run_ok([launch_path(), "--plans", plans, "--steps", STEPS, "--data",
                        os.path.join(work, "data"), "--metrics", metrics, "--save-onnx", trained,
                        "--timeout", 60], timeout=240)
        losses = [record["loss"] for record in harness.read_metrics(metrics)]
        expected = harness.train_like_piper(model, inputs, lambda p: torch.optim.AdamW(p, lr=0.02),
                                            STEPS, GLOBAL_BATCH)
        self.assertEqual(len(losses), STEPS)
        for step, (got, want) in enumerate(zip(losses, expected)):
            self.assertLessEqual(abs(got - want) / abs(want), LOSS_RTOL,
                                 f"step {step}: piper {got!r}, pytorch {want!r}")
        saved = weights_of(trained)
        for name, value in model.named_parameters():
            want = value.detach().numpy()
            error = np.linalg.norm(saved[name] - want) / np.linalg.norm(want)
            self.assertLessEqual(error, WEIGHT_RTOL, f"final {name}: {error:.2e}")


if __name__ == "__main__":
    harness.main()
