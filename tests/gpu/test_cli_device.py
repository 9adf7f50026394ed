"""piper-run --device cuda where no GPU is usable (as on CI machines) fails in one
line that suggests --device cpu; --comm nccl without --device cuda fails likewise.
Where a GPU is usable, the first check is skipped (tests/gpu covers that case). A CPU rank
maps no CUDA library: the CUDA backend is a plugin loaded only for --device cuda, and stays
under 100 MiB resident, as its own peak_rss_bytes reports."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import harness  # noqa: E402
from harness import Tools  # noqa: E402


class DeviceErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="piper_device_")
        strategy = harness.write_json(os.path.join(cls.tmp, "strategy.json"),
                                      harness.strategy(32, {"type": "sgd", "lr": 0.05}))
        plans = os.path.join(cls.tmp, "plans")
        harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"), strategy, "-o", plans])
        cls.plan = os.path.join(plans, "rank0.plan")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def assert_one_line_error(self, result, *needles):
        self.assertEqual(result.returncode, 1, result.describe())
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, "expected one line on stderr\n" + result.describe())
        self.assertTrue(lines[0].startswith("piper-run: error: "), result.describe())
        for needle in needles:
            self.assertIn(needle, lines[0], result.describe())

    def test_cuda_without_a_gpu_suggests_cpu(self):
        result = harness.run([Tools.run, "--plan", self.plan, "--steps", "1", "--device", "cuda"])
        if result.returncode == 0:
            self.skipTest("a GPU is usable here")
        self.assert_one_line_error(result, "--device cuda", "--device cpu")
        # The plugin loaded (every symbol it needs resolved from piper-run) and found no GPU.
        self.assertNotIn("cannot load the CUDA backend", result.stderr, result.describe())

    def test_a_cpu_rank_maps_no_cuda_library(self):
        process = subprocess.Popen(
            [Tools.run, "--plan", self.plan, "--steps", "1000000000", "--log-every", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            # Once the first step has run, everything the run needs is loaded.
            lines = iter(process.stdout.readline, "")
            self.assertTrue(any(line.startswith("step 1 ") for line in lines), "no step ran")
            with open(f"/proc/{process.pid}/maps") as maps:
                mapped = {line.split()[-1] for line in maps if "/" in line}
        finally:
            process.kill()
            process.wait()
            process.stdout.close()
        cuda = sorted(path for path in mapped if any(
            name in os.path.basename(path)
            for name in ("libcuda", "libcublas", "libnccl", "libcudnn", "libpiper_cuda")))
        self.assertEqual(cuda, [], "a CPU rank mapped CUDA libraries")

    def test_a_cpu_rank_is_lean_and_reports_its_peak(self):
        # /usr/bin/time, a small process, forks the rank: a child of this Python process would
        # inherit its high-water mark through the exec (getrusage's ru_maxrss).
        metrics = os.path.join(self.tmp, "lean.jsonl")
        result = harness.run_ok(["/usr/bin/time", "-v", Tools.run, "--plan", self.plan,
                                 "--steps", "20", "--metrics", metrics])
        found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)
        self.assertIsNotNone(found, result.describe())
        measured = int(found[1]) * 1024
        self.assertLessEqual(measured, 100 << 20, result.describe())
        reported = max(record["peak_rss_bytes"] for record in harness.read_metrics(metrics))
        self.assertLessEqual(abs(reported - measured), 0.05 * measured,
                             f"peak_rss_bytes {reported}, /usr/bin/time {measured}")

    def test_nccl_needs_cuda(self):
        result = harness.run([Tools.run, "--plan", self.plan, "--steps", "1", "--comm", "nccl"])
        self.assert_one_line_error(result, "--comm nccl", "--device cuda")


if __name__ == "__main__":
    harness.main()
