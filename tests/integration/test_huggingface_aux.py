"""HF Mixtral with its load-balancing loss (samples/hf/export.py mixtral_aux:
output_router_logits=True, the model's own loss as HF computes it, cross-entropy plus
router_aux_loss_coef times the Switch loss) trains on 2 replicas with ZeRO-2 as on one rank and
as PyTorch does: 10 AdamW steps, every loss within 1e-5 relative of the single-process run and
of PyTorch, every final weight within 1e-4. The loss is a product of two means over every token
of every layer, the router logits concatenated along the rows, those of the second layer
computed from the first's dropless dispatch (NonZero, gathers, index_add_): each replica
averages the means with the other's (docs/strategy.md), where DDP trains the mean of each
replica's own product, another objective that the test checks the tolerance tells apart. With
microbatches the means couple them, and planning is refused naming the mean. Runs under
--hf-python as test_huggingface.py does, with its harness."""
import os
import unittest

import test_huggingface  # re-runs this script under --hf-python; noqa: F401 (first)

import torch  # noqa: E402

import harness  # noqa: E402
from harness import Tools  # noqa: E402
from test_huggingface import GLOBAL_BATCH, OPTIMIZER  # noqa: E402

LOSS_RTOL = 1e-5
WEIGHT_RTOL = 1e-4
REPLICAS = 2
ZERO2 = {"op": "zero", "stage": 2, "devices": [0, 1]}


class MixtralLoadBalancingLoss(test_huggingface.HuggingFaceHarness, unittest.TestCase):
    arch = "mixtral_aux"

    def test_two_replicas_zero2_match_one_process(self):
        one = self.train("one_rank")[:2]
        self.compare("one_rank", *one, loss_rtol=LOSS_RTOL, weight_rtol=WEIGHT_RTOL)
        replicas = self.train("dp2_zero2", [ZERO2])[:2]
        self.compare("dp2_zero2", *replicas, loss_rtol=LOSS_RTOL, weight_rtol=WEIGHT_RTOL)
        self.compare("dp2_zero2 vs one_rank", *replicas, reference=one, loss_rtol=LOSS_RTOL,
                     weight_rtol=WEIGHT_RTOL)

    def test_replicas_own_means_are_another_objective(self):
        """DDP's loss at the first step (each replica's own load-balancing term) differs from
        one process's by more than the tolerance, so the test above tells them apart."""
        model = self.initial.model
        input_ids, labels = (torch.from_numpy(a[:GLOBAL_BATCH]) for a in self.arrays)
        rows = GLOBAL_BATCH // REPLICAS
        with torch.no_grad():
            whole = model(input_ids=input_ids, labels=labels)
            own = [model(input_ids=input_ids[r * rows:(r + 1) * rows],
                         labels=labels[r * rows:(r + 1) * rows]).aux_loss
                   for r in range(REPLICAS)]
        term = model.config.router_aux_loss_coef * (sum(own) / REPLICAS - whole.aux_loss)
        print(f"[{self.arch}] DDP's load-balancing term differs from one process's loss by "
              f"{abs(term.item()) / whole.loss.item():.2e} relative")
        self.assertGreater(abs(term.item()) / whole.loss.item(), 5 * LOSS_RTOL)

    def test_microbatches_are_refused_naming_the_mean(self):
        work = os.path.join(self.tmp.name, "split")
        os.makedirs(work)
        strategy = harness.write_json(os.path.join(work, "strategy.json"), harness.strategy(
            GLOBAL_BATCH, OPTIMIZER,
            directives=[{"op": "split", "dim_name": "MB", "num_microbatches": 2}, ZERO2]))
        refused = harness.run([Tools.plan, self.model_path, strategy, "-o",
                               os.path.join(work, "plans")])
        self.assertNotEqual(refused.returncode, 0, refused.describe())
        self.assertIn("the node '/model/ReduceMean' takes a mean over the batch's rows",
                      refused.stderr)


if __name__ == "__main__":
    harness.main()
