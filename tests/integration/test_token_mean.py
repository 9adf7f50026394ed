"""Token means over a divided batch: samples/gpt, whose loss is F.cross_entropy (exported with
ignore_index -100), trained on targets that are -100 at a different number of positions in
every row, as HF labels mark padding and unmasked tokens. One process matches PyTorch; 2
replicas x ZeRO-2, 2 microbatches, and both together match one process (every step's loss
within 1e-5 relative, final weights within 1e-4), where the mean of each part's own mean (what
DDP trains) does not: the test checks that it differs on this data. Split along the vocabulary
over 2 tensor-parallel members (the embedding and the head), alone and with 2 replicas x 2
microbatches, the blockwise cross-entropy keeps ignore_index and the global token mean exact."""
import os
import tempfile
import unittest

import numpy as np
import torch

import harness
import one_process
import test_data_parallel as dp
from harness import Tools

STEPS = dp.STEPS  # what dp.train_plans trains
GLOBAL_BATCH = 8
SAMPLES = 32
IGNORE = -100
PYTORCH_LOSS_RTOL = 1e-4
PYTORCH_WEIGHT_RTOL = 1e-3
OPTIMIZER = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
FROZEN = ["*mask*"]  # the causal-mask buffers
VOCAB_SHARD = {"op": "shard", "axis": "tp", "params": {"tok.weight": 0, "head.*": 0}}


def masked_data(directory, vocab, block):
    """Next-token targets with row r ignoring (5 r mod 15) random positions: every row has
    its own number of labelled tokens, so parts of a step differ in count."""
    idx = harness.save_token_sequences(directory, SAMPLES, vocab, block, seed=11)
    targets = np.roll(idx, -1, axis=1)
    rng = np.random.default_rng(12)
    for row in range(SAMPLES):
        targets[row, rng.permutation(block)[:(5 * row) % 15]] = IGNORE
    np.save(os.path.join(directory, "targets.npy"), targets)
    return idx, targets


class TokenMeansMatchOneProcess(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_token_mean_")
        cls.export = harness.sample_module("gpt")
        cls.model_path = Tools.sample("gpt", "model.onnx")
        cls.data = os.path.join(cls.tmp.name, "data")
        cls.idx, cls.targets = masked_data(cls.data, cls.export.VOCAB, cls.export.BLOCK)
        cls.reference = cls.train("single", [], launch=False)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def train(cls, name, strategy_directives, launch=True, **extra):
        work = os.path.join(cls.tmp.name, name)
        plans, _ = harness.plan_strategy(
            work, cls.model_path,
            harness.strategy(GLOBAL_BATCH, OPTIMIZER, directives=strategy_directives,
                             frozen=FROZEN, **extra))
        return dp.train_plans(work, plans, cls.data, launch)

    def model(self):
        return self.export.load_initializers(self.export.build_model(), self.model_path)

    def rows(self, step):
        return (step * GLOBAL_BATCH + np.arange(GLOBAL_BATCH)) % SAMPLES

    def test_data_makes_per_part_means_differ(self):
        """Guards the test's power: on the first step's rows, the mean of two halves' means
        (DDP over 2 replicas) is off the token mean over all rows by ten times the tolerance
        (token losses of an untrained model are all near log(vocabulary), so the gap is small
        but far above the tolerance)."""
        model, rows = self.model(), self.rows(0)
        with torch.no_grad():
            whole = model(torch.from_numpy(self.idx[rows]), torch.from_numpy(self.targets[rows]))
            halves = [model(torch.from_numpy(self.idx[part]), torch.from_numpy(self.targets[part]))
                      for part in np.split(rows, 2)]
        labelled = [(self.targets[part] != IGNORE).sum() for part in np.split(rows, 2)]
        self.assertNotEqual(labelled[0], labelled[1])
        gap = abs(float(sum(halves)) / 2 - float(whole)) / float(whole)
        print(f"[token mean] labelled tokens per half {labelled}; mean of the halves' means is "
              f"{gap:.2e} off the token mean")
        self.assertGreater(gap, 10 * one_process.LOSS_RTOL)

    def test_one_process_matches_pytorch(self):
        model = self.model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
        expected = []
        for step in range(STEPS):
            rows = self.rows(step)
            loss = model(torch.from_numpy(self.idx[rows]), torch.from_numpy(self.targets[rows]))
            expected.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        losses, weights = self.reference
        for step, (got, want) in enumerate(zip(losses, expected)):
            self.assertLessEqual(abs(got - want) / abs(want), PYTORCH_LOSS_RTOL,
                                 f"step {step}: piper {got!r}, pytorch {want!r}")
        for param, value in model.named_parameters():
            error = one_process.relative_error(weights[param], value.detach().numpy())
            self.assertLessEqual(error, PYTORCH_WEIGHT_RTOL, f"final {param}: {error:.2e}")

    def check(self, replicas, stage, microbatches):
        name = f"dp{replicas}_zero{stage}_mb{microbatches}"
        strategy_directives = dp.directives(replicas, stage, microbatches)
        if replicas == 1:
            strategy_directives = strategy_directives[:1]  # the split alone
        losses, weights = self.train(name, strategy_directives, launch=replicas > 1)
        one_process.assert_matches(self, name, (losses, weights), self.reference, STEPS)

    def check_vocab_parallel(self, replicas, microbatches):
        name = f"tp2_vocab_dp{replicas}_mb{microbatches}"
        strategy_directives = [VOCAB_SHARD]
        mesh = [["tp", 2]]
        if replicas > 1:
            strategy_directives = [
                {"op": "split", "dim_name": "MB", "num_microbatches": microbatches},
                {"op": "zero", "stage": 1, "axis": "dp"}, VOCAB_SHARD]
            mesh = [["dp", replicas], ["tp", 2]]
        losses, weights = self.train(name, strategy_directives, mesh=mesh)
        one_process.assert_matches(self, name, (losses, weights), self.reference, STEPS)

    def test_two_replicas_zero2(self):
        self.check(2, 2, 1)

    def test_two_microbatches(self):
        self.check(1, 0, 2)

    def test_two_replicas_zero2_two_microbatches(self):
        self.check(2, 2, 2)

    def test_vocab_parallel(self):
        self.check_vocab_parallel(1, 1)

    def test_vocab_parallel_two_replicas_two_microbatches(self):
        self.check_vocab_parallel(2, 2)


if __name__ == "__main__":
    harness.main()
