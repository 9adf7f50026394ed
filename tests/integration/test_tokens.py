"""Token files (piper-run --tokens, docs/user-guide.md "Token files"): samples/gpt trained from
a flat uint16 token file with --token-inputs idx=0,targets=1 matches PyTorch trained on the same
windows (read here with numpy from the file, at the positions the user guide gives) within 1e-5
per step, on one rank, on 2 replicas with ZeRO-2 and as a 2-stage 1F1B pipeline; a run resumed from a checkpoint mid-stream
continues the stream bitwise (the index records the stream; another file's is refused); a token file more than four times the run's anonymous memory
(RssAnon, read from /proc while it runs) trains, its windows drawn from all over the file; and
the memory of a --data run does not grow with the size of its .npy files (they are mapped).
HuggingFace GPT-2 from a token file is test_tokens_hf.py."""
import json
import os
import subprocess
import tempfile
import time
import unittest

import numpy as np
import torch

import harness
from harness import Tools

GLOBAL_BATCH = 4
STEPS = 6
SEED = 3
LOSS_RTOL = 1e-5
OPTIMIZER = {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01}
FROZEN = ["*mask*"]  # the causal-mask buffers
OFFSETS = {"idx": 0, "targets": 1}
INPUTS = "idx=0,targets=1"
ZERO2 = [{"op": "zero", "stage": 2, "devices": [0, 1]}]
# Stage 0 reads idx alone, stage 1 targets alone: each rank draws the windows of the inputs it has.
PIPELINE = [{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1], "num_microbatches": 4}]
PIPELINE_TAGS = [{"match": "/blocks.0/*", "tags": {"PP": 0}},
                 {"match": "/blocks.1/*", "tags": {"PP": 1}}]


def launch_path():
    return os.path.join(os.path.dirname(Tools.run), "piper-launch")


def write_tokens(path, count, vocab, seed, chunk=1 << 25):
    """`count` random uint16 ids below `vocab`, written in chunks (the test's own memory stays
    small); returns the file mapped read-only."""
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        for start in range(0, count, chunk):
            rng.integers(0, vocab, min(chunk, count - start), dtype=np.uint16).tofile(f)
    return np.memmap(path, dtype=np.uint16, mode="r")


def memory_of(pid):
    """RssAnon and VmHWM (the peak resident set) of process `pid`, in bytes. The metrics'
    peak_rss_bytes (getrusage) would not do: Linux carries it over exec from the forked
    test process."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values["RssAnon"], values["VmHWM"]


def run_watching_memory(argv):
    """Runs `argv`, reading its /proc status every millisecond; returns its output and the
    largest RssAnon and VmHWM seen."""
    peak_anon = peak_rss = 0
    with subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as process:
        while process.poll() is None:
            try:
                anon, rss = memory_of(process.pid)
                peak_anon, peak_rss = max(peak_anon, anon), max(peak_rss, rss)
            except (FileNotFoundError, ProcessLookupError, KeyError):
                pass  # exited between poll() and the read
            time.sleep(0.001)
        output = process.stdout.read()
    if process.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {process.returncode}\n{output}")
    if peak_anon == 0:
        raise AssertionError(f"the memory of {argv[0]} was never read")
    return output, peak_anon, peak_rss


class TokenFilesMatchPyTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_tokens_")
        cls.gpt = harness.sample_module("gpt")
        cls.model_path = Tools.sample("gpt", "model.onnx")
        cls.token_path = os.path.join(cls.tmp.name, "train.bin")
        cls.tokens = write_tokens(cls.token_path, 200_000, cls.gpt.VOCAB, seed=11)
        cls.one_rank = cls.plan("one_rank", [])
        cls.zero2 = cls.plan("zero2", ZERO2)
        cls.pipeline = cls.plan("pipeline", PIPELINE, PIPELINE_TAGS)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def plan(cls, name, directives, annotations=()):
        return harness.plan_strategy(
            os.path.join(cls.tmp.name, name), cls.model_path,
            harness.strategy(GLOBAL_BATCH, OPTIMIZER, directives=directives, frozen=FROZEN,
                             annotations=list(annotations)))[0]

    def command(self, plans, work, steps, *flags, token_path=None):
        os.makedirs(work, exist_ok=True)
        common = ["--steps", steps, "--tokens", token_path or self.token_path,
                  "--token-inputs", INPUTS, "--seed", SEED,
                  "--metrics", os.path.join(work, "metrics.jsonl"),
                  "--save-onnx", os.path.join(work, "trained.onnx"), *flags]
        if os.path.exists(os.path.join(plans, "rank1.plan")):
            return [launch_path(), "--plans", plans, "--timeout", 60] + common
        return [Tools.run, "--plan", os.path.join(plans, "rank0.plan")] + common

    def train(self, plans, name, steps, *flags):
        """Piper's losses and the trained model's bytes."""
        work = os.path.join(self.tmp.name, name)
        harness.run_ok(self.command(plans, work, steps, *flags), timeout=240)
        with open(os.path.join(work, "trained.onnx"), "rb") as f:
            trained = f.read()
        return [r["loss"] for r in harness.read_metrics(os.path.join(work, "metrics.jsonl"))], \
            trained

    def pytorch_losses(self, tokens, steps):
        model = self.gpt.load_initializers(self.gpt.build_model(), self.model_path)
        optimizer = torch.optim.AdamW(model.parameters(), lr=OPTIMIZER["lr"],
                                      weight_decay=OPTIMIZER["weight_decay"])
        losses = []
        for step in range(steps):
            batch = harness.token_batch(tokens, SEED, step, GLOBAL_BATCH, self.gpt.BLOCK,
                                        OFFSETS)
            loss = model(torch.from_numpy(batch["idx"]), torch.from_numpy(batch["targets"]))
            losses.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return losses

    def assert_close(self, got, want, label):
        self.assertEqual(len(got), len(want), label)
        errors = [abs(g - w) / abs(w) for g, w in zip(got, want)]
        print(f"[{label}] losses {got[0]:.6f} -> {got[-1]:.6f}; worst error vs PyTorch "
              f"{max(errors):.2e}")
        for step, (g, w) in enumerate(zip(got, want)):
            self.assertLessEqual(abs(g - w) / abs(w), LOSS_RTOL,
                                 f"[{label}] step {step}: piper {g!r}, pytorch {w!r}")

    def test_one_rank_zero2_and_pipeline_match_pytorch_on_the_same_windows(self):
        want = self.pytorch_losses(self.tokens, STEPS)
        self.assert_close(self.train(self.one_rank, "one_rank_run", STEPS)[0], want, "one rank")
        self.assert_close(self.train(self.zero2, "zero2_run", STEPS)[0], want, "2 x ZeRO-2")
        self.assert_close(self.train(self.pipeline, "pipeline_run", STEPS)[0], want,
                          "2-stage 1F1B")

    def test_resume_mid_stream_is_bitwise(self):
        for name, plans in (("one_rank", self.one_rank), ("zero2", self.zero2)):
            with self.subTest(layout=name):
                whole, whole_model = self.train(plans, f"{name}_whole", STEPS)
                checkpoints = os.path.join(self.tmp.name, f"{name}_checkpoints")
                first, _ = self.train(plans, f"{name}_first", 3, "--checkpoint-dir", checkpoints)
                rest, rest_model = self.train(plans, f"{name}_rest", STEPS, "--checkpoint-dir",
                                              checkpoints, "--resume")
                self.assertEqual(first + rest, whole, f"[{name}] 3 steps, then resumed to 6")
                self.assertEqual(rest_model, whole_model, f"[{name}] final weights")
                with open(os.path.join(checkpoints, "step-000003", "index.json")) as f:
                    data = json.load(f)["data"]
                self.assertEqual(data["samples_consumed"], 3 * GLOBAL_BATCH)
                self.assertEqual(data["seed"], SEED)
                self.assertEqual(data["tokens"], {"file": self.token_path, "dtype": "uint16",
                                                  "tokens": len(self.tokens), "inputs": INPUTS})
        # Another file's windows would not continue the stream.
        shorter = os.path.join(self.tmp.name, "shorter.bin")
        np.asarray(self.tokens[:-1]).tofile(shorter)
        refused = harness.run(self.command(self.one_rank, os.path.join(self.tmp.name, "refused"),
                                           STEPS, "--checkpoint-dir", checkpoints, "--resume",
                                           token_path=shorter))
        self.assertNotEqual(refused.returncode, 0, refused.describe())
        self.assertIn("would not continue its stream", refused.stderr, refused.describe())

    def test_token_file_four_times_the_anonymous_memory_trains(self):
        started = time.monotonic()
        path = os.path.join(self.tmp.name, "large.bin")
        tokens = write_tokens(path, 320_000_000, self.gpt.VOCAB, seed=12)
        size = os.path.getsize(path)
        print(f"[large] wrote {size / 2**20:.0f} MiB of tokens in "
              f"{time.monotonic() - started:.1f} s")
        steps = 40
        work = os.path.join(self.tmp.name, "large_run")
        _, peak_anon, peak_rss = run_watching_memory(
            self.command(self.one_rank, work, steps, token_path=path))
        records = harness.read_metrics(os.path.join(work, "metrics.jsonl"))
        print(f"[large] token file {size} bytes ({size / 2**20:.0f} MiB); piper-run's peak "
              f"RssAnon {peak_anon} bytes ({peak_anon / 2**20:.1f} MiB), "
              f"{size / peak_anon:.1f} times smaller; peak RSS (VmHWM: mapped pages and "
              f"--save-onnx's model included) {peak_rss / 2**20:.1f} MiB")
        self.assertGreater(size, 4 * peak_anon)
        # The windows come from all over the file: the first and last tenth both hold some.
        span = max(OFFSETS.values()) + self.gpt.BLOCK
        starts = [harness.token_window_start(SEED, g, len(tokens), span)
                  for g in range(steps * GLOBAL_BATCH)]
        self.assertLess(min(starts), len(tokens) // 10)
        self.assertGreater(max(starts), len(tokens) * 9 // 10)
        self.assert_close([r["loss"] for r in records], self.pytorch_losses(tokens, steps),
                          "large token file")
        del tokens
        os.remove(path)

    def test_npy_data_is_mapped_not_read_whole(self):
        """--data: peak RSS does not grow with the files' size."""
        peaks = {}
        for name, rows in (("small", 64), ("large", 1 << 20)):
            data = os.path.join(self.tmp.name, f"npy_{name}")
            os.makedirs(data)
            idx = np.random.default_rng(5).integers(0, self.gpt.VOCAB, (rows, 16))
            np.save(os.path.join(data, "idx.npy"), idx)
            np.save(os.path.join(data, "targets.npy"), np.roll(idx, -1, axis=1))
            del idx
            _, _, peaks[name] = run_watching_memory(
                [Tools.run, "--plan", os.path.join(self.one_rank, "rank0.plan"), "--steps", 20,
                 "--data", data])
        files = 2 * (1 << 20) * 16 * 8
        print(f"[npy] peak RSS {peaks['small'] / 2**20:.1f} MiB with 16 KiB of .npy, "
              f"{peaks['large'] / 2**20:.1f} MiB with {files / 2**20:.0f} MiB")
        self.assertLess(peaks["large"] - peaks["small"], files / 16)

    def test_flags_are_checked(self):
        plan = os.path.join(self.one_rank, "rank0.plan")
        cases = [
            (["--tokens", self.token_path], "--tokens requires --token-inputs"),
            (["--tokens", self.token_path, "--token-inputs", INPUTS, "--token-dtype", "int8"],
             "--token-dtype"),
            (["--tokens", self.token_path, "--token-inputs", "idx=0,tgt=1"],
             "the plan has no input 'tgt'; its inputs are idx, targets"),
            (["--tokens", self.token_path, "--token-inputs", "idx=0"],
             "the plan also reads 'targets'"),
        ]
        data = os.path.join(self.tmp.name, "both")
        os.makedirs(data)
        np.save(os.path.join(data, "targets.npy"), np.zeros((4, 16), np.int64))
        cases.append((["--tokens", self.token_path, "--token-inputs", INPUTS, "--data", data],
                      "--tokens and --data both feed the plan's input 'targets'"))
        for flags, message in cases:
            with self.subTest(flags=flags):
                result = harness.run([Tools.run, "--plan", plan, "--steps", 1] + flags)
                self.assertNotEqual(result.returncode, 0, result.describe())
                self.assertIn(message, result.stderr, result.describe())


if __name__ == "__main__":
    harness.main()
