"""The planned step and the measured one: piper-plan reports each rank's planned
step time, bubble and peak activations; piper-dump --schedule draws the planned
step of a plan directory as text and as SVG (one row per rank and stream) and
refuses directories without plans or with plans of two planning runs;
piper-run --trace (through piper-launch, 4 ranks of ZeRO-2) writes a
Chrome/Perfetto trace per rank with the same rows and tasks; --trace-steps picks
the steps, and piper-launch --trace FILE merges the ranks of a 2-stage pipeline
x 2 replicas of samples/gpt into one file on one clock with a flow arrow per
planned transfer of each traced step."""
import json
import os
import re
import shutil
import tempfile
import unittest
import xml.etree.ElementTree as ET

import harness
from harness import Tools

SVG = "{http://www.w3.org/2000/svg}"


def launch_path():
    return os.path.join(os.path.dirname(Tools.run), "piper-launch")


def plan_json(plans, rank):
    dumped = harness.run_ok([Tools.dump, "--json", os.path.join(plans, f"rank{rank}.plan")])
    return json.loads(dumped.stdout)


class ScheduleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="piper_schedule_")
        cls.plans = os.path.join(cls.tmp, "plans")
        cls.planned = harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"),
                                      Tools.sample("strategies", "zero2.json"), "-o", cls.plans])
        cls.ranks = [plan_json(cls.plans, rank) for rank in range(4)]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def rows(self):
        """(rank, stream) of every stream of every plan."""
        return {(rank, stream["name"]) for rank, plan in enumerate(self.ranks)
                for stream in plan["streams"]}

    def test_plan_reports_the_planned_step(self):
        out = self.planned.stdout
        for rank in range(4):
            self.assertRegex(out, rf"rank {rank}: planned step [0-9.]+ (us|ms|s), compute busy "
                                  rf"[0-9.]+ (us|ms|s), bubble [0-9.]+%, peak activations",
                             out)
        self.assertIn("cost model: 100 GFLOP/s", out)
        for plan in self.ranks:
            step = plan["planned_step"]
            self.assertGreater(step["step_s"], 0)
            self.assertGreaterEqual(step["bubble_fraction"], 0)
            self.assertLess(step["bubble_fraction"], 1)
            kinds = {task["kind"] for task in plan["planned_tasks"]}
            self.assertIn("compute", kinds)
            self.assertIn("reduce_scatter", kinds)
            for task in plan["planned_tasks"]:
                self.assertLessEqual(task["start_s"], task["end_s"])
                self.assertLessEqual(task["end_s"], step["step_s"] * (1 + 1e-9))

    def test_planned_streams_run_their_tasks_in_plan_order(self):
        for rank, plan in enumerate(self.ranks):
            for stream in plan["streams"]:
                emitted = []
                for instruction in stream["instructions"]:
                    if instruction.get("task", 0) not in emitted:
                        emitted.append(instruction.get("task", 0))
                # A compute task's reshards follow it as entries of the same task.
                planned = []
                for t in plan["planned_tasks"]:
                    if t["stream"] == stream["name"] and t.get("task", 0) not in planned[-1:]:
                        planned.append(t.get("task", 0))
                self.assertEqual(planned, emitted, f"rank {rank} stream {stream['name']}")

    def test_rates_change_the_planned_step(self):
        slow = os.path.join(self.tmp, "slow")
        harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"),
                        Tools.sample("strategies", "zero2.json"), "-o", slow,
                        "--flops", "1e6", "--memory-bandwidth", "1e6"])
        self.assertGreater(plan_json(slow, 0)["planned_step"]["step_s"],
                           100 * self.ranks[0]["planned_step"]["step_s"])
        bad = harness.run([Tools.plan, Tools.sample("mlp", "model.onnx"),
                           Tools.sample("strategies", "zero2.json"), "-o", slow, "--flops", "0"])
        self.assertNotEqual(bad.returncode, 0, bad.describe())
        self.assertIn("--flops", bad.output)

    def test_cluster_file_prices_links_by_node(self):
        """zero2's reduce-scatters and all-gathers over four ranks cross nodes of two and stay
        within one node of four; a rate flag overrides its part of the file; a bad file is
        refused naming it and the JSON path."""
        def cluster(devices_per_node, inter_bandwidth=1e6, inter_latency=1e-5):
            return harness.write_json(
                os.path.join(self.tmp, f"cluster{devices_per_node}_{inter_bandwidth:g}.json"),
                {"devices_per_node": devices_per_node,
                 "flops": {"float32": 1e12, "bfloat16": 2e12}, "memory_bytes": 16e9,
                 "memory_bandwidth": 1e11,
                 "intra_node": {"bandwidth": 1e10, "latency": 1e-6},
                 "inter_node": {"bandwidth": inter_bandwidth, "latency": inter_latency},
                 "kernel_overhead": 1e-6})

        def step(name, *flags):
            out = os.path.join(self.tmp, name)
            printed = harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"),
                                      Tools.sample("strategies", "zero2.json"), "-o", out]
                                     + list(flags)).stdout
            return plan_json(out, 0)["planned_step"]["step_s"], printed

        one_node, printed = step("one_node", "--cluster", cluster(4))
        self.assertIn("4 devices per node", printed)
        self.assertIn("of the device's 16 GB", printed)
        two_nodes, _ = step("two_nodes", "--cluster", cluster(2))
        self.assertGreater(two_nodes, 10 * one_node)
        # A network as fast as the node's links: as if on one node.
        fast_network, _ = step("fast_network", "--cluster", cluster(2, 1e10, 1e-6))
        self.assertAlmostEqual(fast_network, one_node, delta=1e-9 * one_node)
        overridden, printed = step("overridden", "--cluster", cluster(2), "--link-bandwidth",
                                   "1e10")
        self.assertIn("10 GB/s, 1 us within a node, 10 GB/s, 10 us across nodes", printed)
        self.assertLess(overridden, two_nodes / 10)
        bad = cluster(0)
        result = harness.run([Tools.plan, Tools.sample("mlp", "model.onnx"),
                              Tools.sample("strategies", "zero2.json"), "-o",
                              os.path.join(self.tmp, "bad"), "--cluster", bad])
        self.assertEqual(result.returncode, 1, result.describe())
        self.assertIn(f"{bad}: $.devices_per_node: expected an integer from 1", result.output)

    def test_text_schedule_has_a_line_per_rank_and_stream(self):
        out = harness.run_ok([Tools.dump, "--schedule", self.plans, "--width", "60"]).stdout
        self.assertIn("planned step", out)
        found = set()
        for line in out.splitlines():
            match = re.match(r"rank (\d+) (\S+)\s+\|([^|]*)\|", line)
            if match:
                found.add((int(match.group(1)), match.group(2)))
                self.assertEqual(len(match.group(3)), 60, line)
        self.assertEqual(found, self.rows(), out)
        self.assertEqual(len(re.findall(r"bubble [0-9.]+%", out)), 4, out)
        self.assertRegex(out, r"F0")
        self.assertRegex(out, r"RS")

    def test_svg_schedule_has_a_row_per_rank_and_stream(self):
        svg = os.path.join(self.tmp, "schedule.svg")
        harness.run_ok([Tools.dump, "--schedule", self.plans, "-o", svg])
        root = ET.parse(svg).getroot()
        self.assertEqual(root.tag, SVG + "svg")
        rows = [g for g in root.iter(SVG + "g") if g.get("class") == "row"]
        self.assertEqual({(int(g.get("data-rank")), g.get("data-stream")) for g in rows},
                         self.rows())
        self.assertEqual(len(rows), len(self.rows()))
        boxes = 0
        for g in rows:
            tasks = [r for r in g.iter(SVG + "rect") if r.get("class") == "task"]
            self.assertTrue(tasks, f"row {g.get('data-rank')} {g.get('data-stream')} is empty")
            boxes += len(tasks)
            for rect in tasks:
                self.assertGreater(float(rect.get("width")), 0)
        self.assertEqual(boxes, sum(len(plan["planned_tasks"]) for plan in self.ranks))
        kinds = {r.get("data-kind") for r in root.iter(SVG + "rect") if r.get("class") == "task"}
        self.assertTrue({"F", "B", "U", "reduce_scatter", "all_gather"} <= kinds, kinds)
        legend = [g for g in root.iter(SVG + "g") if g.get("class") == "legend"]
        self.assertEqual(len(legend), 1)

    def test_svg_draws_dualpipe_directions_pairs_stages_and_loss_sends(self):
        """samples/gpt under dualpipe on 2 ranks: each direction's passes in colours of their
        own, every stage's box with its stage and chunk, each overlapped pair (one per rank,
        F1 of one stage with B0 of the other) framed across its two compute rows; under 1F1B
        the loss transfers to rank 0 drawn."""
        work = os.path.join(self.tmp, "dualpipe")
        os.makedirs(work)
        strategy = harness.write_json(os.path.join(work, "strategy.json"), {
            "batch": {"global": 8}, "frozen": ["*mask*"],
            "annotations": [{"match": f"/blocks.{s}/*", "tags": {"PP": s}} for s in range(2)],
            "directives": [{"op": "pipeline", "schedule": "dualpipe", "devices": [0, 1],
                            "num_microbatches": 4}]})
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, Tools.sample("gpt", "model.onnx"), strategy, "-o", plans])
        svg = os.path.join(work, "schedule.svg")
        harness.run_ok([Tools.dump, "--schedule", plans, "-o", svg])
        root = ET.parse(svg).getroot()
        tasks = [r for r in root.iter(SVG + "rect") if r.get("class") == "task"]
        staged = [r for r in tasks if r.get("data-stage") is not None]
        colours = {}
        for rect in staged:
            colours.setdefault((rect.get("data-kind"), rect.get("data-direction")),
                               set()).add(rect.get("fill"))
            title = rect.find(SVG + "title").text
            self.assertRegex(title, rf"stage {rect.get('data-stage')}, chunk "
                                    rf"{rect.get('data-chunk')}, direction [01]")
        for kind in ("F", "B"):
            self.assertEqual(len(colours[(kind, "0")]), 1, colours)
            self.assertEqual(len(colours[(kind, "1")]), 1, colours)
            self.assertNotEqual(colours[(kind, "0")], colours[(kind, "1")])
        # Rank r holds stage r (chunk 0) for direction 0 and stage 1-r (chunk 1) for direction 1.
        rows = [g for g in root.iter(SVG + "g") if g.get("class") == "row"]
        for g in rows:
            if not g.get("data-stream").startswith("compute"):
                continue
            rank = int(g.get("data-rank"))
            for rect in g.iter(SVG + "rect"):
                if rect.get("data-stage") is None:
                    continue
                stage, direction = int(rect.get("data-stage")), int(rect.get("data-direction"))
                self.assertEqual(stage, rank if direction == 0 else 1 - rank)
                self.assertEqual(int(rect.get("data-chunk")), 0 if stage == min(rank, 1 - rank)
                                 else 1)
        labels = [t.text for t in root.iter(SVG + "text") if t.get("class") == "stage"]
        self.assertIn("s0 c0", labels)
        self.assertIn("s1 c1", labels)
        pairs = [r for r in root.iter(SVG + "rect") if r.get("class") == "pair"]
        self.assertEqual(sorted(int(r.get("data-rank")) for r in pairs), [0, 1])
        by_task = {(g.get("data-rank"), r.get("data-task")): r for g in rows
                   for r in g.iter(SVG + "rect") if r.get("class") == "task"}
        for pair in pairs:
            first, second = (by_task[(pair.get("data-rank"), t)]
                             for t in pair.get("data-tasks").split())
            self.assertEqual({first.get("data-kind"), second.get("data-kind")}, {"F", "B"})
            self.assertEqual(first.get("x"), second.get("x"))
            self.assertEqual(float(first.get("y")) + 30, float(second.get("y")))  # stacked
        # Both DualPipe ranks compute the loss; under 1F1B rank 1 sends it to rank 0.
        value = json.load(open(strategy))
        value["directives"][0]["schedule"] = "1f1b"
        harness.write_json(strategy, value)
        flat = os.path.join(work, "flat")
        harness.run_ok([Tools.plan, Tools.sample("gpt", "model.onnx"), strategy, "-o", flat])
        harness.run_ok([Tools.dump, "--schedule", flat, "-o", svg])
        losses = [r for r in ET.parse(svg).getroot().iter(SVG + "rect")
                  if r.get("class") == "task" and r.get("data-kind") == "loss"]
        self.assertEqual(len(losses), 2 * 4)  # a send and a recv per microbatch
        for rect in losses:
            self.assertGreaterEqual(float(rect.get("width")), 3)
            self.assertRegex(rect.find(SVG + "title").text, r"^L\d: task \d+, (send|recv)")

    def test_schedule_refuses_bad_directories(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty, exist_ok=True)
        result = harness.run([Tools.dump, "--schedule", empty])
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("holds no rank<N>.plan", result.stderr)
        other = os.path.join(self.tmp, "other")
        harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"),
                        Tools.sample("strategies", "zero2.json"), "-o", other])
        mixed = os.path.join(self.tmp, "mixed")
        shutil.copytree(self.plans, mixed)
        shutil.copy(os.path.join(other, "rank2.plan"), os.path.join(mixed, "rank2.plan"))
        result = harness.run([Tools.dump, "--schedule", mixed])
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("another planning run", result.stderr)
        self.assertIn("rank2.plan", result.stderr)
        result = harness.run([Tools.dump, "--schedule", self.plans,
                              os.path.join(self.plans, "rank0.plan")])
        self.assertNotEqual(result.returncode, 0)

    def test_trace_of_every_rank_has_the_planned_rows_and_tasks(self):
        traces = os.path.join(self.tmp, "traces")
        os.makedirs(traces)
        harness.run_ok([launch_path(), "--plans", self.plans, "--steps", "2",
                        "--data", Tools.sample("mlp", "data"),
                        "--trace", os.path.join(traces, "trace%r.json")], timeout=240)
        self.assertEqual(sorted(os.listdir(traces)), [f"trace{r}.json" for r in range(4)])
        for rank, plan in enumerate(self.ranks):
            with open(os.path.join(traces, f"trace{rank}.json")) as f:
                trace = json.load(f)
            events = trace["traceEvents"]
            self.assertEqual({e["pid"] for e in events}, {rank})
            threads = {e["tid"]: e["args"]["name"] for e in events
                       if e["ph"] == "M" and e["name"] == "thread_name"}
            self.assertEqual(sorted(threads.values()),
                             sorted(s["name"] for s in plan["streams"]))
            tasks = [e for e in events if e["ph"] == "X" and e["cat"] in ("compute", "comm")]
            run_tasks = {(s["name"], i.get("task", 0)) for s in plan["streams"]
                         for i in s["instructions"] if "record" not in i and "wait" not in i}
            self.assertEqual({(threads[e["tid"]], e["args"]["task"]) for e in tasks}, run_tasks)
            planned = {(t["stream"], t.get("task", 0)) for t in plan["planned_tasks"]}
            self.assertLessEqual(run_tasks, planned)
            for event in tasks:
                self.assertGreaterEqual(event["ts"], 0)
                self.assertGreaterEqual(event["dur"], 0)
                self.assertIn("pass", event["args"])
                self.assertIn("microbatch", event["args"])
            self.assertTrue(any(e["name"] == "F mb1" for e in tasks))
            self.assertEqual(trace["otherData"]["step"], 2)
            kernels = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
            self.assertTrue(kernels)

    def test_launch_merges_the_ranks_traces_with_a_flow_per_transfer(self):
        plans = os.path.join(self.tmp, "gpt_pipeline")
        harness.run_ok([Tools.plan, Tools.sample("gpt", "model.onnx"),
                        Tools.sample("strategies", "gpt_pipeline.json"), "-o", plans])
        ranks = [plan_json(plans, rank) for rank in range(4)]
        merged_path = os.path.join(self.tmp, "merged.json")
        launched = harness.run_ok([launch_path(), "--plans", plans, "--steps", "5",
                                   "--trace", merged_path, "--trace-steps", "2,4-5"],
                                  timeout=240)
        self.assertIn("piper-launch: merged the traces of 4 ranks into " + merged_path,
                      launched.stderr)
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith(".merged")], [],
                         "the ranks' own files are gone")
        with open(merged_path) as f:
            merged = json.load(f)
        events = merged["traceEvents"]
        self.assertEqual(merged["otherData"]["steps"], [2, 4, 5])
        self.assertEqual({e["pid"] for e in events}, {0, 1, 2, 3})
        for rank, plan in enumerate(ranks):
            threads = {e["args"]["name"] for e in events
                       if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == rank}
            self.assertEqual(threads, {s["name"] for s in plan["streams"]}, f"rank {rank}")
        tasks = [e for e in events if e["ph"] == "X" and e["cat"] in ("compute", "comm")]
        self.assertEqual({e["args"]["step"] for e in tasks}, {2, 4, 5})
        # Each rank's steps follow each other on the clock (across ranks a step's updates
        # may overlap the next step's start elsewhere).
        for rank in range(4):
            for earlier, later in ((2, 4), (4, 5)):
                mine = [e for e in tasks if e["pid"] == rank]
                end = max(e["ts"] + e["dur"] for e in mine if e["args"]["step"] == earlier)
                start = min(e["ts"] for e in mine if e["args"]["step"] == later)
                self.assertLess(end, start, f"rank {rank}: steps {earlier} and {later}")
        sends = sum(1 for plan in ranks for s in plan["streams"] for i in s["instructions"]
                    if "send" in i)
        self.assertGreater(sends, 0)
        starts = [e for e in events if e["ph"] == "s"]
        ends = [e for e in events if e["ph"] == "f"]
        self.assertEqual(len(starts), 3 * sends)
        self.assertEqual(len(ends), 3 * sends)
        by_id = {e["id"]: e for e in starts}
        self.assertEqual(len(by_id), len(starts), "one id per transfer")
        self.assertEqual(set(by_id), {e["id"] for e in ends})
        for end in ends:
            start = by_id[end["id"]]
            self.assertNotEqual(start["pid"], end["pid"])
            self.assertEqual(end["bp"], "e")
            # The data arrives after it was sent, on the merged clock (within clock skew).
            self.assertGreater(end["ts"], start["ts"] - 1000, (start, end))

        single = os.path.join(self.tmp, "single_steps")
        harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"),
                        Tools.sample("strategies", "single.json"), "-o", single])
        refused = harness.run([Tools.run, "--plan", os.path.join(single, "rank0.plan"),
                               "--steps", "3", "--trace", merged_path, "--trace-steps", "2,5"])
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("--trace-steps 5: this run trains steps 1 to 3", refused.stderr)
        for bad in ("0", "3-2", "x", "2,"):
            result = harness.run([Tools.run, "--plan", os.path.join(single, "rank0.plan"),
                                  "--steps", "3", "--trace", merged_path, "--trace-steps", bad])
            self.assertNotEqual(result.returncode, 0, bad)
            self.assertIn("--trace-steps", result.stderr, bad)

    def test_single_rank_trace_without_rank_pattern(self):
        plans = os.path.join(self.tmp, "single")
        harness.run_ok([Tools.plan, Tools.sample("mlp", "model.onnx"),
                        Tools.sample("strategies", "single.json"), "-o", plans])
        trace_path = os.path.join(self.tmp, "single.json")
        out = harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"),
                              "--steps", "1", "--trace", trace_path]).stdout
        self.assertIn("wrote the trace of step 1", out)
        with open(trace_path) as f:
            events = json.load(f)["traceEvents"]
        self.assertTrue(any(e["ph"] == "X" and e["name"] == "U mb0" for e in events))
        self.assertFalse(os.path.exists(trace_path + ".tmp"))


if __name__ == "__main__":
    harness.main()
