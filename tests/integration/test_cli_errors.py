"""Bad input to piper-plan, piper-run and piper-dump: each gets a clear message
naming the culprit (file, JSON path, ONNX op and node), a non-zero exit code, and
leaves nothing half-written (no plan directory, metrics file or saved model)."""
import os
import re
import shutil
import struct
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import harness
from harness import Tools

GLOBAL_BATCH = 32
SGD = {"type": "sgd", "lr": 0.05, "momentum": 0.9}


def mlp_model():
    return Tools.sample("mlp", "model.onnx")


INT64_MAX = 2**63 - 1


def ints(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def reshaped_x_model(nodes, initializers, x_dims=("batch", 4)):
    """x -> Reshape(x, target) * w -> ReduceSum -> loss, where `nodes` compute target
    (from x's Shape and `initializers`)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [1], [0.5])
    nodes = nodes + [
        helper.make_node("Reshape", ["x", "target"], ["reshaped"], name="/Reshape"),
        helper.make_node("Mul", ["reshaped", "w"], ["scaled"], name="/Mul"),
        helper.make_node("ReduceSum", ["scaled"], ["loss"], name="/ReduceSum", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "folding",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_dims))],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=initializers + [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class ErrorTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="piper_errors_")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def assert_fails(self, argv, *needles, pattern=None):
        """Runs argv, expects a non-zero exit and every needle (and pattern) in its
        output. Returns the result."""
        result = harness.run(argv)
        self.assertNotEqual(result.returncode, 0, "expected a failure\n" + result.describe())
        self.assertTrue(0 < result.returncode < 128,
                        "crashed instead of reporting an error\n" + result.describe())
        self.assertRegex(result.stderr, re.compile("error", re.IGNORECASE),
                         "no error message on stderr\n" + result.describe())
        for needle in needles:
            self.assertIn(needle, result.output,
                          f"the message should name {needle!r}\n" + result.describe())
        if pattern:
            self.assertRegex(result.output, pattern, result.describe())
        return result


class PlanErrors(ErrorTest):
    """piper-plan MODEL STRATEGY -o DIR with one thing wrong; DIR never appears."""

    def plan_fails(self, model, strategy, *needles, pattern=None):
        out = self.path("plans")
        result = self.assert_fails([Tools.plan, model, strategy, "-o", out], *needles,
                                   pattern=pattern)
        if os.path.exists(out):
            self.fail(f"piper-plan failed but left {out}: {os.listdir(out)}\n"
                      + result.describe())
        return result

    def good_strategy(self):
        return harness.write_json(self.path("strategy.json"),
                                  harness.strategy(GLOBAL_BATCH, SGD))

    def strategy_text(self, text):
        path = self.path("bad_strategy.json")
        with open(path, "w") as f:
            f.write(text)
        return path

    def strategy_value(self, value):
        return harness.write_json(self.path("bad_strategy.json"), value)

    def model_file(self, data, name="model.onnx"):
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    # ---- the model

    def test_missing_model(self):
        self.plan_fails(self.path("no_such_model.onnx"), self.good_strategy(),
                        "no_such_model.onnx")

    def test_not_onnx(self):
        model = self.model_file(b'{"this": "is JSON, not ONNX"}\n', "notes.onnx")
        self.plan_fails(model, self.good_strategy(), "notes.onnx")

    def test_truncated_onnx(self):
        with open(mlp_model(), "rb") as f:
            data = f.read()
        model = self.model_file(data[: len(data) // 2], "cut.onnx")
        self.plan_fails(model, self.good_strategy(), "cut.onnx")

    def test_model_failing_checker(self):
        # A Relu reading a tensor nothing produces.
        graph = helper.make_graph(
            [helper.make_node("Relu", ["nowhere"], ["y"], name="dangling_relu")], "bad",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        path = self.path("invalid.onnx")
        onnx.save(model, path)
        self.assertRaises(onnx.checker.ValidationError, onnx.checker.check_model, model)
        self.plan_fails(path, self.good_strategy(), "invalid.onnx")

    def test_unsupported_op(self):
        # Valid ONNX with two unsupported op types, one used twice: one message lists both,
        # each with its count, first node and advice (random values: pass them in).
        w = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [0.5, -1.0, 2.0, 1.5])
        nodes = [
            helper.make_node("Reshape", ["x", "square"], ["m"], name="/square/Reshape"),
            helper.make_node("Mul", ["m", "w"], ["mw"], name="/scale/Mul"),
            helper.make_node("Det", ["mw"], ["d1"], name="/det/first"),
            helper.make_node("Det", ["mw"], ["d2"], name="/det/second"),
            helper.make_node("RandomUniformLike", ["d1"], ["noise"], name="/noise"),
            helper.make_node("Add", ["d1", "d2"], ["d"], name="/Add"),
            helper.make_node("Mul", ["d", "noise"], ["dn"], name="/Mul"),
            helper.make_node("ReduceMean", ["dn"], ["loss"], name="/loss", keepdims=0),
        ]
        graph = helper.make_graph(
            nodes, "det",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
            initializer=[w, ints("square", [-1, 2, 2])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(model, full_check=True)
        path = self.path("det.onnx")
        onnx.save(model, path)
        self.plan_fails(path, self.good_strategy(), "det.onnx", "2 op types are not supported",
                        "Det (2 nodes, first '/det/first')",
                        "RandomUniformLike (1 node, first '/noise'): random values",
                        "pass them in as a model input", "supported op types: ")

    def test_batch_baked_into_model(self):
        # The sample with its batch dimension fixed at 8 cannot be planned for 32.
        model = onnx.load(mlp_model())
        for value in model.graph.input:
            value.type.tensor_type.shape.dim[0].dim_value = 8
        path = self.path("fixed_batch.onnx")
        onnx.save(model, path)
        # The message says the batch is fixed and how to export it dynamic.
        self.plan_fails(path, self.good_strategy(), "fixed_batch.onnx", pattern=r"dynamic")

    def test_int32_labels(self):
        # The sample with int32 labels (exported from an int32 example input):
        # the message names the input, its type and what to export instead.
        model = onnx.load(mlp_model())
        model.graph.input[1].type.tensor_type.elem_type = TensorProto.INT32
        cast = helper.make_node("Cast", [model.graph.input[1].name], ["y_int64"],
                                name="/Cast_y", to=TensorProto.INT64)
        for node in model.graph.node:
            node.input[:] = ["y_int64" if name == model.graph.input[1].name else name
                             for name in node.input]
        model.graph.node.insert(0, cast)
        path = self.path("int32_labels.onnx")
        onnx.save(model, path)
        self.plan_fails(path, self.good_strategy(), "int32_labels.onnx",
                        f"'{model.graph.input[1].name}' is INT32", "int64")

    def test_summed_loss_with_a_divided_batch(self):
        # The sample with reduction="sum": fine on one batch, refused once
        # the batch is split (its microbatch losses would be averaged).
        model = onnx.load(mlp_model())
        loss = model.graph.node[-1]
        for attribute in loss.attribute:
            if attribute.name == "reduction":
                attribute.s = b"sum"
        path = self.path("summed.onnx")
        onnx.save(model, path)
        harness.run_ok([Tools.plan, path, self.good_strategy(), "-o", self.path("single")])
        value = harness.strategy(GLOBAL_BATCH, SGD, directives=[
            {"op": "split", "dim_name": "MB", "num_microbatches": 2}])
        self.plan_fails(path, self.strategy_value(value), "summed.onnx",
                        f"the loss node '{loss.name}' sums over the batch", "bad_strategy.json")

    # ---- malformed shape arithmetic: an error naming the node, never a crash

    def save(self, model, name):
        path = self.path(name)
        onnx.save(model, path)
        return path

    def test_concat_axis_out_of_range(self):
        model = reshaped_x_model(
            [helper.make_node("Concat", ["a", "b"], ["target"], name="/bad/Concat", axis=5)],
            [ints("a", [-1]), ints("b", [4])])
        self.plan_fails(self.save(model, "concat.onnx"), self.good_strategy(), "concat.onnx",
                        "/bad/Concat", "axis")

    def test_gather_index_out_of_range(self):
        model = reshaped_x_model([
            helper.make_node("Shape", ["x"], ["shape"], name="/Shape"),
            helper.make_node("Gather", ["shape", "index"], ["dim"], name="/bad/Gather"),
            helper.make_node("Concat", ["minus_one", "dim"], ["target"], name="/Concat", axis=0),
        ], [ints("index", [5]), ints("minus_one", [-1])])
        self.plan_fails(self.save(model, "gather.onnx"), self.good_strategy(),
                        "node '/bad/Gather' (Gather): index 5 is out of range for axis 0 of size 2")

    def test_impossible_reshape(self):
        model = reshaped_x_model([
            helper.make_node("Reshape", ["six", "bad_shape"], ["reshaped_six"],
                             name="/bad/Reshape"),
            helper.make_node("Shape", ["reshaped_six"], ["target"], name="/Shape"),
        ], [ints("six", [1, 2, 3, 4, 5, 6]), ints("bad_shape", [4, -1])])
        self.plan_fails(self.save(model, "reshape.onnx"), self.good_strategy(), "/bad/Reshape")

    def test_dimension_overflowing_int64(self):
        model = reshaped_x_model([
            helper.make_node("Shape", ["x"], ["shape"], name="/Shape"),
            helper.make_node("ConstantOfShape", ["shape"], ["huge"], name="/huge/ConstantOfShape"),
            helper.make_node("Shape", ["huge"], ["target"], name="/Shape_huge"),
        ], [], x_dims=("batch", 2**62))
        self.plan_fails(self.save(model, "huge.onnx"), self.good_strategy(),
                        "/huge/ConstantOfShape", "more elements than int64 counts")

    def test_empty_shape_arithmetic_plans(self):
        # shape(x)[2:] is empty; adding to it folds to an empty vector, not a crash.
        model = reshaped_x_model([
            helper.make_node("Shape", ["x"], ["shape"], name="/Shape"),
            helper.make_node("Slice", ["shape", "two", "end"], ["none"], name="/Slice"),
            helper.make_node("Add", ["none", "one"], ["still_none"], name="/Add"),
            helper.make_node("Concat", ["shape", "still_none"], ["target"], name="/Concat",
                             axis=0),
        ], [ints("two", [2]), ints("end", [INT64_MAX]), ints("one", [1])])
        harness.run_ok([Tools.plan, self.save(model, "empty.onnx"), self.good_strategy(), "-o",
                        self.path("plans")])

    def test_open_ended_slice_plans_and_runs_right(self):
        # x[:, 1:] as PyTorch writes it (ends = INT64_MAX), summed: the loss is the sum of
        # the last three columns, times w.
        w = helper.make_tensor("w", TensorProto.FLOAT, [1], [0.5])
        nodes = [
            helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["tail"], name="/Slice"),
            helper.make_node("Mul", ["tail", "w"], ["scaled"], name="/Mul"),
            helper.make_node("ReduceMean", ["scaled"], ["loss"], name="/ReduceMean",
                             keepdims=0),
        ]
        graph = helper.make_graph(
            nodes, "open_slice",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
            initializer=[ints("starts", [1]), ints("ends", [INT64_MAX]), ints("axes", [1]), w])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        path = self.save(model, "open_slice.onnx")
        plans = self.path("plans")
        harness.run_ok([Tools.plan, path, self.good_strategy(), "-o", plans])
        x = np.arange(GLOBAL_BATCH * 4, dtype=np.float32).reshape(GLOBAL_BATCH, 4)
        data = self.path("data")
        os.makedirs(data)
        np.save(os.path.join(data, "x.npy"), x)
        metrics = self.path("metrics.jsonl")
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--data", data,
                        "--steps", "1", "--metrics", metrics])
        loss = harness.read_metrics(metrics)[0]["loss"]
        expected = float(np.mean(x[:, 1:] * 0.5))
        self.assertAlmostEqual(loss, expected, delta=1e-5 * abs(expected))

    def test_list_needs_no_strategy(self):
        # --list prints the names globs match and exits 0; without it the strategy is needed.
        result = harness.run_ok([Tools.plan, "--list", mlp_model()])
        self.assertRegex(result.stdout, r"\n  /fc1/Gemm +Gemm\n")
        self.assertRegex(result.stdout, r"\n  fc1.weight +\[64, 32\] +float32\n")
        self.assert_fails([Tools.plan, mlp_model()], "no strategy", "--list")

    # ---- the strategy

    def test_frozen_glob_matching_nothing(self):
        value = harness.strategy(GLOBAL_BATCH, SGD, frozen=["fc1.*", "embed.*"])
        self.plan_fails(mlp_model(), self.strategy_value(value), "bad_strategy.json",
                        "$.frozen[1]", "'embed.*' matches no initializer", "--list")

    def test_frozen_globs_listed_in_the_summary(self):
        value = harness.strategy(GLOBAL_BATCH, SGD, frozen=["*.bias"])
        result = harness.run_ok([Tools.plan, mlp_model(), self.strategy_value(value), "-o",
                                 self.path("plans")])
        self.assertIn("frozen '*.bias': 3 initializers (fc1.bias, fc2.bias, fc3.bias)",
                      result.stdout)

    def test_missing_strategy(self):
        self.plan_fails(mlp_model(), self.path("no_such_strategy.json"), "no_such_strategy.json")

    def test_invalid_json(self):
        strategy = self.strategy_text('{\n  "batch": {"global": 32},\n'
                                      '  "optimizer": {"type": "sgd" "lr": 0.1}\n}\n')
        # Line 3 and a column, e.g. "bad_strategy.json:3:31" or "line 3, column 31".
        self.plan_fails(mlp_model(), strategy, "bad_strategy.json",
                        pattern=r"(:3:\d+)|(line 3\D+column \d+)")

    def test_unknown_top_level_key(self):
        value = harness.strategy(GLOBAL_BATCH, SGD)
        value["optimiser"] = SGD
        self.plan_fails(mlp_model(), self.strategy_value(value), "bad_strategy.json", "optimiser")

    def test_unknown_nested_key(self):
        value = harness.strategy(GLOBAL_BATCH, dict(SGD, momentun=0.5))
        self.plan_fails(mlp_model(), self.strategy_value(value), "optimizer.momentun")

    def test_wrong_type(self):
        value = harness.strategy("32", SGD)
        self.plan_fails(mlp_model(), self.strategy_value(value), "batch.global")

    def test_wrong_type_optimizer(self):
        value = harness.strategy(GLOBAL_BATCH, dict(SGD, lr="fast"))
        self.plan_fails(mlp_model(), self.strategy_value(value), "optimizer.lr")

    def test_unknown_optimizer(self):
        value = harness.strategy(GLOBAL_BATCH, dict(SGD, type="lamb"))
        self.plan_fails(mlp_model(), self.strategy_value(value), "optimizer.type", "lamb")

    def test_zero_global_batch(self):
        value = harness.strategy(0, SGD)
        self.plan_fails(mlp_model(), self.strategy_value(value), "batch.global")

    def test_unknown_directive(self):
        value = harness.strategy(GLOBAL_BATCH, SGD, directives=[{"op": "teleport"}])
        self.plan_fails(mlp_model(), self.strategy_value(value), "directives[0]", "teleport")

    def test_devices_with_a_gap(self):
        value = harness.strategy(GLOBAL_BATCH, SGD, directives=[
            {"op": "split", "dim_name": "MB", "num_microbatches": 2},
            {"op": "place", "filter": {"MB": 0}, "devices": [0]},
            {"op": "place", "filter": {"MB": 1}, "devices": [3]}])
        self.plan_fails(mlp_model(), self.strategy_value(value), "$.directives[2].devices",
                        "device 3", "device(s) 1, 2")

    def test_json_nested_100000_deep_is_an_error_not_a_crash(self):
        text = '{"batch": {"global": 32}, "frozen": ' + "[" * 100000 + "]" * 100000 + "}"
        self.plan_fails(mlp_model(), self.strategy_text(text), "nested deeper than 256 levels")

    def test_a_million_directives_fail_at_once(self):
        text = ('{"batch": {"global": 32}, "directives": [' +
                ",".join(['{"op": "place", "devices": [0]}'] * 1000000) + "]}")
        self.plan_fails(mlp_model(), self.strategy_text(text), "$.directives",
                        "Piper takes at most 100000")

    def test_far_device_index_fails_at_once(self):
        # Every rank up to the index would be planned; refused before that.
        value = harness.strategy(GLOBAL_BATCH, SGD,
                                 directives=[{"op": "place", "devices": [60000]}])
        self.plan_fails(mlp_model(), self.strategy_value(value), "$.directives[0].devices",
                        "device 60000", "0, 1, 2, 3, 4, ...")

    def test_device_left_without_work(self):
        value = harness.strategy(GLOBAL_BATCH, SGD, directives=[
            {"op": "place", "devices": [0]}, {"op": "place", "devices": [2]},
            {"op": "place", "devices": [1]}])
        self.plan_fails(mlp_model(), self.strategy_value(value), "$.directives",
                        "device 0 of devices 0 to 1 runs no task")

    def test_order_against_an_earlier_order(self):
        value = harness.strategy(GLOBAL_BATCH, SGD, directives=[
            {"op": "split", "dim_name": "MB", "num_microbatches": 2},
            {"op": "order", "filters": [[{"MB": 1, "PASS": "F"}], [{"MB": 0, "PASS": "F"}]]},
            {"op": "order", "filters": [[{"MB": 0, "PASS": "F"}], [{"MB": 1, "PASS": "F"}]]}])
        self.plan_fails(mlp_model(), self.strategy_value(value), "$.directives[2].filters",
                        "contradicts an earlier order of this device's tasks")

    def test_failed_plan_keeps_existing_directory_untouched(self):
        # A failure must not delete or half-overwrite plans already there.
        out = self.path("plans")
        harness.run_ok([Tools.plan, mlp_model(), self.good_strategy(), "-o", out])
        with open(os.path.join(out, "rank0.plan"), "rb") as f:
            before = f.read()
        value = harness.strategy(0, SGD)
        self.assert_fails([Tools.plan, mlp_model(), self.strategy_value(value), "-o", out],
                          "batch.global")
        with open(os.path.join(out, "rank0.plan"), "rb") as f:
            self.assertEqual(f.read(), before, "a failed piper-plan changed an existing plan")


class PlanOutput(ErrorTest):
    """piper-plan -o never deletes what it did not write (issue 14, point 1)."""

    def plan(self, out, strategy="single.json", *flags, cwd=None):
        return harness.run([Tools.plan, mlp_model(), Tools.sample("strategies", strategy),
                            "-o", out, *flags], cwd=cwd)

    def user_folder(self):
        folder = self.path("work")
        os.makedirs(os.path.join(folder, "notes"))
        for name in ("keep.txt", os.path.join("notes", "draft.txt")):
            with open(os.path.join(folder, name), "w") as f:
                f.write("the user's " + name)
        return folder

    def assert_user_files_intact(self, folder):
        for name in ("keep.txt", os.path.join("notes", "draft.txt")):
            with open(os.path.join(folder, name)) as f:
                self.assertEqual(f.read(), "the user's " + name, f"{name} changed")

    def test_dot_in_a_user_folder_is_refused_and_loses_nothing(self):
        folder = self.user_folder()
        result = self.plan(".", cwd=folder)
        self.assertEqual(result.returncode, 1, result.describe())
        for needle in ("piper-plan: error:", folder, "'keep.txt'", "'notes'", "--force"):
            self.assertIn(needle, result.stderr, result.describe())
        self.assert_user_files_intact(folder)
        self.assertEqual(sorted(os.listdir(folder)), ["keep.txt", "notes"])

    def test_force_replaces_only_plan_files(self):
        folder = self.user_folder()
        harness.run_ok([Tools.plan, mlp_model(), Tools.sample("strategies", "zero2.json"),
                        "-o", ".", "--force"], cwd=folder)
        self.assertEqual(sorted(os.listdir(folder)),
                         ["keep.txt", "notes"] + [f"rank{r}.plan" for r in range(4)])
        # A one-rank plan over a four-rank one: the stale rank files are Piper's and go too.
        result = self.plan(folder + "/", "single.json", "--force")
        self.assertEqual(result.returncode, 0, result.describe())
        self.assertEqual(sorted(os.listdir(folder)), ["keep.txt", "notes", "rank0.plan"])
        self.assert_user_files_intact(folder)
        harness.run_ok([Tools.run, "--plan", os.path.join(folder, "rank0.plan"), "--steps", 1])

    def test_trailing_slash_creates_the_folder(self):
        out = self.path("new", "plans") + "/"
        result = self.plan(out)
        self.assertEqual(result.returncode, 0, result.describe())
        self.assertEqual(os.listdir(out), ["rank0.plan"])
        self.assertEqual(sorted(os.listdir(self.path("new"))), ["plans"], "staging left behind")

    def test_a_plan_folder_is_replaced_without_force(self):
        out = self.path("plans")
        harness.run_ok([Tools.plan, mlp_model(), Tools.sample("strategies", "zero2.json"),
                        "-o", out])
        result = self.plan(out)
        self.assertEqual(result.returncode, 0, result.describe())
        self.assertEqual(os.listdir(out), ["rank0.plan"])
        self.assertEqual(sorted(os.listdir(self.tmp)), ["plans"], "staging left behind")

    def test_output_that_is_a_file(self):
        out = self.path("plans")
        with open(out, "w") as f:
            f.write("not a folder")
        result = self.plan(out)
        self.assertEqual(result.returncode, 1, result.describe())
        self.assertIn("exists and is not a folder", result.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "not a folder")


class CommandLine(ErrorTest):
    """Usage errors exit 2 naming the real mistake; every tool has --version (issue 14, point 9)."""

    def tools(self):
        return {"piper-plan": Tools.plan, "piper-run": Tools.run, "piper-dump": Tools.dump,
                "piper-launch": os.path.join(os.path.dirname(Tools.run), "piper-launch"),
                "piper-export": os.path.join(os.path.dirname(Tools.run), "piper-export")}

    def test_an_unknown_flag_is_named_even_without_the_required_ones(self):
        for name, tool in self.tools().items():
            if name == "piper-launch":
                continue  # it forwards unknown flags to piper-run
            result = harness.run([tool, "--bogus"])
            self.assertEqual(result.returncode, 2, result.describe())
            self.assertTrue(result.stderr.startswith(f"{name}: error: "), result.describe())
            self.assertIn("--bogus", result.stderr, result.describe())

    def test_a_missing_argument_exits_2(self):
        for name, tool in self.tools().items():
            if name == "piper-dump":
                continue  # takes either a plan or --schedule, checked after parsing
            result = harness.run([tool])
            self.assertEqual(result.returncode, 2, result.describe())
            self.assertRegex(result.stderr, rf"^{name}: error: .*required", result.describe())

    def test_version(self):
        for name, tool in self.tools().items():
            result = harness.run([tool, "--version"])
            self.assertEqual(result.returncode, 0, result.describe())
            self.assertRegex(result.stdout, rf"^{name} \d+\.\d+\.\d+\+\S+, plan format \d+$")

    def test_launch_help_lists_what_it_forwards(self):
        result = harness.run_ok([self.tools()["piper-launch"], "--help"])
        for flag in ("--steps", "--data", "--metrics", "--save-onnx", "--timeout", "--device"):
            self.assertIn(flag, result.stdout)


class NonFinite(ErrorTest):
    """A NaN or infinity stops training at that step with exit 3 and saves nothing (issue 14,
    point 3)."""

    def plan(self, optimizer):
        plans = self.path("plans")
        strategy = harness.write_json(self.path("s.json"),
                                      harness.strategy(GLOBAL_BATCH, optimizer))
        harness.run_ok([Tools.plan, mlp_model(), strategy, "-o", plans])
        return os.path.join(plans, "rank0.plan")

    def train(self, plan, *flags):
        return harness.run([Tools.run, "--plan", plan, "--steps", 50, "--metrics",
                            self.path("m.jsonl"), "--save-onnx", self.path("model.onnx"),
                            *flags])

    def test_a_huge_learning_rate_stops_at_the_step_keeping_the_previous_model(self):
        with open(self.path("model.onnx"), "wb") as f:
            f.write(b"the previous model")
        result = self.train(self.plan({"type": "adamw", "lr": 1e30}))
        self.assertEqual(result.returncode, 3, result.describe())
        match = re.search(r"piper-run: error: step (\d+): the loss is (NaN|infinite) on rank 0",
                          result.stderr)
        self.assertTrue(match, result.describe())
        with open(self.path("model.onnx"), "rb") as f:
            self.assertEqual(f.read(), b"the previous model", "a non-finite model was saved")
        records = harness.read_metrics(self.path("m.jsonl"))
        self.assertEqual(len(records), int(match.group(1)), records)
        self.assertIsNone(records[-1]["loss"])

    def test_check_finite_names_the_first_kernel_of_nan_data(self):
        data = self.path("data")
        os.mkdir(data)
        x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
        x[3, 5] = np.nan
        np.save(os.path.join(data, "x.npy"), x)
        np.save(os.path.join(data, "y.npy"), (np.arange(64) % 10).astype(np.int64))
        plan = self.plan(SGD)
        result = self.train(plan, "--data", data)
        self.assertEqual(result.returncode, 3, result.describe())
        self.assertIn("step 1: the loss is NaN", result.stderr)
        result = self.train(plan, "--data", data, "--check-finite")
        self.assertEqual(result.returncode, 3, result.describe())
        self.assertRegex(result.stderr, r"instruction \d+ \(\S+ '/fc1/[^']*'\): step 1: wrote NaN "
                                        r"into tensor \d+ '[^']+'", result.describe())
        self.assertFalse(os.path.exists(self.path("model.onnx")))


class HarnessSkips(ErrorTest):
    """A skipped test fails its script unless the reason is a GPU's absence (issue 14, point 10)."""

    def run_script(self, reason):
        script = self.path("test_skipping.py")
        with open(script, "w") as f:
            f.write("import sys, unittest\n"
                    f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
                    "import harness\n"
                    "class Case(unittest.TestCase):\n"
                    "    def test_skips(self):\n"
                    f"        self.skipTest({reason!r})\n"
                    "harness.main()\n")
        return harness.run([sys.executable, script, "--piper-plan", Tools.plan,
                            "--piper-run", Tools.run, "--piper-dump", Tools.dump,
                            "--source-dir", Tools.source_dir])

    def test_a_skip_for_another_reason_fails(self):
        result = self.run_script("planning failed")
        self.assertEqual(result.returncode, 1, result.describe())
        self.assertIn("only a GPU's absence may skip a test", result.stderr)

    def test_a_skip_without_a_gpu_passes(self):
        result = self.run_script("no usable CUDA GPU")
        self.assertEqual(result.returncode, 0, result.describe())


class RunErrors(ErrorTest):
    """piper-run with a damaged plan or bad --data; no metrics or saved model appear."""

    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="piper_run_errors_")
        strategy = harness.write_json(os.path.join(cls.shared, "strategy.json"),
                                      harness.strategy(GLOBAL_BATCH, SGD))
        cls.plans = os.path.join(cls.shared, "plans")
        harness.run_ok([Tools.plan, mlp_model(), strategy, "-o", cls.plans])
        with open(os.path.join(cls.plans, "rank0.plan"), "rb") as f:
            cls.plan_bytes = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared)

    def plan_file(self, data, name="rank0.plan"):
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def run_fails(self, plan, *needles, data=None):
        metrics = self.path("metrics.jsonl")
        saved = self.path("trained.onnx")
        argv = [Tools.run, "--plan", plan, "--steps", 2, "--metrics", metrics,
                "--save-onnx", saved]
        if data:
            argv += ["--data", data]
        result = self.assert_fails(argv, *needles)
        for path in (metrics, saved):
            self.assertFalse(os.path.exists(path),
                             f"piper-run failed but wrote {path}\n" + result.describe())
        return result

    def data_dir(self, x=None, y=None, name="data"):
        """A --data directory; x or y None means that file is left out."""
        directory = self.path(name)
        os.mkdir(directory)
        if x is not None:
            np.save(os.path.join(directory, "x.npy"), x)
        if y is not None:
            np.save(os.path.join(directory, "y.npy"), y)
        return directory

    def good_x(self, rows=64):
        return np.random.default_rng(0).standard_normal((rows, 32)).astype(np.float32)

    def good_y(self, rows=64):
        return (np.arange(rows) % 10).astype(np.int64)

    def test_good_plan_and_data_run(self):
        # The baseline the other cases damage.
        plan = self.plan_file(self.plan_bytes)
        data = self.data_dir(self.good_x(), self.good_y())
        metrics = self.path("metrics.jsonl")
        harness.run_ok([Tools.run, "--plan", plan, "--steps", 2, "--data", data,
                        "--metrics", metrics])
        self.assertEqual(len(harness.read_metrics(metrics)), 2)

    def test_missing_plan(self):
        self.run_fails(self.path("no_such.plan"), "no_such.plan")

    def test_corrupted_plan(self):
        damaged = bytearray(self.plan_bytes)
        damaged[len(damaged) // 2] ^= 0xFF  # a byte in the payload
        self.run_fails(self.plan_file(bytes(damaged), "corrupt.plan"), "corrupt.plan",
                       "corrupted")

    def test_truncated_plan(self):
        cut = self.plan_bytes[: len(self.plan_bytes) - 100]
        self.run_fails(self.plan_file(cut, "cut.plan"), "cut.plan", "truncated")

    def test_wrong_format_version(self):
        self.assertEqual(self.plan_bytes[:8], b"PIPRPLAN")
        version = struct.unpack_from("<I", self.plan_bytes, 8)[0]
        patched = bytearray(self.plan_bytes)
        struct.pack_into("<I", patched, 8, version + 41)
        self.run_fails(self.plan_file(bytes(patched), "future.plan"), "future.plan",
                       "version", str(version + 41))

    def test_not_a_plan(self):
        self.run_fails(mlp_model(), "model.onnx")

    def test_data_missing_input(self):
        data = self.data_dir(x=self.good_x())  # no y.npy
        result = self.run_fails(self.plan_file(self.plan_bytes), data=data)
        self.assertRegex(result.output, r"y\.npy|['\"`]y['\"`]",
                         "the message should name the missing input y\n" + result.describe())

    def test_data_wrong_dtype(self):
        data = self.data_dir(self.good_x().astype(np.float64), self.good_y())
        result = self.run_fails(self.plan_file(self.plan_bytes), data=data)
        self.assertRegex(result.output, r"x\.npy|['\"`]x['\"`]", result.describe())
        self.assertRegex(result.output, r"float64|<f8|f8|dtype", result.describe())

    def test_data_wrong_int_dtype(self):
        data = self.data_dir(self.good_x(), self.good_y().astype(np.int32))
        result = self.run_fails(self.plan_file(self.plan_bytes), data=data)
        self.assertRegex(result.output, r"y\.npy|['\"`]y['\"`]", result.describe())
        self.assertRegex(result.output, r"int32|<i4|i4|dtype", result.describe())

    def test_data_wrong_shape(self):
        x = np.zeros((64, 31), dtype=np.float32)
        data = self.data_dir(x, self.good_y())
        result = self.run_fails(self.plan_file(self.plan_bytes), data=data)
        self.assertRegex(result.output, r"x\.npy|['\"`]x['\"`]", result.describe())
        self.assertRegex(result.output, r"31|shape", result.describe())

    def test_data_sample_counts_differ(self):
        # x and y rows pair up as samples; arrays of different lengths cannot.
        data = self.data_dir(self.good_x(64), self.good_y(60))
        result = self.run_fails(self.plan_file(self.plan_bytes), data=data)
        self.assertRegex(result.output, r"64", result.describe())
        self.assertRegex(result.output, r"60", result.describe())

    def test_unwritable_outputs_fail_before_the_first_step(self):
        plan = self.plan_file(self.plan_bytes)
        missing = self.path("no_such_folder")
        for flag, path, needle in (("--save-onnx", os.path.join(missing, "m.onnx"), missing),
                                   ("--metrics", os.path.join(missing, "m.jsonl"), missing),
                                   ("--trace", self.tmp, "is a folder")):
            result = self.assert_fails([Tools.run, "--plan", plan, "--steps", 100000000, flag,
                                        path], flag, needle)
            self.assertNotIn("step 1 ", result.stdout, "it trained before checking " + flag)

    def test_a_model_changed_after_planning_is_refused(self):
        model = self.path("model.onnx")
        shutil.copy(mlp_model(), model)
        plans = self.path("plans")
        harness.run_ok([Tools.plan, model, harness.write_json(
            self.path("s.json"), harness.strategy(GLOBAL_BATCH, SGD)), "-o", plans])
        changed = onnx.load(model)
        weight = changed.graph.initializer[0]
        values = numpy_helper.to_array(weight) + 1
        weight.CopyFrom(numpy_helper.from_array(values, weight.name))
        onnx.save(changed, model)
        self.run_fails(os.path.join(plans, "rank0.plan"), model, "changed after planning",
                       "re-plan")

    def test_labels_out_of_range(self):
        # Fails during the first step: still no metrics or saved model.
        y = self.good_y()
        y[5] = 12
        data = self.data_dir(self.good_x(), y)
        self.run_fails(self.plan_file(self.plan_bytes), "12", data=data)

    def test_data_not_npy(self):
        data = self.data_dir(y=self.good_y())
        with open(os.path.join(data, "x.npy"), "w") as f:
            f.write("not numpy\n")
        result = self.run_fails(self.plan_file(self.plan_bytes), data=data)
        self.assertIn("x.npy", result.output, result.describe())


class DumpErrors(ErrorTest):
    def test_damaged_plans(self):
        self.assert_fails([Tools.dump, self.path("missing.plan")], "piper-dump: error:",
                          "missing.plan")
        self.assert_fails([Tools.dump, mlp_model()], "piper-dump: error:", "not a Piper plan")


class DumpOutput(unittest.TestCase):
    """piper-dump on a real plan: readable text and JSON of the same plan."""

    def test_text_and_json(self):
        import json
        with tempfile.TemporaryDirectory(prefix="piper_dump_") as tmp:
            strategy = harness.write_json(os.path.join(tmp, "s.json"),
                                          harness.strategy(GLOBAL_BATCH, SGD))
            harness.run_ok([Tools.plan, mlp_model(), strategy, "-o", os.path.join(tmp, "p")])
            plan = os.path.join(tmp, "p", "rank0.plan")
            text = harness.run_ok([Tools.dump, plan]).stdout
            dumped = json.loads(harness.run_ok([Tools.dump, plan, "--json"]).stdout)
        self.assertTrue(text.startswith("plan: rank 0 of 1\n"), text[:200])
        self.assertIn("optimizer: sgd  lr=0.05  momentum=0.9", text)
        # One line per instruction: index, pass, microbatch, op, label, typed operands.
        self.assertRegex(text, r"\n +\d+ F  mb\d+  Gemm  \S+  \(\S+ f32\[32,32\], ", text)
        self.assertRegex(text, r"\n +\d+ B  mb\d+  \S+", text)
        self.assertRegex(text, r"\n +\d+ U  mb\S+  \S+", text)
        self.assertEqual(dumped["header"]["world_size"], 1)
        self.assertEqual(int(dumped["global_batch"]), GLOBAL_BATCH)
        for stream in dumped["streams"]:
            self.assertIn(f"stream '{stream['name']}' ({len(stream['instructions'])} "
                          "instructions):", text)


if __name__ == "__main__":
    harness.main()
