"""piper-run --profile-costs (issue 18): the microbenchmark mode writes a cluster file with the
kernels it timed and, started as two ranks by piper-launch --ranks 2, the collectives over
them; piper-plan --cluster reads it and prices the plan with it. --profile-quick keeps the
sizes small, so this checks that the mode works and what the file holds, never the times
themselves (the machine is shared): a product's measured time is positive and grows with its
size. bench/cost_profile.py compares a full profile's planned steps with measured ones."""
import json
import os
import shutil
import tempfile
import unittest

import harness
from harness import Tools

KINDS = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "transfer"}


def launch_path():
    return os.path.join(os.path.dirname(Tools.run), "piper-launch")


class CostProfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="piper_cost_profile_")
        # Two ranks share this machine's cores, each on one thread.
        os.environ["OMP_NUM_THREADS"] = "1"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def profile(self, name, ranks):
        path = os.path.join(self.tmp, name)
        flags = ["--profile-costs", path, "--profile-quick"]
        if ranks == 1:
            result = harness.run_ok([Tools.run] + flags)
        else:
            result = harness.run_ok([launch_path(), "--ranks", ranks] + flags)
        self.assertIn("wrote the profile to " + path, result.stdout, result.describe())
        with open(path) as f:
            return path, json.load(f), result

    def check_kernels(self, profile, result):
        kernels = {(k["op"], k["dtype"]): k for k in profile["measured"]["kernels"]}
        for op in ("piper.MatMul", "piper.FusedAttention", "Add", "LayerNormalization",
                   "piper.AdamW"):
            self.assertIn((op, "float32"), kernels, result.describe())
        product = kernels[("piper.MatMul", "float32")]
        self.assertEqual(product["by"], "flops")
        sizes = [size for size, _ in product["points"]]
        times = [seconds for _, seconds in product["points"]]
        self.assertEqual(sizes, [2.0 * s ** 3 for s in (16, 32, 64)])
        self.assertTrue(all(t > 0 for t in times), product)
        # 64 times the FLOPs of the smallest: slower, whatever else runs on the machine.
        self.assertGreater(times[-1], times[0], product)
        self.assertEqual(kernels[("Add", "float32")]["points"][0][0], 3 * 256 * 4)
        # Products by shape: every [m, k] x [k, n] of m, n, k in 16 and 64, in three layouts.
        grid = {g["dtype"]: g for g in profile["measured"]["products"]}["float32"]
        self.assertEqual(grid["sizes"], [16, 64])
        self.assertEqual(set(grid["seconds"]), {"nn", "nt", "tn"})
        for layout, times in grid["seconds"].items():
            self.assertEqual(len(times), 8, layout)
            self.assertTrue(all(t > 0 for t in times), grid)
            # 64 times the FLOPs of the smallest product: slower.
            self.assertGreater(times[-1], times[0], (layout, times))

    def test_one_rank_profiles_kernels_that_piper_plan_reads(self):
        path, profile, result = self.profile("one.json", 1)
        self.check_kernels(profile, result)
        self.assertEqual(profile["devices_per_node"], 1)
        self.assertEqual(profile["measured"]["collectives"], [])
        # One rank has no neighbours to idle: no times alone.
        self.assertFalse(any("alone" in k for k in profile["measured"]["kernels"]), profile)
        self.assertNotIn("alone", profile["measured"]["products"][0])
        self.assertIn("1 rank at once", profile["measured"]["on"])
        work = os.path.join(self.tmp, "single")
        os.makedirs(work)
        strategy = harness.write_json(os.path.join(work, "strategy.json"),
                                      harness.strategy(8, {"type": "sgd", "lr": 0.1}))
        planned = harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"), strategy, "-o",
                                  os.path.join(work, "plans"), "--cluster", path])
        self.assertIn("; measured: ", planned.stdout, planned.describe())
        self.assertIn("planned step", planned.stdout)

    def test_two_ranks_profile_collectives_over_the_pair(self):
        path, profile, result = self.profile("two.json", 2)
        self.check_kernels(profile, result)
        self.assertEqual(profile["devices_per_node"], 2)
        # Every kernel also timed on rank 0 while rank 1 idled, at each size: never slower.
        for kernel in profile["measured"]["kernels"]:
            self.assertEqual(len(kernel["alone"]), len(kernel["points"]), kernel)
            for (_, together), alone in zip(kernel["points"], kernel["alone"]):
                self.assertTrue(0 < alone <= together, kernel)
        grid = profile["measured"]["products"][0]
        self.assertEqual(set(grid["alone"]), set(grid["seconds"]))
        for layout, times in grid["alone"].items():
            self.assertTrue(all(0 < a <= t for a, t in zip(times, grid["seconds"][layout])), grid)
        collectives = profile["measured"]["collectives"]
        self.assertEqual({c["kind"] for c in collectives}, KINDS, result.describe())
        for collective in collectives:
            self.assertEqual(collective["ranks"], 2)
            self.assertEqual([size for size, _ in collective["points"]], [1024, 4096, 16384])
            self.assertTrue(all(seconds > 0 for _, seconds in collective["points"]), collective)
        # The links come from the measured all-reduce, not the defaults.
        self.assertNotEqual(profile["intra_node"], {"bandwidth": 1e9, "latency": 2e-5})
        zero2 = harness.strategy(8, {"type": "sgd", "lr": 0.1}, directives=[
            {"op": "zero", "stage": 2, "devices": [0, 1]}])
        work = os.path.join(self.tmp, "zero2")
        os.makedirs(work)
        strategy = harness.write_json(os.path.join(work, "strategy.json"), zero2)
        planned = harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"), strategy, "-o",
                                  os.path.join(work, "plans"), "--cluster", path])
        self.assertIn("2 ranks at once, gloo", planned.stdout, planned.describe())

    def test_usage_errors(self):
        both = harness.run([Tools.run, "--profile-costs", os.path.join(self.tmp, "x.json"),
                            "--plan", "rank0.plan"])
        self.assertEqual(both.returncode, 2, both.describe())
        self.assertIn("excludes", both.stderr)
        neither = harness.run([Tools.run])
        self.assertEqual(neither.returncode, 2, neither.describe())
        self.assertIn("--plan is required (or --profile-costs FILE)", neither.stderr)
        launch = harness.run([launch_path(), "--profile-costs", "x.json"])
        self.assertEqual(launch.returncode, 2, launch.describe())
        self.assertIn("--plans is required (or --ranks N)", launch.stderr)
        both = harness.run([launch_path(), "--ranks", "2", "--plans", self.tmp])
        self.assertEqual(both.returncode, 2, both.describe())
        self.assertIn("excludes", both.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.json")))


if __name__ == "__main__":
    harness.main()
