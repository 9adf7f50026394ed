"""Shared helpers for the integration tests: where the tools are, running them,
writing strategies and data.

Each test script is run by CTest as

    /usr/bin/python3 test_x.py --piper-plan PATH --piper-run PATH --piper-dump PATH \
        --source-dir REPO [unittest arguments...]

and can be run the same way by hand (tests/integration/README.md).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import unittest


def run_under_hf_python(modules=("transformers",)):
    """Re-executes the calling script under --hf-python (the venv tools/install-deps.sh
    creates) unless MODULES import here; fails, saying how to get them, when it cannot."""
    import importlib

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--hf-python")
    args, rest = parser.parse_known_args()
    sys.argv = [sys.argv[0]] + rest
    try:
        for module in modules:
            importlib.import_module(module)
        return
    except ImportError:
        pass
    python = args.hf_python
    if python and os.path.exists(python) and not os.environ.get("PIPER_HF_REEXEC"):
        os.environ["PIPER_HF_REEXEC"] = "1"
        os.execv(python, [python] + sys.argv)
    sys.exit(f"FAIL: {', '.join(modules)} not all installed in {python or sys.executable}: run "
             "tools/install-deps.sh, which creates third_party/hf-venv with them (or point the "
             "CMake cache variable PIPER_HF_PYTHON at such a Python)")


class Tools:
    plan = None
    run = None
    dump = None
    source_dir = None

    @classmethod
    def sample(cls, *parts):
        return os.path.join(cls.source_dir, "samples", *parts)


def main():
    """Parses the tool paths, then hands the remaining arguments to unittest."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--piper-plan", required=True)
    parser.add_argument("--piper-run", required=True)
    parser.add_argument("--piper-dump", required=True)
    parser.add_argument("--source-dir", required=True)
    args, rest = parser.parse_known_args()
    Tools.plan = os.path.abspath(args.piper_plan)
    Tools.run = os.path.abspath(args.piper_run)
    Tools.dump = os.path.abspath(args.piper_dump)
    Tools.source_dir = os.path.abspath(args.source_dir)
    result = unittest.main(argv=[sys.argv[0]] + rest, verbosity=2, exit=False).result
    # A skip hides whatever broke; only a missing (or present) GPU may decide what runs.
    hidden = [(test, reason) for test, reason in result.skipped if not GPU_REASON.search(reason)]
    for test, reason in hidden:
        print(f"FAIL: {test} was skipped ({reason}); only a GPU's absence may skip a test",
              file=sys.stderr)
    sys.exit(0 if result.wasSuccessful() and not hidden else 1)


GPU_REASON = re.compile(r"\b(GPU|CUDA)\b", re.IGNORECASE)


class Result:
    def __init__(self, argv, completed):
        self.argv = argv
        self.returncode = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr

    @property
    def output(self):
        return self.stdout + self.stderr

    def describe(self):
        return (f"command: {' '.join(self.argv)}\nexit code: {self.returncode}\n"
                f"stdout:\n{self.stdout}\nstderr:\n{self.stderr}")


def run(argv, timeout=120, cwd=None):
    completed = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                               timeout=timeout, cwd=cwd)
    return Result([str(a) for a in argv], completed)


def run_ok(argv, timeout=120, cwd=None):
    result = run(argv, timeout, cwd)
    if result.returncode != 0:
        raise AssertionError("command failed\n" + result.describe())
    return result


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
    return path


def sample_module(*parts):
    """A sample's Python file as a module: samples/NAME/export.py for `sample_module(NAME)`, or
    samples/PARTS... (`sample_module("hf", "export.py")`)."""
    import importlib.util

    parts = parts if len(parts) > 1 else (parts[0], "export.py")
    name = "piper_sample_" + "_".join(part.replace(".py", "") for part in parts)
    spec = importlib.util.spec_from_file_location(name, Tools.sample(*parts))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plan_strategy(work, model_path, strategy_value):
    """Writes `strategy_value` to WORK/strategy.json (WORK made if missing), plans `model_path`
    with it into WORK/plans and returns that folder and piper-plan's result."""
    os.makedirs(work, exist_ok=True)
    path = write_json(os.path.join(work, "strategy.json"), strategy_value)
    plans = os.path.join(work, "plans")
    return plans, run_ok([Tools.plan, model_path, path, "-o", plans])


def strategy(global_batch, optimizer, **extra):
    """A single-device strategy: no directives."""
    value = {"batch": {"global": global_batch}, "optimizer": optimizer}
    value.update(extra)
    return value


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def save_token_sequences(directory, rows, vocab, positions, seed):
    """Random token rows in DIRECTORY/idx.npy and, shifted by one position,
    DIRECTORY/targets.npy (the next token, wrapping around); returns idx."""
    import numpy as np

    os.makedirs(directory)
    idx = np.random.default_rng(seed).integers(0, vocab, (rows, positions)).astype(np.int64)
    np.save(os.path.join(directory, "idx.npy"), idx)
    np.save(os.path.join(directory, "targets.npy"), np.roll(idx, -1, axis=1))
    return idx


def export_two_input_model(model, inputs, work):
    """Exports `model` (forward(a, b) -> loss) in training mode with a dynamic
    batch to WORK/model.onnx and saves `inputs` (two arrays, samples first) as
    WORK/data/{a,b}.npy; returns the model's path."""
    import numpy as np
    import onnx
    import torch

    x, t = inputs
    os.makedirs(os.path.join(work, "data"))
    np.save(os.path.join(work, "data", "a.npy"), x)
    np.save(os.path.join(work, "data", "b.npy"), t)
    model_path = os.path.join(work, "model.onnx")
    torch.onnx.export(model, (torch.from_numpy(x[:2]), torch.from_numpy(t[:2])), model_path,
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["a", "b"],
                      output_names=["loss"],
                      dynamic_axes={"a": {0: "batch"}, "b": {0: "batch"}})
    ops = {node.op_type for node in onnx.load(model_path).graph.node}
    print(f"[{work}] exported ops: {' '.join(sorted(ops))}")
    return model_path


def train_like_piper(model, inputs, make_optimizer, steps, global_batch, autocast=False):
    """Trains `model` in PyTorch on the rows Piper's data loader feeds (step s
    uses rows (s*G + i) mod N), under CPU bfloat16 autocast if asked; returns
    each step's loss."""
    import numpy as np
    import torch

    x, t = inputs
    optimizer = make_optimizer(model.parameters())
    losses = []
    for step in range(steps):
        rows = (step * global_batch + np.arange(global_batch)) % x.shape[0]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(torch.from_numpy(x[rows]), torch.from_numpy(t[rows]))
        losses.append(loss.float().item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return losses


def train_exported_model_like_pytorch(test, work, model, inputs, optimizer, make_optimizer,
                                      steps, global_batch, loss_rtol, weight_rtol,
                                      **strategy_extra):
    """Exports `model` (forward(a, b) -> loss) with a dynamic batch, trains it
    with Piper on `inputs` (two arrays, samples first) and with PyTorch from
    the same weights on the same rows, and asserts every step's loss and every
    final weight agree; frozen buffers must not change."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model_path = export_two_input_model(model, inputs, work)
    plan_strategy = write_json(os.path.join(work, "strategy.json"),
                               strategy(global_batch, optimizer, **strategy_extra))
    plans = os.path.join(work, "plans")
    run_ok([Tools.plan, model_path, plan_strategy, "-o", plans])
    metrics = os.path.join(work, "metrics.jsonl")
    trained = os.path.join(work, "trained.onnx")
    run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan"), "--steps", steps,
            "--data", os.path.join(work, "data"), "--metrics", metrics, "--save-onnx", trained])
    losses = [record["loss"] for record in read_metrics(metrics)]
    expected = train_like_piper(model, inputs, make_optimizer, steps, global_batch)

    test.assertEqual(len(losses), steps)
    for step, (got, want) in enumerate(zip(losses, expected)):
        test.assertLessEqual(abs(got - want) / abs(want), loss_rtol,
                             f"[{work}] step {step}: piper {got!r}, pytorch {want!r}")
    saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(trained).graph.initializer}
    for param, value in model.named_parameters():
        want = value.detach().numpy()
        error = np.linalg.norm(saved[param] - want) / np.linalg.norm(want)
        print(f"[{work}] {param}: relative error {error:.2e}")
        test.assertLessEqual(error, weight_rtol, f"[{work}] final {param}")
    for buffer, value in model.named_buffers():
        np.testing.assert_array_equal(saved[buffer], value.numpy(),
                                      f"[{work}] frozen buffer {buffer} changed")


MASK64 = (1 << 64) - 1


def splitmix64(state):
    """One draw of splitmix64 from `state` (docs/user-guide.md, "Token files")."""
    z = (state + 0x9e3779b97f4a7c15) & MASK64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK64
    return z ^ (z >> 31)


def token_window_start(seed, sample, tokens, span):
    """Where piper-run --tokens starts sample `sample`'s window, as the user guide gives it."""
    return splitmix64(seed ^ ((sample * 0xd1b54a32d192ed03) & MASK64)) % (tokens - span + 1)


def token_batch(tokens, seed, step, global_batch, seq, offsets):
    """The rows piper-run --tokens --token-inputs feeds at `step`: {name: int64 [G, seq]}
    read from `tokens` (a numpy array or memmap of the file), for `offsets` {name: offset}."""
    import numpy as np

    span = max(offsets.values()) + seq
    starts = [token_window_start(seed, step * global_batch + i, len(tokens), span)
              for i in range(global_batch)]
    return {name: np.stack([np.asarray(tokens[s + offset:s + offset + seq], dtype=np.int64)
                            for s in starts])
            for name, offset in offsets.items()}
