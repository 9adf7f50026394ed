"""HF Mixtral with its load-balancing loss (samples/hf/export.py mixtral_aux:
output_router_logits=True, the model's own loss as HF computes it, cross-entropy plus
router_aux_loss_coef times the Switch loss) trains on 2 replicas with ZeRO-2 as on one rank and
as PyTorch does: 10 AdamW steps, every loss within 1e-5 relative of the single-process run and
of PyTorch, every final weight within 1e-4. The loss is a product of two means over every token
of every layer, the router logits concatenated along the rows, those of the second layer
computed from the first's dropless dispatch (NonZero, gathers, index_add_): each replica
averages the means with the other's (docs/strategy.md), where DDP trains the mean of each
replica's own product, another objective that the test checks the tolerance tells apart. With
microbatches the means couple them, and planning is refused naming the mean.

HF Mixtral's experts, one module each (experts.N, its own dropless dispatch), spread over 2
replicas by a shard of style "expert" (docs/strategy.md, Expert parallelism): 2 experts on each,
the rows each replica routed to an expert exchanged by all-to-all-v, train as one process and as
PyTorch do, alone, with ZeRO-2 and 2 microbatches, and over 4 replicas (one expert each), within
the same tolerances; planning refuses experts that do not spread evenly or are not numbered
0 … E-1, naming the directive's tag. Runs under
--hf-python as test_huggingface.py does, with its harness."""
import collections
import json
import os
import re
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



def expert_parallel_sample():
    """samples/strategies/hf_mixtral_ep2.json (docs/strategy.md's exact strategy): each of the
    4 experts' nodes numbered by the tag EXPERT, spread over 2 replicas along dp."""
    with open(Tools.sample("strategies", "hf_mixtral_ep2.json")) as f:
        return json.load(f)


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


class MixtralExpertModules(test_huggingface.HuggingFaceHarness, unittest.TestCase):
    """Expert parallelism over HF Mixtral's expert modules, EP=2 over the replicas."""
    arch = "mixtral"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sample = expert_parallel_sample()
        cls.shard = cls.sample["directives"][1]

    def train_spread(self, name, directives, replicas=REPLICAS):
        losses, weights, _ = self.train(name, directives, self.sample["annotations"],
                                        mesh=[["dp", replicas]])
        return losses, weights

    def test_replicas_spread_the_experts_as_one_process_trains(self):
        one = self.train("one_rank")[:2]
        self.compare("one_rank", *one, loss_rtol=LOSS_RTOL, weight_rtol=WEIGHT_RTOL)
        for name, directives, replicas in [
                ("ep2", self.sample["directives"], REPLICAS),
                ("ep2_zero2_mb2", [{"op": "split", "dim_name": "MB", "num_microbatches": 2},
                                   {"op": "zero", "stage": 2, "axis": "dp"}, self.shard],
                 REPLICAS),
                ("ep4", self.sample["directives"], 4)]:
            spread = self.train_spread(name, directives, replicas)
            self.compare(name, *spread, loss_rtol=LOSS_RTOL, weight_rtol=WEIGHT_RTOL)
            self.compare(f"{name} vs one_rank", *spread, reference=one, loss_rtol=LOSS_RTOL,
                         weight_rtol=WEIGHT_RTOL)
        self.check_planned_exchanges()

    def check_planned_exchanges(self):
        """Rank r loads experts 2r and 2r + 1 of each layer; each layer's 2 slots exchange their
        rows by all-to-all-v and return the outputs, and in the backward the output gradients go
        the same way and return as two input gradients (of the w1 and w3 products, which the
        dispatch's gradient sums outside the experts)."""
        plans = os.path.join(self.tmp.name, "ep2", "plans")
        for rank in range(REPLICAS):
            dump = harness.run_ok([Tools.dump, os.path.join(plans, f"rank{rank}.plan")]).stdout
            loaded = re.findall(r"^  \S+\.layers\.(\d)\.block_sparse_moe\.experts\.(\d)\.w1\.weight"
                                r"(?: -> \S+)? f32\[64,32\]  parameter$", dump, re.MULTILINE)
            self.assertEqual(sorted(loaded), [(layer, str(expert)) for layer in "01"
                                              for expert in (2 * rank, 2 * rank + 1)], dump)
            exchanges = collections.Counter(
                re.findall(r" ([FB]) +mb\d+ +(all-to-all-v(?:-return)?) ", dump))
            self.assertEqual(exchanges, {("F", "all-to-all-v"): 4,
                                         ("F", "all-to-all-v-return"): 4,
                                         ("B", "all-to-all-v"): 4,
                                         ("B", "all-to-all-v-return"): 8}, dump)

    def test_experts_that_do_not_spread_are_refused_naming_the_tag(self):
        experts = self.sample["annotations"]
        for name, annotations, expected in [
                ("three_experts", experts[:3],
                 "the 3 experts tagged \"EXPERT\" do not spread evenly over groups of 2 devices"),
                ("numbered_past_the_end",
                 experts[:3] + [{"match": "*/experts.3/*", "tags": {"EXPERT": 7}}],
                 "is tagged \"EXPERT\": 7, but the 4 experts tagged must be numbered 0 to 3")]:
            work = os.path.join(self.tmp.name, name)
            os.makedirs(work)
            strategy = harness.write_json(os.path.join(work, "strategy.json"),
                                          dict(self.sample, annotations=annotations))
            refused = harness.run([Tools.plan, self.model_path, strategy, "-o",
                                   os.path.join(work, "plans")])
            self.assertNotEqual(refused.returncode, 0, refused.describe())
            self.assertIn("$.directives[1].tag (shard)", refused.stderr)
            self.assertIn(expected, refused.stderr)


if __name__ == "__main__":
    harness.main()
