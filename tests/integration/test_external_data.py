"""ONNX external data: weights kept in files beside the .onnx (what onnx.save_model's
save_as_external_data and torch.onnx.export write for models over 2 GB).

Piper reads them only from inside the model's folder, after resolving symlinks, and
refuses any other location before looking the path up; legitimate external data trains
exactly as the same weights inline; a plan records each external file's size and
modification time, and piper-run refuses a file changed after planning."""
import os
import resource
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import harness
from harness import Tools

GLOBAL_BATCH = 32
SGD = {"type": "sgd", "lr": 0.05, "momentum": 0.9}
OUTSIDE = "is outside the model's folder"


def mlp():
    return onnx.load(Tools.sample("mlp", "model.onnx"))


def mlp_data(directory):
    os.makedirs(directory)
    rng = np.random.default_rng(0)
    np.save(os.path.join(directory, "x.npy"), rng.standard_normal((64, 32)).astype(np.float32))
    np.save(os.path.join(directory, "y.npy"), (np.arange(64) % 10).astype(np.int64))
    return directory


def point_at(tensor, location, offset=None, length=None):
    """Marks `tensor` as stored externally at `location` (its bytes are not written)."""
    for field in ("raw_data", "float_data", "int64_data", "external_data"):
        tensor.ClearField(field)
    entries = {"location": location, "offset": offset, "length": length}
    for key, value in entries.items():
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
    tensor.data_location = TensorProto.EXTERNAL


def external_tensor(name, dims, location, offset, length):
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    point_at(tensor, location, offset, length)
    return tensor


def save_proto(model, path):
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def run_measured(argv, cwd=None):
    """Runs argv; returns (harness-like result, the child's peak RSS in bytes)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        child.stdout, child.stderr = out.read().decode(), err.read().decode()
    return harness.Result([str(a) for a in argv], child), usage.ru_maxrss * 1024


class ExternalDataTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="piper_external_")
        self.folder = self.path("model")
        os.mkdir(self.folder)
        self.strategy = harness.write_json(self.path("strategy.json"),
                                           harness.strategy(GLOBAL_BATCH, SGD))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def plan(self, model, plans=None, cwd=None):
        plans = plans or self.path("plans")
        return harness.run([Tools.plan, model, self.strategy, "-o", plans], cwd=cwd), plans

    def plan_fails(self, model, *needles):
        result, plans = self.plan(model)
        self.assertNotEqual(result.returncode, 0, "expected a refusal\n" + result.describe())
        self.assertTrue(0 < result.returncode < 128, result.describe())
        self.assertIn("error", result.stderr, result.describe())
        for needle in needles:
            self.assertIn(needle, result.stderr, result.describe())
        self.assertFalse(os.path.exists(plans), "a refused model left plans behind")
        return result.stderr

    def external_mlp(self, one_file=True):
        """The mlp sample saved as onnx.save_model writes it with its weights outside."""
        model = mlp()
        path = os.path.join(self.folder, "model.onnx")
        onnx.save_model(model, path, save_as_external_data=True,
                        all_tensors_to_one_file=one_file,
                        location="weights.bin" if one_file else None, size_threshold=0)
        return path

    def train(self, model, name, steps=3):
        plans = self.path(name + "_plans")
        result, _ = self.plan(model, plans, cwd="/")
        self.assertEqual(result.returncode, 0, result.describe())
        metrics = self.path(name + ".jsonl")
        trained = self.path(name + "_trained.onnx")
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", steps,
                        "--data", self.data, "--metrics", metrics, "--save-onnx", trained],
                       cwd="/")
        weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(trained).graph.initializer}
        return [record["loss"] for record in harness.read_metrics(metrics)], weights


class Confinement(ExternalDataTest):
    """A location leaving the model's folder is refused, naming model, initializer and
    location, before anything looks the path up: the message is the same whether or not
    the file it names exists."""

    def model_at(self, location):
        model = mlp()
        self.weight = model.graph.initializer[0].name
        point_at(model.graph.initializer[0], location)
        return save_proto(model, os.path.join(self.folder, "model.onnx"))

    def refusal(self, model, location):
        return self.plan_fails(model, "model.onnx", self.weight, repr(location)[1:-1], OUTSIDE,
                               "inside the folder")

    def assert_same_refusal_with_and_without(self, location, target):
        model = self.model_at(location)
        missing = self.refusal(model, location)
        with open(target, "wb") as f:
            f.write(b"\0" * 4096 * 4)
        self.assertEqual(self.refusal(model, location), missing,
                         "the message tells whether the path exists")

    def test_dot_dot_is_refused_the_same_whether_or_not_the_file_exists(self):
        self.assert_same_refusal_with_and_without("../outside.bin", self.path("outside.bin"))
        self.assert_same_refusal_with_and_without("sub/../../outside2.bin",
                                                  self.path("outside2.bin"))

    def test_an_absolute_path_is_refused_the_same_whether_or_not_it_exists(self):
        self.assert_same_refusal_with_and_without(self.path("absolute.bin"),
                                                  self.path("absolute.bin"))

    def test_a_symlink_leading_out_is_refused_whether_or_not_its_target_exists(self):
        os.symlink(self.path("secret.bin"), os.path.join(self.folder, "weights.bin"))
        os.mkdir(os.path.join(self.folder, "sub"))
        os.symlink("../../secret.bin", os.path.join(self.folder, "sub", "relative.bin"))
        for location in ("weights.bin", "sub/relative.bin"):
            with self.subTest(location=location):
                if os.path.exists(self.path("secret.bin")):
                    os.remove(self.path("secret.bin"))
                self.assert_same_refusal_with_and_without(location, self.path("secret.bin"))

    def test_a_symlink_staying_inside_is_followed(self):
        model = self.external_mlp()
        os.rename(os.path.join(self.folder, "weights.bin"), os.path.join(self.folder, "real.bin"))
        os.symlink("real.bin", os.path.join(self.folder, "weights.bin"))
        result, _ = self.plan(model)
        self.assertEqual(result.returncode, 0, result.describe())

    def test_a_file_swapped_for_a_symlink_after_planning_is_refused_by_piper_run(self):
        model = self.external_mlp()
        result, plans = self.plan(model)
        self.assertEqual(result.returncode, 0, result.describe())
        weights = os.path.join(self.folder, "weights.bin")
        shutil.move(weights, self.path("moved.bin"))
        os.symlink(self.path("moved.bin"), weights)
        run = harness.run([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", 1])
        self.assertNotEqual(run.returncode, 0, run.describe())
        self.assertIn(OUTSIDE, run.stderr, run.describe())

    def test_a_missing_file_inside_the_folder_is_named(self):
        model = self.model_at("weights.bin")
        self.plan_fails(model, "model.onnx", self.weight, "'weights.bin'", "does not exist")


class Loading(ExternalDataTest):
    """Weights beside the .onnx load, whichever folder the tools run in, and train exactly
    as the same weights inline."""

    def setUp(self):
        super().setUp()
        self.data = mlp_data(self.path("data"))

    def test_training_matches_the_inline_model_bit_for_bit(self):
        inline = save_proto(mlp(), self.path("inline.onnx"))
        losses, weights = self.train(inline, "inline")
        for one_file in (True, False):
            with self.subTest(one_file=one_file):
                external = self.external_mlp(one_file)
                got_losses, got_weights = self.train(external, f"external_{one_file}")
                self.assertEqual(got_losses, losses)
                self.assertEqual(got_weights.keys(), weights.keys())
                for name, value in weights.items():
                    np.testing.assert_array_equal(got_weights[name], value, name)
                shutil.rmtree(self.folder)
                os.mkdir(self.folder)

    def test_sharded_parameters_read_their_slices(self):
        # ZeRO-3 over two processes: each rank loads only its slice of every weight.
        strategy = harness.write_json(self.path("zero3.json"), harness.strategy(
            GLOBAL_BATCH, SGD, directives=[{"op": "zero", "stage": 3, "devices": [0, 1]}]))
        launch = os.path.join(os.path.dirname(Tools.run), "piper-launch")
        results = []
        for name, model in (("inline", save_proto(mlp(), self.path("inline.onnx"))),
                            ("external", self.external_mlp())):
            plans = self.path(name + "_plans")
            harness.run_ok([Tools.plan, model, strategy, "-o", plans])
            metrics = self.path(name + ".jsonl")
            trained = self.path(name + "_trained.onnx")
            harness.run_ok([launch, "--plans", plans, "--steps", 3, "--data", self.data,
                            "--metrics", metrics, "--save-onnx", trained, "--timeout", 60],
                           timeout=240)
            results.append(([r["loss"] for r in harness.read_metrics(metrics)],
                            {t.name: numpy_helper.to_array(t)
                             for t in onnx.load(trained).graph.initializer}))
        (losses, weights), (got_losses, got_weights) = results
        self.assertEqual(got_losses, losses)
        for name, value in weights.items():
            np.testing.assert_array_equal(got_weights[name], value, name)

    def test_offset_and_length_are_honoured(self):
        # The weights at unaligned offsets, after bytes that are not theirs, in one file.
        model = mlp()
        with open(os.path.join(self.folder, "packed.bin"), "wb") as f:
            for tensor in model.graph.initializer:
                f.write(b"\xff" * 3)
                data = numpy_helper.to_array(tensor).tobytes()
                offset = f.tell()
                f.write(data)
                point_at(tensor, "packed.bin", offset, len(data))
        packed = save_proto(model, os.path.join(self.folder, "model.onnx"))
        inline = save_proto(mlp(), self.path("inline.onnx"))
        self.assertEqual(self.train(packed, "packed")[0], self.train(inline, "inline")[0])

    def test_a_range_past_the_end_of_the_file_is_refused(self):
        model = self.external_mlp()
        weights = os.path.join(self.folder, "weights.bin")
        size = os.path.getsize(weights)
        os.truncate(weights, size - 4)
        self.plan_fails(model, "model.onnx", "'weights.bin'", str(size - 4), "bytes")

    def test_a_length_that_does_not_fit_the_shape_is_refused(self):
        model = mlp()
        tensor = model.graph.initializer[0]
        data = numpy_helper.to_array(tensor).tobytes()
        with open(os.path.join(self.folder, "w.bin"), "wb") as f:
            f.write(data)
        point_at(tensor, "w.bin", 0, len(data) - 4)
        path = save_proto(model, os.path.join(self.folder, "model.onnx"))
        self.plan_fails(path, tensor.name, str(len(data) - 4), str(len(data)))


class ChangedAfterPlanning(ExternalDataTest):
    """The plan records each external file's size and modification time."""

    def assert_run_refused(self, plans, *needles):
        result = harness.run([Tools.run, "--plan", os.path.join(plans, "rank0.plan"),
                              "--steps", 1])
        self.assertNotEqual(result.returncode, 0, result.describe())
        for needle in needles:
            self.assertIn(needle, result.stderr, result.describe())

    def test_a_changed_external_file_is_refused_naming_it(self):
        model = self.external_mlp()
        result, plans = self.plan(model)
        self.assertEqual(result.returncode, 0, result.describe())
        weights = os.path.join(self.folder, "weights.bin")
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", 1])
        stat = os.stat(weights)
        with open(weights, "r+b") as f:  # same size, other bytes, a later time
            f.write(b"\x01\x02\x03\x04")
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        self.assert_run_refused(plans, "'weights.bin'", "changed after planning", "re-plan")
        with open(weights, "ab") as f:  # and a different size
            f.write(b"\0" * 8)
        self.assert_run_refused(plans, "'weights.bin'", "changed after planning",
                                str(stat.st_size + 8))


class Over2GB(ExternalDataTest):
    """A model whose external data is over 2 GB (protobuf's limit on the .onnx), in a sparse
    file that takes no disk space: piper-plan plans it and piper-run loads and trains it,
    each reading only the tensors it uses, one copy of each."""

    TABLE_ROWS = (2**31 + 2**24) // 16  # float32 x 4 per row: 2 GiB + 16 MiB
    ROWS = np.array([0, 7, TABLE_ROWS - 2, TABLE_ROWS - 1], dtype=np.int64)

    def build(self):
        """loss = mean(Gather(table, idx) @ w): `table` is frozen (a 2 GiB + 16 MiB
        initializer, zero but for the rows the data reads), `unused` (another 2 GiB) is read
        by no node, and w sits after both at an offset past 4 GiB."""
        rows = self.TABLE_ROWS
        table_bytes = rows * 16
        w_value = np.arange(4, dtype=np.float32).reshape(4, 1) / 4
        picked = np.random.default_rng(1).standard_normal((len(self.ROWS), 4)).astype(np.float32)
        weights = os.path.join(self.folder, "weights.bin")
        with open(weights, "wb") as f:
            f.truncate(2 * table_bytes)
            for row, value in zip(self.ROWS, picked):
                f.seek(int(row) * 16)
                f.write(value.tobytes())
            f.seek(2 * table_bytes)
            f.write(w_value.tobytes())
        self.assertLess(os.stat(weights).st_blocks * 512, 2**24, "the file is not sparse here")

        table = external_tensor("table", [rows, 4], "weights.bin", 0, table_bytes)
        unused = external_tensor("unused", [rows, 4], "weights.bin", table_bytes, table_bytes)
        w = external_tensor("w", [4, 1], "weights.bin", 2 * table_bytes, 16)
        graph = helper.make_graph(
            [helper.make_node("Gather", ["table", "idx"], ["rows"], name="/Gather"),
             helper.make_node("MatMul", ["rows", "w"], ["scores"], name="/MatMul"),
             helper.make_node("ReduceMean", ["scores"], ["loss"], name="/ReduceMean",
                              keepdims=0)],
            "big", [helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch"])],
            [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
            initializer=[table, unused, w])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        path = save_proto(model, os.path.join(self.folder, "model.onnx"))
        self.assertLess(os.path.getsize(path), 4096)
        data = self.path("data")
        os.mkdir(data)
        np.save(os.path.join(data, "idx.npy"), np.tile(self.ROWS, 2))
        return path, data, picked, w_value

    def test_plans_and_trains_reading_only_what_it_uses(self):
        model, data, picked, w_value = self.build()
        strategy = harness.write_json(self.path("big.json"), harness.strategy(
            8, {"type": "sgd", "lr": 0.5}, frozen=["table"]))
        plans = self.path("plans")
        result, plan_rss = run_measured([Tools.plan, model, strategy, "-o", plans])
        self.assertEqual(result.returncode, 0, result.describe())
        self.assertLess(plan_rss, 2**30, "piper-plan read the big tensors")
        metrics = self.path("metrics.jsonl")
        result, run_rss = run_measured([Tools.run, "--plan", os.path.join(plans, "rank0.plan"),
                                        "--steps", 2, "--data", data, "--metrics", metrics])
        self.assertEqual(result.returncode, 0, result.describe())
        print(f"peak RSS: piper-plan {plan_rss / 2**20:.0f} MiB, "
              f"piper-run {run_rss / 2**20:.0f} MiB")
        # The frozen table (2 GiB + 16 MiB) is loaded once, the unused one not at all.
        self.assertLess(run_rss, 2**31 + 2**30, "piper-run held more than one table")
        losses = [record["loss"] for record in harness.read_metrics(metrics)]
        # Step 1's loss reads the rows past 2 GiB and w past 4 GiB: mean over the batch.
        expected = float(np.mean(np.tile(picked, (2, 1)) @ w_value, dtype=np.float32))
        self.assertAlmostEqual(losses[0], expected, places=5)
        self.assertNotEqual(losses[1], losses[0], "w did not train")


if __name__ == "__main__":
    harness.main()
