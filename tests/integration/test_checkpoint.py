"""Sharded checkpoints (piper-run --checkpoint-dir, docs/reliability.md): samples/gpt trained
6 steps on 2 replicas with ZeRO-2, and as a 2-stage 1F1B pipeline, equals bit for bit (every
loss, every final weight) 3 steps saved then 3 resumed, and TP=2 x DP=2 on 4 ranks 2 + 2;
SIGKILL to every process of a job saving every step (ZeRO-2 on 2 and on 4 ranks, 1F1B over 2
stages x 2 replicas), once after a step drawn from a fixed seed and once as a save's temporary
folder appears, resumes from its latest committed step bitwise; a ZeRO-3 checkpoint of 4 ranks
continues as 1F1B over 2 stages x 2 replicas and as TP=2 x DP=2 within 1e-5 of one rank; SIGTERM
to a running job saves the step it finished and the resumed run equals the uninterrupted one
bitwise; what a kill during a save leaves (an uncommitted temporary folder, a step folder
without its index) is passed over; a flipped byte in a shard is refused naming the file; --keep
prunes; a checkpoint of another layout (ZeRO-2 on 2 ranks, a pipeline) continues on one rank
within 1e-5 of the uninterrupted run; and the shards load with the `safetensors` Python
package, whose tensors laid together by index.json are the model --save-onnx writes.

The safetensors check runs under --hf-python (third_party/hf-venv, which has safetensors
through transformers; tools/install-deps.sh creates it)."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

import harness
from harness import Tools

GLOBAL_BATCH = 32
OPTIMIZER = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
ZERO2 = [{"op": "zero", "stage": 2, "devices": [0, 1]}]
ZERO2_X4 = [{"op": "zero", "stage": 2, "devices": [0, 1, 2, 3]}]
PIPELINE = [{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1], "num_microbatches": 4}]
PIPELINE_TAGS = [{"match": "/blocks.0/*", "tags": {"PP": 0}},
                 {"match": "/blocks.1/*", "tags": {"PP": 1}}]
HF_PYTHON = None
# The kill tests' jobs run up to KILL_STEPS steps, the step a kill lands after drawn from
# KILL_SEED (and printed).
KILL_STEPS = 8
KILL_SEED = 17

# Run under --hf-python: loads every rank file with safetensors.numpy and lays each logical
# tensor together from its shards as index.json describes them; writes them to an .npz.
ASSEMBLE = r"""
import json, os, sys
import numpy as np
from safetensors.numpy import load_file
folder, out = sys.argv[1], sys.argv[2]
index = json.load(open(os.path.join(folder, "index.json")))
files = {}
whole = {}
for name, tensor in index["tensors"].items():
    flat = np.full(int(np.prod(tensor["shape"], dtype=np.int64)), np.nan, np.float32)
    full = flat.reshape(tensor["shape"])
    for shard in tensor["shards"]:
        if shard["file"] not in files:
            files[shard["file"]] = load_file(os.path.join(folder, shard["file"]))
        data = files[shard["file"]][shard["key"]]
        box = full
        if "box" in shard:
            box = full[tuple(slice(s, s + n) for s, n in zip(shard["box"]["start"], shard["box"]["size"]))]
        if "flat" in shard:
            offset, length = shard["flat"]["offset"], shard["flat"]["length"]
            values = box.reshape(-1).copy()
            values[offset:offset + length] = data.reshape(-1)
            box[...] = values.reshape(box.shape)
        else:
            box[...] = data
    whole[name] = full
np.savez(out, **whole)
"""


def launch_path():
    return os.path.join(os.path.dirname(Tools.run), "piper-launch")


def read_json(path):
    with open(path) as f:
        return json.load(f)


def finished_steps(metrics):
    """The steps whose metrics lines are written whole so far."""
    if not os.path.exists(metrics):
        return 0
    with open(metrics) as f:
        return sum(1 for line in f if line.endswith("\n"))


def saving_step(checkpoints):
    """The step whose save is under way (its temporary folder exists), or 0."""
    names = os.listdir(checkpoints) if os.path.isdir(checkpoints) else []
    return max([int(n[6:12]) for n in names if n.startswith(".step-") and n.endswith(".tmp")],
               default=0)


def weights_of(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


class CheckpointResume(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_checkpoint_")
        cls.data = os.path.join(cls.tmp.name, "data")
        harness.save_token_sequences(cls.data, GLOBAL_BATCH * 2, 64, 16, seed=9)
        cls.plans = {
            "single": cls.plan("single", []),
            "zero2": cls.plan("zero2", ZERO2),
            "pipeline": cls.plan("pipeline", PIPELINE, PIPELINE_TAGS),
            "zero2_x4": cls.plan("zero2_x4", ZERO2_X4),
        }
        # The samples' 4-rank strategies: TP=2 x DP=2 (Megatron's blocks, ZeRO-1), ZeRO-3, and
        # 1F1B over 2 stages x 2 replicas with ZeRO-1; and their one-rank baseline.
        for name in ("gpt_tp2_dp2", "gpt_zero3", "gpt_pipeline"):
            cls.plans[name] = cls.plan_sample(name, Tools.sample("strategies", name + ".json"))
        with open(Tools.sample("strategies", "gpt_zero3.json")) as f:
            single = json.load(f)
        single["directives"] = []
        cls.plans["gpt_single"] = cls.plan_sample(
            "gpt_single", harness.write_json(os.path.join(cls.tmp.name, "gpt_single.json"), single))

        cls.whole_runs = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def plan(cls, name, directives, annotations=()):
        work = os.path.join(cls.tmp.name, name)
        os.makedirs(work)
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(GLOBAL_BATCH, OPTIMIZER, directives=directives,
                             annotations=list(annotations)))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, Tools.sample("gpt", "model.onnx"), strategy, "-o", plans])
        return plans

    @classmethod
    def plan_sample(cls, name, strategy):
        plans = os.path.join(cls.tmp.name, name, "plans")
        harness.run_ok([Tools.plan, Tools.sample("gpt", "model.onnx"), strategy, "-o", plans])
        return plans

    def work(self, name):
        path = os.path.join(self.tmp.name, self.id().split(".")[-1] + "_" + name)
        os.makedirs(path)
        return path

    def command(self, layout, work, steps, *flags):
        plans = self.plans[layout]
        common = ["--steps", steps, "--data", self.data, "--timeout", 60,
                  "--metrics", os.path.join(work, "metrics.jsonl"),
                  "--save-onnx", os.path.join(work, "trained.onnx")] + list(flags)
        if layout in ("single", "gpt_single"):
            return [Tools.run, "--plan", os.path.join(plans, "rank0.plan")] + common
        return [launch_path(), "--plans", plans] + common

    def train(self, layout, work, steps, *flags):
        harness.run_ok(self.command(layout, work, steps, *flags), timeout=240)
        losses = [m["loss"] for m in harness.read_metrics(os.path.join(work, "metrics.jsonl"))]
        return losses, weights_of(os.path.join(work, "trained.onnx"))

    def assert_bitwise(self, got, want, label):
        got_losses, got_weights = got
        want_losses, want_weights = want
        self.assertEqual(got_losses, want_losses, f"[{label}] losses")
        self.assertEqual(sorted(got_weights), sorted(want_weights))
        for name, value in want_weights.items():
            self.assertTrue(np.array_equal(got_weights[name], value),
                            f"[{label}] final {name} differs from the uninterrupted run's")

    def check_resume_bitwise(self, layout):
        reference = self.train(layout, self.work("whole"), 6)
        work = self.work("resumed")
        checkpoints = os.path.join(work, "checkpoints")
        first = self.train(layout, work, 3, "--checkpoint-dir", checkpoints)
        self.assertEqual(first[0], reference[0][:3])
        self.assertTrue(os.path.exists(os.path.join(checkpoints, "step-000003", "index.json")))
        resumed = self.train(layout, work, 6, "--checkpoint-dir", checkpoints, "--resume")
        self.assert_bitwise(resumed, reference, f"{layout} 3 + resume 3")
        return reference, checkpoints

    def test_zero2_resumes_bitwise_and_loads_in_safetensors(self):
        reference, checkpoints = self.check_resume_bitwise("zero2")
        index = read_json(os.path.join(checkpoints, "step-000006", "index.json"))
        self.assertEqual((index["version"], index["step"], index["optimizer_steps"]), (1, 6, 6))
        self.assertEqual(index["data"]["samples_consumed"], 6 * GLOBAL_BATCH)
        # ZeRO-2: each replica writes its slice of every parameter and of its AdamW moments.
        shards = index["tensors"]["blocks.0.attn.k.weight"]["shards"]
        self.assertEqual(sorted(s["file"] for s in shards),
                         ["rank-00000.safetensors", "rank-00001.safetensors"])
        self.assertTrue(all("flat" in s for s in shards))
        self.assertIn("optim/blocks.0.attn.k.weight/exp_avg_sq", index["tensors"])
        assembled = os.path.join(self.tmp.name, "assembled.npz")
        harness.run_ok([HF_PYTHON, "-c", ASSEMBLE, os.path.join(checkpoints, "step-000006"),
                        assembled])
        loaded = np.load(assembled)
        for name, value in reference[1].items():
            if name in loaded:
                self.assertTrue(np.array_equal(loaded[name], value), f"safetensors {name}")
        trained = [n for n in index["tensors"] if not n.startswith("optim/")]
        self.assertTrue(set(trained) <= set(reference[1]), trained)
        self.assertGreater(len(trained), 10)

    def test_pipeline_resumes_bitwise(self):
        self.check_resume_bitwise("pipeline")

    def test_sigterm_saves_and_resumes_bitwise(self):
        work = self.work("interrupted")
        checkpoints = os.path.join(work, "checkpoints")
        metrics = os.path.join(work, "metrics.jsonl")
        job = subprocess.Popen([str(a) for a in self.command(
            "zero2", work, 100000, "--checkpoint-dir", checkpoints)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        while time.time() < deadline and (not os.path.exists(metrics) or
                                          len(harness.read_metrics(metrics)) < 2):
            time.sleep(0.05)
        job.send_signal(signal.SIGTERM)
        output = job.communicate(timeout=120)[0]
        self.assertEqual(job.returncode, 128 + signal.SIGTERM, output)
        self.assertIn("continue with --resume", output)
        step = len(harness.read_metrics(metrics))
        self.assertTrue(os.path.exists(os.path.join(checkpoints, f"step-{step:06d}", "index.json")),
                        f"no checkpoint of step {step}:\n{output}")
        resumed = self.train("zero2", work, step + 2, "--checkpoint-dir", checkpoints, "--resume")
        reference = self.train("zero2", self.work("whole"), step + 2)
        self.assert_bitwise(resumed, reference, f"SIGTERM after step {step}, resumed")

    def uninterrupted(self, layout):
        """KILL_STEPS steps of `layout`, trained once per layout."""
        if layout not in self.whole_runs:
            self.whole_runs[layout] = self.train(layout, self.work(layout + "_whole"), KILL_STEPS)
        return self.whole_runs[layout]

    def kill_and_resume(self, layout, label, when):
        """Saving every step, a SIGKILL to every process of a `layout` job once `when(metrics,
        checkpoints)` holds; the run resumed from the latest committed step equals the
        uninterrupted one bitwise: every later loss and the final weights. Returns that step
        and whether the kill left a save half done (its temporary folder)."""
        work = self.work(label)
        checkpoints = os.path.join(work, "checkpoints")
        metrics = os.path.join(work, "metrics.jsonl")
        log = os.path.join(work, "output.txt")
        with open(log, "w") as output:
            job = subprocess.Popen([str(a) for a in self.command(
                layout, work, 100000, "--checkpoint-dir", checkpoints, "--save-every", 1)],
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline and job.poll() is None and not when(metrics, checkpoints):
            time.sleep(0.0005)
        if job.poll() is not None:
            with open(log) as output:
                self.fail(f"[{label}] the job ended before the kill:\n{output.read()}")
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=60)
        self.assertLess(time.time(), deadline, f"[{label}] the kill's moment never came")
        names = os.listdir(checkpoints)
        half_done = any(name.endswith(".tmp") for name in names)
        steps = sorted(int(name[5:]) for name in names
                       if name.startswith("step-") and "." not in name)
        self.assertTrue(steps, names)
        latest = steps[-1]
        self.assertLess(latest, KILL_STEPS, f"[{label}] killed too late")
        print(f"[{label}] killed after step {latest} was committed"
              f"{', during a save' if half_done else ''}", flush=True)
        resumed = self.train(layout, self.work(label + "_resumed"), KILL_STEPS,
                             "--checkpoint-dir", checkpoints, "--resume")
        reference = self.uninterrupted(layout)
        self.assert_bitwise(resumed, (reference[0][latest:], reference[1]),
                            f"{label}: SIGKILL after step {latest} was committed, resumed")
        return latest, half_done

    def check_kills(self, layout):
        """Kills once step s's metrics are written, and as the temporary folder of a save of
        step s or later appears, s drawn from KILL_SEED in [2, 5]."""
        step = int(np.random.default_rng([KILL_SEED, len(layout)]).integers(2, 6))
        print(f"[{layout}] killing after step {step}, and during a save from step {step} on",
              flush=True)
        self.kill_and_resume(layout, layout + "_at_step",
                             lambda metrics, _: finished_steps(metrics) >= step)
        _, half_done = self.kill_and_resume(
            layout, layout + "_saving", lambda _, checkpoints: saving_step(checkpoints) >= step)
        return half_done

    def test_sigkill_while_saving_every_step_resumes_bitwise(self):
        self.check_kills("zero2")

    def test_four_ranks_killed_resume_bitwise_zero2(self):
        self.check_kills("zero2_x4")

    def test_four_ranks_killed_resume_bitwise_pipeline_of_replicas(self):
        self.check_kills("gpt_pipeline")

    def test_uncommitted_saves_are_passed_over(self):
        work = self.work("killed")
        checkpoints = os.path.join(work, "checkpoints")
        self.train("zero2", work, 3, "--checkpoint-dir", checkpoints)
        # What a kill during the save of step 6 leaves: its temporary folder half written; and
        # a step folder whose index never came.
        os.makedirs(os.path.join(checkpoints, ".step-000006.tmp"))
        with open(os.path.join(checkpoints, ".step-000006.tmp", "rank-00000.safetensors"), "wb") as f:
            f.write(b"\x10\x00")
        os.makedirs(os.path.join(checkpoints, "step-000009"))
        resumed = self.train("zero2", work, 6, "--checkpoint-dir", checkpoints, "--resume")
        reference = self.train("zero2", self.work("whole"), 6)
        self.assert_bitwise(resumed, reference, "resumed past an interrupted save")

    def test_corrupted_shard_is_refused_naming_the_file(self):
        work = self.work("corrupt")
        checkpoints = os.path.join(work, "checkpoints")
        self.train("zero2", work, 2, "--checkpoint-dir", checkpoints)
        shard = os.path.join(checkpoints, "step-000002", "rank-00001.safetensors")
        with open(shard, "r+b") as f:
            f.seek(-5, os.SEEK_END)
            byte = f.read(1)
            f.seek(-5, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0x01]))
        result = harness.run(self.command("zero2", work, 4, "--checkpoint-dir", checkpoints,
                                          "--resume"), timeout=240)
        self.assertNotEqual(result.returncode, 0, result.describe())
        self.assertIn(f"checkpoint shard '{shard}' is corrupted", result.output)

    def test_keep_prunes_older_steps(self):
        work = self.work("keep")
        checkpoints = os.path.join(work, "checkpoints")
        self.train("single", work, 5, "--checkpoint-dir", checkpoints, "--save-every", 2,
                   "--keep", 2)
        self.assertEqual(sorted(os.listdir(checkpoints)), ["step-000004", "step-000005"])

    def test_other_layouts_continue_on_one_rank(self):
        reference = self.train("single", self.work("whole"), 6)
        for layout in ("zero2", "pipeline"):
            with self.subTest(layout=layout):
                work = self.work(layout)
                checkpoints = os.path.join(work, "checkpoints")
                self.train(layout, work, 3, "--checkpoint-dir", checkpoints)
                losses, weights = self.train("single", work, 6, "--checkpoint-dir", checkpoints,
                                             "--resume")
                self.assertEqual(len(losses), 6)
                for step, (got, want) in enumerate(zip(losses, reference[0])):
                    self.assertLessEqual(abs(got - want) / abs(want), 1e-5,
                                         f"[{layout} -> one rank] step {step + 1}")

    def test_four_ranks_tensor_parallel_resumes_bitwise_and_zero3_continues_as_pipeline_and_tp(self):
        reference = self.train("gpt_tp2_dp2", self.work("whole"), 4)
        work = self.work("tp")
        checkpoints = os.path.join(work, "checkpoints")
        self.train("gpt_tp2_dp2", work, 2, "--checkpoint-dir", checkpoints)
        index = read_json(os.path.join(checkpoints, "step-000002", "index.json"))
        boxes = [s for t in index["tensors"].values() for s in t["shards"] if "box" in s]
        self.assertTrue(boxes, "tensor-parallel blocks are saved as boxes")
        resumed = self.train("gpt_tp2_dp2", work, 4, "--checkpoint-dir", checkpoints, "--resume")
        self.assert_bitwise(resumed, reference, "TP=2 x DP=2, 2 + resume 2")

        # One ZeRO-3 checkpoint of 4 ranks (flat slices of each parameter), resumed from a copy
        # by each layout (its saves go to its copy): as 1F1B over 2 stages x 2 replicas, and
        # tensor-parallel (blocks, boxes in the index) x DP=2.
        single = self.train("gpt_single", self.work("single"), 4)
        saved = os.path.join(self.work("zero3"), "checkpoints")
        self.train("gpt_zero3", os.path.dirname(saved), 2, "--checkpoint-dir", saved)
        for layout, label in (("gpt_pipeline", "1F1B 2 x 2 ZeRO-1"),
                              ("gpt_tp2_dp2", "TP=2 x DP=2")):
            with self.subTest(layout=layout):
                work = self.work("zero3_to_" + layout)
                checkpoints = shutil.copytree(saved, os.path.join(work, "checkpoints"))
                losses, _ = self.train(layout, work, 4, "--checkpoint-dir", checkpoints,
                                       "--resume")
                self.assertEqual(len(losses), 2)
                for step, (got, want) in enumerate(zip(losses, single[0][2:])):
                    self.assertLessEqual(abs(got - want) / abs(want), 1e-5,
                                         f"[ZeRO-3 x 4 -> {label}] step {step + 3}")

    def test_checkpoint_of_another_model_is_refused(self):
        work = self.work("mismatch")
        checkpoints = os.path.join(work, "checkpoints")
        self.train("single", work, 1, "--checkpoint-dir", checkpoints)
        index_path = os.path.join(checkpoints, "step-000001", "index.json")
        index = read_json(index_path)
        index["tensors"]["blocks.0.attn.k.weight"]["shape"] = [16, 64]
        harness.write_json(index_path, index)
        result = harness.run(self.command("single", work, 2, "--checkpoint-dir", checkpoints,
                                          "--resume"))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("holds 'blocks.0.attn.k.weight' as F32 [16,64], this plan as F32 [32,32]",
                      result.output)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--hf-python", required=True)
    args, rest = parser.parse_known_args()
    HF_PYTHON = args.hf_python
    sys.argv = [sys.argv[0]] + rest
    harness.main()
