"""Live metrics and progress (issue 17): piper-run's metrics lines carry tokens_per_s (the
global batch's samples per second times the tokens of one sample, the per-sample elements of
the plan's token input) and, with --peak-flops, mfu (the rank's planned FLOPs per step over the
step's time and the peak), and leave either key out where it is unknown; rank 0 prints a
progress line every --log-every steps to stderr, and in a 2-rank run the other rank prints
neither progress nor per-step lines. tools/metrics-to-tensorboard.py turns a metrics file into
TensorBoard event files, which tensorboard's EventAccumulator reads back scalar for scalar (under
--hf-python, third_party/hf-venv, where tools/install-deps.sh installs tensorboard)."""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import subprocess
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import harness
from harness import Tools

ADAMW = {"type": "adamw", "lr": 0.01}
SEQUENCE = 16  # samples/gpt: idx and targets are [batch, 16]
PEAK = 2.5e11
PROGRESS = re.compile(r"^step (\d+)/(\d+)  loss (\d+\.\d{4})  ([0-9.]+[kMGT]?) (tok|samples)/s  "
                      r"ETA (\d+h\d\dm|\d+m\d\ds|\d+s)$")
PARENT_BYTES = 768 << 20


def write_wide_linear_model(path, inputs, outputs):
    """loss = mean((x @ w)^2) with x [batch, inputs] and w [inputs, outputs]."""
    w = np.random.default_rng(0).standard_normal((inputs, outputs)).astype(np.float32) * 0.01
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Mul", ["y", "y"], ["y2"]),
         helper.make_node("ReduceMean", ["y2"], ["loss"], keepdims=0)],
        "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", inputs])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


HF_PYTHON = None

# Run under --hf-python: every scalar of the event files under LOGDIR as {tag: [[step, value]]}.
READ_EVENTS = """
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
events = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
events.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in events.Scalars(tag)]
                  for tag in events.Tags()["scalars"]}))
"""


def launch_path():
    return os.path.join(os.path.dirname(Tools.run), "piper-launch")


def short_rate(value):
    """piper-run's rate with three significant digits and a k/M/G suffix."""
    power = 0
    while abs(value) >= 999.5 and power < 4:
        value /= 1000
        power += 1
    decimals = 0 if power == 0 or abs(value) >= 99.95 else 1 if abs(value) >= 9.995 else 2
    return f"{value:.{decimals}f}" + ["", "k", "M", "G", "T"][power]


class Metrics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="piper_metrics_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def plan(self, name, model, directives, global_batch=8):
        work = os.path.join(self.tmp, name)
        plans, _ = harness.plan_strategy(
            work, model, harness.strategy(global_batch, ADAMW, directives=directives))
        return work, plans

    def planned_flops(self, plan):
        dumped = json.loads(harness.run_ok([Tools.dump, "--json", plan]).stdout)
        return dumped["planned_step"]["flops"]

    def progress_lines(self, text):
        lines = [line for line in text.splitlines() if re.match(r"step \d+/", line)]
        for line in lines:
            self.assertRegex(line, PROGRESS)
        return [PROGRESS.match(line) for line in lines]

    def test_token_rate_mfu_and_progress_of_a_language_model(self):
        work, plans = self.plan("gpt", Tools.sample("gpt", "model.onnx"),
                                [{"op": "place", "filter": {}, "devices": [0]}])
        plan = os.path.join(plans, "rank0.plan")
        metrics = os.path.join(work, "metrics.jsonl")
        result = harness.run_ok([Tools.run, "--plan", plan, "--steps", 5, "--metrics", metrics,
                                 "--peak-flops", PEAK, "--log-every", 2])
        records = harness.read_metrics(metrics)
        self.assertEqual([r["step"] for r in records], [1, 2, 3, 4, 5])
        flops = self.planned_flops(plan)
        # samples/gpt is about 30 k parameters, nearly all in matrices: a step of 8 x 16
        # tokens costs about 6 FLOPs per parameter and token (forward 2, backward 4).
        self.assertGreater(flops, 6 * 25e3 * 8 * SEQUENCE, flops)
        self.assertLess(flops, 6 * 60e3 * 8 * SEQUENCE, flops)
        for record in records:
            self.assertEqual(set(record), {"step", "loss", "seconds", "samples_per_s",
                                           "peak_bytes", "peak_rss_bytes", "lr", "grad_norm",
                                           "skipped", "skipped_steps", "tokens_per_s", "mfu"})
            self.assertGreater(record["seconds"], 0)
            self.assertEqual(record["samples_per_s"], 8 / record["seconds"])
            self.assertEqual(record["tokens_per_s"], record["samples_per_s"] * SEQUENCE)
            self.assertEqual(record["mfu"], flops / record["seconds"] / PEAK)
            self.assertGreater(record["mfu"], 0)
        # Progress on stderr after steps 2, 4 and the last, 5; the step lines stay on stdout.
        progress = self.progress_lines(result.stderr)
        self.assertEqual([(int(m[1]), int(m[2])) for m in progress], [(2, 5), (4, 5), (5, 5)],
                         result.describe())
        self.assertEqual(len(re.findall(r"^step \d+ loss ", result.stdout, re.M)), 5)
        self.assertEqual(self.progress_lines(result.stdout), [])
        for match, steps in zip(progress, [records[0:2], records[2:4], records[4:5]]):
            self.assertEqual(match[3], f"{steps[-1]['loss']:.4f}")
            self.assertEqual(match[5], "tok")
            tokens = 8 * SEQUENCE * len(steps) / sum(r["seconds"] for r in steps)
            self.assertEqual(match[4], short_rate(tokens))
        self.assertEqual(progress[-1][6], "0s", "nothing is left after the last step")

        quiet = harness.run_ok([Tools.run, "--plan", plan, "--steps", 3, "--log-every", 0])
        self.assertEqual(self.progress_lines(quiet.output), [])

    def test_tensorboard_events_hold_every_scalar(self):
        import numpy as np

        work, plans = self.plan("tensorboard", Tools.sample("gpt", "model.onnx"),
                                [{"op": "place", "filter": {}, "devices": [0]}])
        metrics = os.path.join(work, "metrics.jsonl")
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", 4,
                        "--metrics", metrics, "--peak-flops", PEAK])
        records = harness.read_metrics(metrics)
        # A resumed run writes the steps after its checkpoint again: the last line wins.
        repeated = dict(records[2], loss=records[2]["loss"] + 1.5)
        with open(metrics, "a") as f:
            f.write(json.dumps(repeated) + "\n")
        records[2] = repeated
        script = os.path.join(Tools.source_dir, "tools", "metrics-to-tensorboard.py")
        logdir = os.path.join(work, "runs", "gpt")
        converted = harness.run_ok([HF_PYTHON, script, metrics, logdir])
        self.assertIn("written to", converted.stdout)
        events = json.loads(harness.run_ok([HF_PYTHON, "-c", READ_EVENTS, logdir]).stdout)
        expected = {}
        for record in records:
            for name, value in record.items():
                if name != "step":
                    expected.setdefault(name, []).append([record["step"], float(value)])
        self.assertEqual(set(events), set(expected))
        self.assertIn("tokens_per_s", events)
        self.assertIn("mfu", events)
        for tag, points in expected.items():
            self.assertEqual([step for step, _ in events[tag]], [step for step, _ in points], tag)
            for (step, got), (_, want) in zip(events[tag], points):
                # TensorBoard keeps scalars in float32.
                self.assertEqual(np.float32(got), np.float32(want), f"{tag} at step {step}")

        with open(os.path.join(work, "bad.jsonl"), "w") as f:
            f.write(json.dumps(records[0]) + "\n{\"loss\": 1}\n")
        bad = harness.run([HF_PYTHON, script, os.path.join(work, "bad.jsonl"),
                           os.path.join(work, "runs", "bad")])
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("bad.jsonl:2: no integer \"step\"", bad.stderr)

    def test_keys_left_out_where_unknown(self):
        """samples/mlp takes float features and class labels [batch]: no tokens; no peak: no
        mfu."""
        work, plans = self.plan("mlp", Tools.sample("mlp", "model.onnx"),
                                [{"op": "place", "filter": {}, "devices": [0]}], 32)
        metrics = os.path.join(work, "metrics.jsonl")
        result = harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"),
                                 "--steps", 3, "--metrics", metrics, "--log-every", 3])
        for record in harness.read_metrics(metrics):
            self.assertNotIn("tokens_per_s", record)
            self.assertNotIn("mfu", record)
            self.assertIn("grad_norm", record)
        progress = self.progress_lines(result.stderr)
        self.assertEqual(len(progress), 1, result.describe())
        self.assertEqual(progress[0][5], "samples")

    def test_peak_rss_is_the_runs_own(self):
        """peak_rss_bytes is the process's own high-water mark: at least the arena it really
        touched (a 16 MiB weight with its gradient and AdamW moments), and not the peak of the
        large parent it was forked from (getrusage's ru_maxrss carries that over an exec)."""
        work = os.path.join(self.tmp, "rss")
        os.makedirs(work)
        model = write_wide_linear_model(os.path.join(work, "wide.onnx"), 1024, 4096)
        _, plans = self.plan("rss_plans", model, [])
        plan = os.path.join(plans, "rank0.plan")
        arena = json.loads(harness.run_ok([Tools.dump, "--json", plan]).stdout)["memory"]
        self.assertGreaterEqual(int(arena["arena_bytes"]), 4 * 1024 * 4096 * 4, arena)
        parent = np.ones(PARENT_BYTES // 8)  # touched: resident in this process and its fork
        metrics = os.path.join(work, "metrics.jsonl")
        # A plain fork (preexec_fn rules out vfork), as a launcher that forks starts a rank.
        subprocess.run([str(a) for a in [Tools.run, "--plan", plan, "--steps", 2, "--metrics",
                                         metrics]], check=True, capture_output=True,
                       timeout=120, preexec_fn=lambda: None)
        del parent
        for record in harness.read_metrics(metrics):
            self.assertGreaterEqual(record["peak_rss_bytes"], int(arena["arena_bytes"]), record)
            self.assertLess(record["peak_rss_bytes"], PARENT_BYTES, record)

    def test_bad_values_are_refused(self):
        _, plans = self.plan("refused", Tools.sample("mlp", "model.onnx"),
                             [{"op": "place", "filter": {}, "devices": [0]}], 32)
        plan = os.path.join(plans, "rank0.plan")
        for flag, value in (("--log-every", "-1"), ("--peak-flops", "0"),
                            ("--peak-flops", "-5e12")):
            result = harness.run([Tools.run, "--plan", plan, "--steps", 1, flag, value])
            self.assertNotEqual(result.returncode, 0, result.describe())
            self.assertIn(flag, result.stderr, result.describe())

    def test_only_rank_0_reports_progress_and_steps_in_a_2_rank_run(self):
        work, plans = self.plan("dp2", Tools.sample("gpt", "model.onnx"),
                                [{"op": "zero", "stage": 2, "devices": [0, 1]}])
        metrics = os.path.join(work, "m%r.jsonl")
        result = harness.run_ok([launch_path(), "--plans", plans, "--steps", 4, "--log-every",
                                 1, "--metrics", metrics, "--peak-flops", PEAK], timeout=180)
        rank0 = [line[len("[rank 0] "):] for line in result.stderr.splitlines()
                 if line.startswith("[rank 0] ")]
        self.assertEqual([int(m[1]) for m in self.progress_lines("\n".join(rank0))],
                         [1, 2, 3, 4], result.describe())
        self.assertNotIn("[rank 1] step", result.output, result.describe())
        self.assertEqual(len(re.findall(r"^\[rank 0\] step \d+ loss ", result.stdout, re.M)), 4)
        # Each rank trains half the global batch, the metrics count the whole: the same
        # tokens per sample on both, and each rank's own planned FLOPs.
        for rank in range(2):
            flops = self.planned_flops(os.path.join(plans, f"rank{rank}.plan"))
            for record in harness.read_metrics(metrics.replace("%r", str(rank))):
                self.assertEqual(record["tokens_per_s"], record["samples_per_s"] * SEQUENCE)
                self.assertEqual(record["mfu"], flops / record["seconds"] / PEAK)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--hf-python", required=True)
    args, rest = parser.parse_known_args()
    HF_PYTHON = args.hf_python
    sys.argv = [sys.argv[0]] + rest
    harness.main()
