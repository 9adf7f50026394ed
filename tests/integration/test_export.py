"""piper-export (docs/user-guide.md, "Exporting a model"): samples/gpt trained 3 steps on 2
replicas with ZeRO-2, checkpointed, exported: PyTorch loads the state dict with
load_state_dict(strict=True) into the sample's module and computes the loss piper-run reports
for step 4 within 1e-5; the latest step's export equals --save-onnx's model bitwise (and so
does a TP=2 x DP=2 checkpoint's, of boxes and ZeRO-1 slices); the
exported ONNX re-plans and trains from those weights; the --inference graph, run by
onnxruntime, gives PyTorch's logits within 1e-5. The same for HuggingFace GPT-2, whose tied
lm_head and wte come back under both names (the wrapper's, and the inner model's with
--prefix-strip model.). A flipped byte in a shard is refused naming the file by piper-export
and by piper-run --resume; an -o folder of other files, and a checkpoint whose model is
unknown, are refused; a loss that takes two parameter-dependent values is refused naming them,
and --output picks one.

Runs in the venv tools/install-deps.sh creates (third_party/hf-venv: transformers,
safetensors, onnxruntime over /usr/bin/python3's torch); CTest starts it with /usr/bin/python3
and --hf-python VENV_PYTHON, and the script re-runs itself there."""
from harness import run_under_hf_python

run_under_hf_python(("transformers", "safetensors", "onnxruntime"))

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import unittest  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import harness  # noqa: E402
from harness import Tools  # noqa: E402
from test_data_parallel import launch_path, weights_of  # noqa: E402

GLOBAL_BATCH = 8
ROWS = 32  # of training data; step s (0-based) reads rows (s * GLOBAL_BATCH + i) mod ROWS
OPTIMIZER = {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
ZERO2 = [{"op": "zero", "stage": 2, "devices": [0, 1]}]
LOSS_RTOL = 1e-5
LOGITS_TOL = 1e-5


def export_tool():
    return os.path.join(os.path.dirname(Tools.run), "piper-export")


def rows_of_step(step):
    """The rows 0-based step `step` trains on."""
    return [(step * GLOBAL_BATCH + i) % ROWS for i in range(GLOBAL_BATCH)]


def flip_a_byte(path):
    with open(path, "r+b") as f:
        f.seek(-5, os.SEEK_END)
        byte = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x01]))


def output_of(module):
    """Calls fn() and returns what `module` (a submodule) output during it."""
    def run(fn):
        seen = []
        handle = module.register_forward_hook(lambda _m, _i, output: seen.append(output))
        try:
            with torch.no_grad():
                fn()
        finally:
            handle.remove()
        return seen[-1].numpy()
    return run


class Trained:
    """A model planned under ZeRO-2 on 2 ranks, trained 4 steps with a checkpoint after step 3
    and after step 4, and both steps exported."""

    def __init__(self, work, model, data, flags_of_export=()):
        os.makedirs(work)
        self.work = work
        strategy = harness.write_json(os.path.join(work, "strategy.json"),
                                      harness.strategy(GLOBAL_BATCH, OPTIMIZER, directives=ZERO2))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, model, strategy, "-o", plans])
        self.checkpoints = os.path.join(work, "checkpoints")
        self.metrics = os.path.join(work, "metrics.jsonl")
        self.saved = os.path.join(work, "trained.onnx")
        self.command = [launch_path(), "--plans", plans, "--data", data, "--timeout", 60,
                        "--checkpoint-dir", self.checkpoints, "--metrics", self.metrics]
        harness.run_ok(self.command + ["--steps", 4, "--save-every", 3, "--save-onnx",
                                       self.saved], timeout=240)
        self.losses = [m["loss"] for m in harness.read_metrics(self.metrics)]
        self.step3 = os.path.join(work, "step3")
        self.latest = os.path.join(work, "latest")
        harness.run_ok([export_tool(), os.path.join(self.checkpoints, "step-000003"), "-o",
                        self.step3, "--inference"] + list(flags_of_export))
        harness.run_ok([export_tool(), self.checkpoints, "-o", self.latest])


class GptExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_export_")
        cls.data = os.path.join(cls.tmp.name, "data")
        idx = harness.save_token_sequences(cls.data, ROWS, 64, 16, seed=9)
        cls.idx, cls.targets = idx, np.roll(idx, -1, axis=1)
        cls.gpt = harness.sample_module("gpt", "export.py")
        cls.trained = Trained(os.path.join(cls.tmp.name, "gpt"), Tools.sample("gpt", "model.onnx"),
                              cls.data)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def module(self, folder):
        model = self.gpt.build_model()
        model.load_state_dict(load_file(os.path.join(folder, "model.safetensors")), strict=True)
        return model.eval()

    def batch(self, step):
        rows = rows_of_step(step)
        return torch.from_numpy(self.idx[rows]), torch.from_numpy(self.targets[rows])

    def test_state_dict_gives_the_next_steps_loss_in_pytorch(self):
        model = self.module(self.trained.step3)
        state = load_file(os.path.join(self.trained.step3, "model.safetensors"))
        self.assertEqual(sorted(state), sorted(model.state_dict()))
        self.assertTrue(all(t.dtype == torch.float32 for t in state.values()))
        with torch.no_grad():
            loss = model(*self.batch(3)).item()
        want = self.trained.losses[3]
        self.assertLessEqual(abs(loss - want) / abs(want), LOSS_RTOL,
                             f"PyTorch {loss} from the step-3 export, piper-run {want} at step 4")

    def test_latest_step_export_is_save_onnx_model(self):
        exported = weights_of(os.path.join(self.trained.latest, "model.onnx"))
        saved = weights_of(self.trained.saved)
        self.assertEqual(sorted(exported), sorted(saved))
        state = load_file(os.path.join(self.trained.latest, "model.safetensors"))
        for name, value in saved.items():
            self.assertTrue(np.array_equal(exported[name], value), name)
            self.assertTrue(np.array_equal(state[name].numpy(), value), name)

    def test_exported_onnx_replans_and_trains(self):
        work = os.path.join(self.tmp.name, "replanned")
        os.makedirs(work)
        strategy = harness.write_json(os.path.join(work, "strategy.json"),
                                      harness.strategy(GLOBAL_BATCH, OPTIMIZER))
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, os.path.join(self.trained.step3, "model.onnx"), strategy,
                        "-o", plans])
        metrics = os.path.join(work, "metrics.jsonl")
        harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", 2,
                        "--data", self.data, "--metrics", metrics])
        losses = [m["loss"] for m in harness.read_metrics(metrics)]
        with torch.no_grad():
            want = self.module(self.trained.step3)(*self.batch(0)).item()
        self.assertEqual(len(losses), 2)
        self.assertLessEqual(abs(losses[0] - want) / abs(want), LOSS_RTOL,
                             f"step 1 from the exported weights: Piper {losses[0]}, PyTorch {want}")

    def test_inference_graph_gives_pytorchs_logits_in_onnxruntime(self):
        path = os.path.join(self.trained.step3, "inference.onnx")
        graph = onnx.load(path).graph
        self.assertEqual([i.name for i in graph.input], ["idx"])
        self.assertEqual([o.name for o in graph.output], ["logits"])
        idx, targets = self.batch(3)
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = session.run(None, {"idx": idx.numpy()})[0]
        model = self.module(self.trained.step3)
        want = output_of(model.head)(lambda: model(idx, targets))
        self.assertEqual(got.shape, (GLOBAL_BATCH, 16, 64))
        np.testing.assert_allclose(got, want, rtol=LOGITS_TOL, atol=LOGITS_TOL)

    def test_tensor_parallel_boxes_and_zero1_slices_are_laid_together(self):
        # samples/strategies/gpt_tp2_dp2: Megatron's blocks (boxes) over 2 ranks, ZeRO-1's flat
        # slices of them over 2 replicas; the export equals --save-onnx's gathered model.
        work = os.path.join(self.tmp.name, "tp2_dp2")
        plans = os.path.join(work, "plans")
        harness.run_ok([Tools.plan, Tools.sample("gpt", "model.onnx"),
                        Tools.sample("strategies", "gpt_tp2_dp2.json"), "-o", plans])
        checkpoints = os.path.join(work, "checkpoints")
        saved = os.path.join(work, "trained.onnx")
        harness.run_ok([launch_path(), "--plans", plans, "--data", self.data, "--timeout", 60,
                        "--steps", 2, "--checkpoint-dir", checkpoints, "--save-onnx", saved],
                       timeout=240)
        with open(os.path.join(checkpoints, "step-000002", "index.json")) as f:
            shards = [s for t in json.load(f)["tensors"].values() for s in t["shards"]]
        self.assertTrue(any("box" in s for s in shards) and any("flat" in s for s in shards))
        out = os.path.join(work, "out")
        harness.run_ok([export_tool(), checkpoints, "-o", out])
        state = load_file(os.path.join(out, "model.safetensors"))
        for name, value in weights_of(saved).items():
            self.assertTrue(np.array_equal(state[name].numpy(), value), name)

    def test_flipped_byte_is_refused_naming_the_file(self):
        checkpoints = os.path.join(self.tmp.name, "corrupt")
        shutil.copytree(self.trained.checkpoints, checkpoints)
        shard = os.path.join(checkpoints, "step-000004", "rank-00001.safetensors")
        flip_a_byte(shard)
        exported = harness.run([export_tool(), checkpoints, "-o",
                                os.path.join(self.tmp.name, "corrupt_out")])
        self.assertEqual(exported.returncode, 1, exported.describe())
        self.assertIn(f"checkpoint shard '{shard}' is corrupted", exported.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "corrupt_out")))
        command = [checkpoints if a == self.trained.checkpoints else a
                   for a in self.trained.command]
        resumed = harness.run(command + ["--steps", 6, "--resume"], timeout=240)
        self.assertNotEqual(resumed.returncode, 0, resumed.describe())
        self.assertIn(f"checkpoint shard '{shard}' is corrupted", resumed.output)

    def test_other_files_in_the_output_folder_are_refused_and_kept(self):
        out = os.path.join(self.tmp.name, "occupied")
        os.makedirs(out)
        notes = os.path.join(out, "notes.txt")
        with open(notes, "w") as f:
            f.write("mine\n")
        result = harness.run([export_tool(), self.trained.checkpoints, "-o", out])
        self.assertEqual(result.returncode, 1, result.describe())
        self.assertIn(f"-o '{out}' is not empty and not a folder piper-export wrote: it holds "
                      "'notes.txt'", result.stderr)
        self.assertEqual(os.listdir(out), ["notes.txt"])
        # A folder piper-export wrote is written again, whole: no inference.onnx of an
        # earlier export is left beside other weights.
        again = os.path.join(self.tmp.name, "again")
        shutil.copytree(self.trained.step3, again)
        self.assertIn("inference.onnx", os.listdir(again))
        harness.run_ok([export_tool(), self.trained.checkpoints, "-o", again])
        self.assertEqual(sorted(os.listdir(again)), ["model.onnx", "model.safetensors"])

    def test_unknown_model_needs_model_flag(self):
        step = os.path.join(self.tmp.name, "no_model")
        shutil.copytree(os.path.join(self.trained.checkpoints, "step-000003"), step)
        index_path = os.path.join(step, "index.json")
        with open(index_path) as f:
            index = json.load(f)
        self.assertEqual(index["model"],
                         os.path.normpath(os.path.abspath(Tools.sample("gpt", "model.onnx"))))
        del index["model"]
        harness.write_json(index_path, index)
        out = os.path.join(self.tmp.name, "no_model_out")
        result = harness.run([export_tool(), step, "-o", out])
        self.assertEqual(result.returncode, 1, result.describe())
        self.assertIn("does not record its model", result.stderr)
        self.assertIn("pass --model", result.stderr)
        harness.run_ok([export_tool(), step, "-o", out, "--model",
                        Tools.sample("gpt", "model.onnx")])
        self.assertEqual(sorted(os.listdir(out)), ["model.onnx", "model.safetensors"])

    def test_inference_output_must_name_a_value(self):
        result = harness.run([export_tool(), self.trained.checkpoints, "-o",
                              os.path.join(self.tmp.name, "bad_output"), "--inference",
                              "--output", "no_such_value"])
        self.assertEqual(result.returncode, 1, result.describe())
        self.assertIn("--output 'no_such_value'", result.stderr)


class TwoHeads(torch.nn.Module):
    """Two heads' errors summed: the loss takes two values that depend on parameters."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(4, 3)
        self.second = torch.nn.Linear(4, 3)

    def forward(self, a, b):
        return ((self.first(a) - b) ** 2).mean() + ((self.second(a) - b) ** 2).mean()


class AmbiguousCut(unittest.TestCase):
    def test_two_loss_inputs_are_refused_naming_them_and_output_picks_one(self):
        with tempfile.TemporaryDirectory(prefix="piper_export_cut_") as work:
            rng = np.random.default_rng(3)
            inputs = (rng.standard_normal((GLOBAL_BATCH, 4)).astype(np.float32),
                      rng.standard_normal((GLOBAL_BATCH, 3)).astype(np.float32))
            model = TwoHeads()
            path = harness.export_two_input_model(model, inputs, work)
            strategy = harness.write_json(os.path.join(work, "strategy.json"),
                                          harness.strategy(GLOBAL_BATCH, OPTIMIZER))
            plans = os.path.join(work, "plans")
            harness.run_ok([Tools.plan, path, strategy, "-o", plans])
            checkpoints = os.path.join(work, "checkpoints")
            harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", 1,
                            "--data", os.path.join(work, "data"), "--checkpoint-dir",
                            checkpoints])
            out = os.path.join(work, "out")
            refused = harness.run([export_tool(), checkpoints, "-o", out, "--inference"])
            self.assertEqual(refused.returncode, 1, refused.describe())
            self.assertIn("the loss subgraph takes 2 values that depend on parameters",
                          refused.stderr)
            self.assertIn("pass --output NAME", refused.stderr)
            self.assertFalse(os.path.exists(out))
            named = re.findall(r"'([^']+)' \(into node '[^']+'\)", refused.stderr)
            self.assertEqual(len(named), 2, refused.stderr)
            first = next(n for n in named if "first" in n)
            harness.run_ok([export_tool(), checkpoints, "-o", out, "--inference", "--output",
                            first])
            model.load_state_dict(load_file(os.path.join(out, "model.safetensors")), strict=True)
            session = onnxruntime.InferenceSession(os.path.join(out, "inference.onnx"),
                                                   providers=["CPUExecutionProvider"])
            self.assertEqual([i.name for i in session.get_inputs()], ["a"])
            got = session.run(None, {"a": inputs[0]})[0]
            with torch.no_grad():
                want = model.first(torch.from_numpy(inputs[0])).numpy()
            np.testing.assert_allclose(got, want, rtol=LOGITS_TOL, atol=LOGITS_TOL)


class Gpt2Export(unittest.TestCase):
    """HF GPT-2 ties lm_head.weight to transformer.wte.weight: one ONNX initializer, both
    names in the state dict."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="piper_export_gpt2_")
        cls.hf = harness.sample_module("hf", "export.py")
        folder = os.path.join(cls.tmp.name, "model")
        path, _, (cls.input_ids, cls.labels) = cls.hf.export("gpt2", folder)
        cls.trained = Trained(os.path.join(cls.tmp.name, "gpt2"), path,
                              os.path.join(folder, "data"), ["--prefix-strip", "model."])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def batch(self, step):
        rows = rows_of_step(step)
        return torch.from_numpy(self.input_ids[rows]), torch.from_numpy(self.labels[rows])

    def test_tied_weights_are_recorded_and_both_names_load(self):
        metadata = {e.key: e.value for e in onnx.load(
            os.path.join(self.tmp.name, "model", "model.onnx")).metadata_props}
        self.assertEqual(json.loads(metadata[self.hf.TIED_WEIGHTS_KEY]),
                         {"model.lm_head.weight": "model.transformer.wte.weight"})
        wrapped = load_file(os.path.join(self.trained.latest, "model.safetensors"))
        self.assertTrue(torch.equal(wrapped["model.lm_head.weight"],
                                    wrapped["model.transformer.wte.weight"]))
        model = self.hf.build("gpt2")
        model.load_state_dict(wrapped, strict=True)

    def test_inner_model_gives_the_next_steps_loss(self):
        model = self.hf.build("gpt2").model  # the GPT2LMHeadModel inside WithLoss
        state = load_file(os.path.join(self.trained.step3, "model.safetensors"))
        self.assertIn("lm_head.weight", state)
        model.load_state_dict(state, strict=True)
        input_ids, labels = self.batch(3)
        with torch.no_grad():
            loss = model.eval()(input_ids=input_ids, labels=labels).loss.item()
        want = self.trained.losses[3]
        self.assertLessEqual(abs(loss - want) / abs(want), LOSS_RTOL,
                             f"PyTorch {loss} from the step-3 export, piper-run {want} at step 4")

    def test_inference_graph_gives_the_logits(self):
        path = os.path.join(self.trained.step3, "inference.onnx")
        self.assertEqual([i.name for i in onnx.load(path).graph.input], ["input_ids"])
        model = self.hf.build("gpt2").model
        model.load_state_dict(load_file(os.path.join(self.trained.step3, "model.safetensors")))
        input_ids, _ = self.batch(3)
        with torch.no_grad():
            want = model.eval()(input_ids=input_ids).logits.numpy()
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = session.run(None, {"input_ids": input_ids.numpy()})[0]
        np.testing.assert_allclose(got, want, rtol=LOGITS_TOL, atol=LOGITS_TOL)


if __name__ == "__main__":
    harness.main()
