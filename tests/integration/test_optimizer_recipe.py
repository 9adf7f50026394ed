"""Learning-rate schedules and gradient clipping (issue 17, "Optimizer recipe"): samples/gpt
trained 10 steps with AdamW, a cosine schedule with warm-up and a floor, and clip_grad_norm
matches PyTorch (torch.optim.lr_scheduler.LambdaLR with the same f, clip_grad_norm_ before every
step) on one process, over 2 replicas with ZeRO-2 and 2 microbatches, and in a 2-stage 1F1B
pipeline, where the clipped norm spans shards and stages: every step's loss within 1e-5
relative, the final weights within 1e-4, and the metrics' lr and grad_norm are PyTorch's. The
bound is chosen so that PyTorch clips on some steps and not on others (the test checks it, with
a margin no rounding crosses). SGD with momentum and a linear schedule matches too, and so does
the issue's recipe over 50 steps (warm-up 5, cosine to 50, clipped at 1.0) on one process,
under ZeRO-2 and in the pipeline."""
import math
import os
import tempfile
import unittest

import numpy as np
import torch

import harness
import one_process
import test_data_parallel as dp
from harness import Tools

STEPS = 10
GLOBAL_BATCH = 8
SAMPLES = 32
LOSS_RTOL = 1e-5
WEIGHT_RTOL = 1e-4
NORM_RTOL = 1e-5
# Whether a step clips must not hang on rounding: every norm is this far from the bound.
CLIP_MARGIN = 1e-3
FROZEN = ["*mask*"]  # the causal-mask buffers
ADAMW = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01, "clip_grad_norm": 0.57,
         "lr_schedule": {"type": "cosine", "warmup_steps": 3, "total_steps": 10,
                         "min_lr_ratio": 0.1}}
# The recipe: warm-up and cosine over 50 steps, clipped at 1.0.
ADAMW_50 = {"type": "adamw", "lr": 0.03, "weight_decay": 0.01, "clip_grad_norm": 1.0,
            "lr_schedule": {"type": "cosine", "warmup_steps": 5, "total_steps": 50,
                            "min_lr_ratio": 0.1}}
LONG_STEPS = 50
SGD = {"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.001,
       "clip_grad_norm": 0.585,
       "lr_schedule": {"type": "linear", "warmup_steps": 2, "total_steps": 12,
                       "min_lr_ratio": 0.2}}
ZERO2 = [{"op": "split", "dim_name": "MB", "num_microbatches": 2},
         {"op": "zero", "stage": 2, "devices": [0, 1]}]
PIPELINE = [{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1], "num_microbatches": 4}]
TWO_STAGES = [{"match": "/blocks.0/*", "tags": {"PP": 0}},
              {"match": "/blocks.1/*", "tags": {"PP": 1}}]


def schedule_factor(schedule):
    """f(s) of the issue, written out here as the PyTorch side's LambdaLR lambda."""
    w, t, r = schedule.get("warmup_steps", 0), schedule["total_steps"], schedule["min_lr_ratio"]

    def f(step):
        if step < w:
            return step / w
        p = min(1.0, (step - w) / max(1, t - w))
        if schedule["type"] == "linear":
            return r + (1 - r) * (1 - p)
        return r + (1 - r) * 0.5 * (1 + math.cos(math.pi * p))
    return f


def make_optimizer(recipe, parameters):
    if recipe["type"] == "adamw":
        return torch.optim.AdamW(parameters, lr=recipe["lr"], weight_decay=recipe["weight_decay"])
    return torch.optim.SGD(parameters, lr=recipe["lr"], momentum=recipe["momentum"],
                           weight_decay=recipe["weight_decay"])


class OptimizerRecipeMatchesPyTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_optimizer_recipe_")
        cls.export = harness.sample_module("gpt")
        cls.model_path = Tools.sample("gpt", "model.onnx")
        cls.data = os.path.join(cls.tmp.name, "data")
        cls.idx = harness.save_token_sequences(cls.data, SAMPLES, cls.export.VOCAB,
                                               cls.export.BLOCK, seed=9)
        cls.targets = np.roll(cls.idx, -1, axis=1)
        cls.expected = {"adamw": cls.pytorch(ADAMW), "sgd": cls.pytorch(SGD),
                        "adamw_50": cls.pytorch(ADAMW_50, LONG_STEPS)}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def pytorch(cls, recipe, steps=STEPS):
        """PyTorch's run on Piper's rows (step s: rows (s*G + i) mod N): each step's loss, lr
        and total norm before clipping, and the final weights."""
        model = cls.export.load_initializers(cls.export.build_model(), cls.model_path)
        optimizer = make_optimizer(recipe, model.parameters())
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                      schedule_factor(recipe["lr_schedule"]))
        losses, lrs, norms = [], [], []
        for step in range(steps):
            rows = (step * GLOBAL_BATCH + np.arange(GLOBAL_BATCH)) % SAMPLES
            loss = model(torch.from_numpy(cls.idx[rows]), torch.from_numpy(cls.targets[rows]))
            losses.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                        recipe["clip_grad_norm"]).item())
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        weights = {name: value.detach().numpy() for name, value in model.named_parameters()}
        return {"loss": losses, "lr": lrs, "grad_norm": norms, "weights": weights}

    def train(self, name, recipe, directives=(), annotations=(), launch=False, steps=STEPS):
        work = os.path.join(self.tmp.name, name)
        plans, _ = harness.plan_strategy(
            work, self.model_path,
            harness.strategy(GLOBAL_BATCH, recipe, directives=list(directives),
                             annotations=list(annotations), frozen=FROZEN))
        return dp.train_plans_metrics(work, plans, self.data, launch, steps)

    def test_the_bound_clips_some_steps_and_not_others(self):
        """Guards the test's power: PyTorch clips on some steps and leaves others, each norm
        clear of the bound, and the schedule warms up, peaks and decays within the run."""
        for key, recipe in (("adamw", ADAMW), ("sgd", SGD), ("adamw_50", ADAMW_50)):
            bound = recipe["clip_grad_norm"]
            norms = np.array(self.expected[key]["grad_norm"])
            print(f"[{key}] norms {np.round(norms, 4).tolist()}, bound {bound}")
            self.assertTrue((norms > bound).any() and (norms < bound).any(), norms)
            self.assertGreater(np.abs(norms - bound).min() / bound, CLIP_MARGIN, norms)
            lrs = self.expected[key]["lr"]
            self.assertEqual(lrs[0], 0.0)
            self.assertAlmostEqual(max(lrs), recipe["lr"])
            self.assertLess(lrs[-1], 0.5 * recipe["lr"])

    def check(self, name, recipe, directives=(), annotations=(), launch=False, expected="",
              steps=STEPS):
        records, weights = self.train(name, recipe, directives, annotations, launch, steps)
        expected = self.expected[expected or recipe["type"]]
        self.assertEqual(len(records), steps, f"[{name}] {records}")
        for step, record in enumerate(records):
            label = f"[{name}] step {step + 1}"
            want = expected["loss"][step]
            self.assertLessEqual(abs(record["loss"] - want) / abs(want), LOSS_RTOL,
                                 f"{label}: loss {record['loss']!r}, pytorch {want!r}")
            self.assertAlmostEqual(record["lr"], expected["lr"][step], delta=1e-12, msg=label)
            want = expected["grad_norm"][step]
            self.assertLessEqual(abs(record["grad_norm"] - want) / want, NORM_RTOL,
                                 f"{label}: grad_norm {record['grad_norm']!r}, pytorch {want!r}")
        worst = 0.0
        for param, want in expected["weights"].items():
            error = one_process.relative_error(weights[param], want)
            worst = max(worst, error)
            self.assertLessEqual(error, WEIGHT_RTOL, f"[{name}] final {param}: {error:.2e}")
        print(f"[{name}] {steps} losses match PyTorch to {LOSS_RTOL}, weights to {WEIGHT_RTOL} "
              f"(worst {worst:.1e})")

    def test_adamw_cosine_clipped_one_process(self):
        self.check("adamw_single", ADAMW)

    def test_adamw_cosine_clipped_two_replicas_zero2(self):
        self.check("adamw_zero2", ADAMW, ZERO2, launch=True)

    def test_adamw_cosine_clipped_two_stage_pipeline(self):
        self.check("adamw_pp2", ADAMW, PIPELINE, TWO_STAGES, launch=True)

    def test_adamw_warmup_cosine_clipped_at_1_over_50_steps(self):
        """The issue's recipe on one rank, over 2 replicas with ZeRO-2 and in a pipeline."""
        for name, directives, annotations, launch in [
                ("adamw50_single", (), (), False), ("adamw50_zero2", ZERO2, (), True),
                ("adamw50_pp2", PIPELINE, TWO_STAGES, True)]:
            with self.subTest(name=name):
                self.check(name, ADAMW_50, directives, annotations, launch, "adamw_50",
                           LONG_STEPS)

    def test_sgd_linear_clipped_one_process(self):
        self.check("sgd_single", SGD)


if __name__ == "__main__":
    harness.main()
