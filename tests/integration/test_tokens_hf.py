"""HuggingFace GPT-2 (samples/hf/export.py, exported as a user does) trains from a flat token
file with --token-inputs input_ids=0,labels=0 (the model shifts its labels itself) as PyTorch
does on the same windows, read here with numpy at the positions docs/user-guide.md gives: every
loss within 1e-5 relative, on one rank and on 2 replicas with ZeRO-2. Runs under --hf-python as
test_huggingface.py does."""
import copy
import os
import tempfile
import unittest

import test_huggingface  # re-runs this script under --hf-python; noqa: F401 (first)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import harness  # noqa: E402
from harness import Tools  # noqa: E402
from test_tokens import ZERO2, launch_path, write_tokens  # noqa: E402

GLOBAL_BATCH = 4
STEPS = 6
SEED = 5
LOSS_RTOL = 1e-5
OFFSETS = {"input_ids": 0, "labels": 0}


class HuggingFaceGpt2FromTokens(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_tokens_hf_")
        export = test_huggingface.export_module()
        cls.model_path, cls.model, _ = export.export("gpt2", cls.tmp.name)
        cls.seq = export.SEQ
        cls.token_path = os.path.join(cls.tmp.name, "train.bin")
        cls.tokens = write_tokens(cls.token_path, 50_000, export.VOCAB, seed=21)
        cls.expected = cls.pytorch_losses()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def pytorch_losses(cls):
        model = copy.deepcopy(cls.model)
        optimizer = test_huggingface.make_optimizer(model.parameters())
        losses = []
        for step in range(STEPS):
            batch = harness.token_batch(cls.tokens, SEED, step, GLOBAL_BATCH, cls.seq, OFFSETS)
            np.testing.assert_array_equal(batch["input_ids"], batch["labels"])
            loss = model(torch.from_numpy(batch["input_ids"]), torch.from_numpy(batch["labels"]))
            losses.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return losses

    def check(self, name, directives):
        work = os.path.join(self.tmp.name, name)
        os.makedirs(work)
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(GLOBAL_BATCH, test_huggingface.OPTIMIZER, directives=directives))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, self.model_path, strategy, "-o", plans])
        metrics = os.path.join(work, "metrics.jsonl")
        flags = ["--steps", STEPS, "--tokens", self.token_path, "--token-dtype", "uint16",
                 "--token-inputs", "input_ids=0,labels=0", "--seed", SEED, "--metrics", metrics]
        if directives:
            harness.run_ok([launch_path(), "--plans", plans, "--timeout", 60] + flags,
                           timeout=240)
        else:
            harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan")] + flags)
        losses = [record["loss"] for record in harness.read_metrics(metrics)]
        self.assertEqual(len(losses), STEPS, name)
        errors = [abs(got - want) / abs(want) for got, want in zip(losses, self.expected)]
        print(f"[gpt2 {name}] losses {losses[0]:.6f} -> {losses[-1]:.6f}; worst error vs "
              f"PyTorch {max(errors):.2e}")
        for step, (got, want) in enumerate(zip(losses, self.expected)):
            self.assertLessEqual(abs(got - want) / abs(want), LOSS_RTOL,
                                 f"[gpt2 {name}] step {step}: piper {got!r}, pytorch {want!r}")

    def test_one_rank(self):
        self.check("one_rank", [])

    def test_two_replicas_zero2(self):
        self.check("zero2", ZERO2)


if __name__ == "__main__":
    harness.main()
