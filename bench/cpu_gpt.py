#!/usr/bin/python3
"""CPU training benchmark: samples/gpt at a benchmark size, Piper vs PyTorch
eager vs ONNX Runtime training, same machine, same thread count, same weights,
same data, in one run.

    /usr/bin/python3 bench/cpu_gpt.py [--d 256 --layers 4 --heads 4 --seq 128
                                       --batch 8 --vocab 512 --steps 10
                                       --threads N --openblas-coretype NAME --build DIR]

Prints, per system, the median step time (the first step is warm-up and not
counted), the Piper/peer ratio and the peak resident memory (ru_maxrss of the
child process that ran the training loop; every system runs in its own child).
This is a benchmark, not a test: nothing here asserts times.
"""
import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import hf_llama

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXPORT_PY = os.path.join(ROOT, "samples", "gpt", "export.py")
ORT_TARGET = "/tmp/ortpkgs"
LR = 1e-3
WEIGHT_DECAY = 0.01
SAMPLES = 64  # rows of token data; step s uses rows (s*B + i) mod SAMPLES


def load_gpt_module():
    spec = importlib.util.spec_from_file_location("piper_sample_gpt", EXPORT_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(gpt, args):
    import torch
    torch.manual_seed(gpt.SEED)
    return gpt.GPT(vocab=args.vocab, block=args.seq, d=args.d, layers=args.layers,
                   heads=args.heads)


def make_data(directory, vocab, block):
    """Learnable token data (each row counts up by its own stride; target = next token)."""
    import numpy as np
    rng = np.random.default_rng(4321)
    start = rng.integers(0, vocab, size=(SAMPLES, 1))
    stride = rng.integers(1, 4, size=(SAMPLES, 1))
    seq = (start + stride * np.arange(block + 1)) % vocab
    np.save(os.path.join(directory, "idx.npy"), seq[:, :-1].astype(np.int64))
    np.save(os.path.join(directory, "targets.npy"), seq[:, 1:].astype(np.int64))


def batch_rows(step, batch, samples=SAMPLES):
    import numpy as np
    return (step * batch + np.arange(batch)) % samples


# --------------------------------------------------------------------------- children

def child_torch(args):
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    if args.model == "hf-llama":
        model, (idx, targets) = hf_llama.load(args, args.work)
    else:
        gpt = load_gpt_module()
        model = build(gpt, args)
        gpt.load_initializers(model, os.path.join(args.work, "model.onnx"))
        idx = np.load(os.path.join(args.work, "data", "idx.npy"))
        targets = np.load(os.path.join(args.work, "data", "targets.npy"))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    out = []
    for step in range(args.steps):
        rows = batch_rows(step, args.batch, len(idx))
        x = torch.from_numpy(idx[rows])
        y = torch.from_numpy(targets[rows])
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        out.append({"step": step, "loss": float(loss), "seconds": dt})
    with open(args.child_out, "w") as f:
        json.dump({"steps": out, "threads": torch.get_num_threads()}, f)


def child_ort(args):
    import numpy as np
    import onnx
    import onnxruntime
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    model = onnx.load(os.path.join(args.work, "model.onnx"))
    # ORT's gradient builders read optional outputs the exporter leaves off
    # (SoftmaxCrossEntropyLoss's log_prob, LayerNormalization's mean and
    # inv_std_var); naming them changes no value.
    for n, node in enumerate(model.graph.node):
        want = {"SoftmaxCrossEntropyLoss": 2, "LayerNormalization": 3}.get(node.op_type, 0)
        while len(node.output) < want:
            node.output.append(f"ort_extra_{n}_{len(node.output)}")
    frozen = [t.name for t in model.graph.initializer if "mask" in t.name]
    trainable = [t.name for t in model.graph.initializer if "mask" not in t.name]
    art = os.path.join(args.work, "ort")
    os.makedirs(art, exist_ok=True)
    artifacts.generate_artifacts(model, requires_grad=trainable, frozen_params=frozen,
                                 loss=None, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=art)
    # The onnx from PyPI may stamp a newer IR version than the runtime reads.
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        path = os.path.join(art, name)
        m = onnx.load(path)
        if m.ir_version > 10:
            m.ir_version = 10
            onnx.save(m, path)
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    try:
        module = Module(os.path.join(art, "training_model.onnx"), state,
                        os.path.join(art, "eval_model.onnx"), session_options=so)
    except TypeError:
        module = Module(os.path.join(art, "training_model.onnx"), state,
                        os.path.join(art, "eval_model.onnx"))
    optimizer = Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR)
    module.train()
    idx = np.load(os.path.join(args.work, "data", "idx.npy"))
    targets = np.load(os.path.join(args.work, "data", "targets.npy"))
    out = []
    for step in range(args.steps):
        rows = batch_rows(step, args.batch)
        x = np.ascontiguousarray(idx[rows])
        y = np.ascontiguousarray(targets[rows])
        t0 = time.perf_counter()
        loss = module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
        dt = time.perf_counter() - t0
        out.append({"step": step, "loss": float(np.asarray(loss)), "seconds": dt})
    with open(args.child_out, "w") as f:
        json.dump({"steps": out, "ort_version": onnxruntime.__version__}, f)


# --------------------------------------------------------------------------- parent

def run_child(cmd, env, timeout):
    """Runs cmd, returns (returncode, peak RSS in bytes of that child, stdout+stderr)."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        text = log.read().decode(errors="replace")
    return proc.returncode, usage.ru_maxrss * 1024, text  # Linux: ru_maxrss in KiB


def ensure_ort(env):
    """Returns (ok, why). Tries the import; on failure one time-limited pip install."""
    probe = [sys.executable, "-c", "import onnxruntime.training.api, onnxruntime.training.artifacts"]
    r = subprocess.run(probe, env=env, capture_output=True, text=True)
    if r.returncode == 0:
        return True, ""
    first = (r.stderr.strip().splitlines() or ["?"])[-1]
    print(f"[ort] import failed ({first}); trying pip install --target {ORT_TARGET} "
          "onnxruntime-training (120 s limit)", flush=True)
    try:
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target",
                            ORT_TARGET, "onnxruntime-training"],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            tail = (p.stderr.strip().splitlines() or ["?"])[-1]
            return False, f"pip install onnxruntime-training failed: {tail}"
    except subprocess.TimeoutExpired:
        return False, "pip install onnxruntime-training timed out after 120 s"
    r = subprocess.run(probe, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["?"])[-1]
        return False, f"installed, but import fails: {tail}"
    return True, ""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["gpt", "hf-llama"], default="gpt",
                   help="samples/gpt, or HuggingFace's LlamaForCausalLM as exported (needs "
                        "third_party/hf-venv; PyTorch runs at 1 and 2 threads, the faster counts)")
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128, help="sequence length T")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1,
                   help="run every system this many times, alternating (medians over all rounds)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--openblas-coretype", default=None,
                   help="set OPENBLAS_CORETYPE for Piper and PyTorch (default: PyTorch gets the "
                        "OpenBLAS kernels piper-run chose)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="the CMake build directory holding tools/piper-plan and tools/piper-run")
    p.add_argument("--no-ort", action="store_true", help="skip the ONNX Runtime training peer")
    p.add_argument("--timeout", type=float, default=900, help="seconds per system")
    p.add_argument("--keep", action="store_true", help="keep the temp directory")
    p.add_argument("--child", choices=["torch", "ort"], help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child == "torch":
        return child_torch(args)
    if args.child == "ort":
        return child_ort(args)
    if args.model == "hf-llama":
        in_venv()

    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    env.pop("OPENBLAS_CORETYPE", None)
    if args.openblas_coretype:
        env["OPENBLAS_CORETYPE"] = args.openblas_coretype
    ort_env = dict(env)
    ort_env["PYTHONPATH"] = os.pathsep.join(
        [ORT_TARGET] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))

    tools = os.path.join(args.build, "tools")
    for tool in ("piper-plan", "piper-run"):
        if not os.path.exists(os.path.join(tools, tool)):
            sys.exit(f"{tools}/{tool} missing: cmake --build {args.build} -j2 "
                     "--target piper-plan piper-run")

    tmp = tempfile.mkdtemp(prefix="piper_bench_")
    work = tmp
    data = os.path.join(work, "data")
    os.makedirs(data)
    print(f"config: d={args.d} layers={args.layers} heads={args.heads} T={args.seq} "
          f"batch={args.batch} vocab={args.vocab} steps={args.steps} threads={args.threads}")
    print(f"OPENBLAS_CORETYPE: {args.openblas_coretype or 'unset (PyTorch gets the kernels piper-run chose)'}")
    print(f"work dir: {work}", flush=True)

    # Export with the same settings as samples/gpt (opset 17, training mode,
    # dynamic batch, no constant folding): its own export_model(), or samples/hf's export().
    import torch
    onnx_path = os.path.join(work, "model.onnx")
    strategy = {"batch": {"global": args.batch},
                "optimizer": {"type": "adamw", "lr": LR, "weight_decay": WEIGHT_DECAY}}
    if args.model == "hf-llama":
        nparams = hf_llama.export(args, work)
        args.no_ort = True
    else:
        gpt = load_gpt_module()
        model = build(gpt, args)
        nparams = sum(p.numel() for p in model.parameters())
        gpt.export_model(model, onnx_path, vocab=args.vocab, block=args.seq, batch=2)
        del model
        make_data(data, args.vocab, args.seq)
        strategy["frozen"] = ["*mask*"]
    print(f"exported {nparams} parameters to {onnx_path}", flush=True)

    with open(os.path.join(work, "strategy.json"), "w") as f:
        json.dump(strategy, f)
    plan_dir = os.path.join(work, "plan")
    r = subprocess.run([os.path.join(tools, "piper-plan"), onnx_path,
                        os.path.join(work, "strategy.json"), "-o", plan_dir],
                       env=env, capture_output=True, text=True)
    planned = r.returncode == 0
    if not planned:
        print(f"[piper] piper-plan failed:\n{r.stdout}{r.stderr}")

    ort_skip = None
    if args.no_ort:
        ort_skip = "not run for hf-llama" if args.model == "hf-llama" else "--no-ort given"
    if not ort_skip:
        ok, why = ensure_ort(ort_env)
        ort_skip = None if ok else why

    # Per system: the step times of every round without its first (warm-up) step, the first
    # round's losses, the largest peak RSS.
    results = {}

    def record(name, steps, rss, note):
        r = results.setdefault(name, {"seconds": [], "losses": [s["loss"] for s in steps],
                                      "rss": 0, "note": note})
        r["seconds"] += [s["seconds"] for s in steps[1:]]
        r["rss"] = max(r["rss"], rss)

    blas_core = args.openblas_coretype or "unknown"
    for round_ in range(1, args.rounds + 1):
        tag = f" (round {round_} of {args.rounds})" if args.rounds > 1 else ""
        if planned:
            metrics = os.path.join(work, "piper_metrics.jsonl")
            # OPENBLAS_VERBOSE=2 makes OpenBLAS print the kernels it loads ("Core: Haswell"); the
            # last line is piper-run's choice after its restart (engine/cpu/blas.h).
            rc, rss, text = run_child([os.path.join(tools, "piper-run"), "--plan",
                                       os.path.join(plan_dir, "rank0.plan"), "--steps",
                                       str(args.steps), "--data", data, "--metrics", metrics],
                                      dict(env, OPENBLAS_VERBOSE="2"), args.timeout)
            cores = re.findall(r"^Core: (\S+)", text, re.MULTILINE)
            blas_core = cores[-1] if cores else blas_core
            if rc != 0 or not os.path.exists(metrics):
                print(f"[piper] piper-run failed (rc {rc}):\n{text[-3000:]}")
            else:
                with open(metrics) as f:
                    steps = [json.loads(l) for l in f if l.strip()]
                record("Piper", steps, rss,
                       f"peak_bytes {max(s['peak_bytes'] for s in steps)}")
        print(f"[piper] done{tag}", flush=True)

        # PyTorch eager: its BLAS is the same OpenBLAS; it gets the same kernels as Piper.
        # PyTorch 1.13 oversubscribes 2 cores at 2 threads, so hf-llama also times 1 thread.
        torch_env = dict(env)
        if blas_core != "unknown":
            torch_env["OPENBLAS_CORETYPE"] = blas_core
        for threads in torch_threads(args):
            name = "PyTorch eager" if threads == args.threads else f"PyTorch eager, {threads}t"
            out = os.path.join(work, "torch.json")
            for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                torch_env[var] = str(threads)
            rc, rss, text = run_child([sys.executable, os.path.abspath(__file__), "--child",
                                       "torch", "--work", work, "--child-out", out]
                                      + forward_args(args, threads), torch_env, args.timeout)
            if rc != 0:
                print(f"[pytorch] failed (rc {rc}):\n{text[-3000:]}")
            else:
                with open(out) as f:
                    res = json.load(f)
                record(name, res["steps"], rss,
                       f"torch {torch.__version__}, {res['threads']} threads")
        print(f"[pytorch] done{tag}", flush=True)

        if not ort_skip:
            out = os.path.join(work, "ort.json")
            rc, rss, text = run_child([sys.executable, os.path.abspath(__file__), "--child",
                                       "ort", "--work", work, "--child-out", out]
                                      + forward_args(args), ort_env, args.timeout)
            if rc != 0:
                ort_skip = f"ran but failed (rc {rc}): " + " | ".join(text.strip().splitlines()[-3:])
            else:
                with open(out) as f:
                    res = json.load(f)
                record("ONNX Runtime training", res["steps"], rss,
                       f"onnxruntime {res['ort_version']}")
        print(f"[ort] done{tag}", flush=True)
    if ort_skip:
        print(f"[ort] ONNX Runtime training peer SKIPPED: {ort_skip}")

    # ---- table
    print()
    rounds = f" x {args.rounds} rounds" if args.rounds > 1 else ""
    print(f"{'HF Llama' if args.model == 'hf-llama' else 'GPT'} d={args.d} layers={args.layers} heads={args.heads} T={args.seq} "
          f"batch={args.batch} vocab={args.vocab} ({nparams} params), {args.steps} steps{rounds} "
          f"(median of steps 2..{args.steps}), {args.threads} threads, OpenBLAS kernels "
          f"{blas_core} (Piper and PyTorch)")
    print(f"{'system':<24}{'median step s':>14}{'samples/s':>11}{'peak RSS MiB':>14}"
          f"{'loss 1st->last':>20}  note")
    for name, r in results.items():
        med = statistics.median(r["seconds"])
        print(f"{name:<24}{med:>14.4f}{args.batch / med:>11.1f}{r['rss'] / 2**20:>14.1f}"
              f"{r['losses'][0]:>10.4f}->{r['losses'][-1]:<8.4f}  {r['note']}")
    if ort_skip:
        print(f"{'ONNX Runtime training':<24}{'skipped':>14}  ({ort_skip})")
    if "Piper" in results:
        pm = statistics.median(results["Piper"]["seconds"])
        for name, r in results.items():
            if name == "Piper":
                continue
            m = statistics.median(r["seconds"])
            print(f"ratio Piper/{name}: step time {pm / m:.3f}, peak RSS "
                  f"{results['Piper']['rss'] / r['rss']:.3f}")
        torch_names = [name for name in results if name.startswith("PyTorch")]
        if len(torch_names) > 1:
            best = min(torch_names, key=lambda name: statistics.median(results[name]["seconds"]))
            print(f"ratio Piper/PyTorch's best ({best}): step time "
                  f"{pm / statistics.median(results[best]['seconds']):.3f}")
    if args.keep:
        print(f"kept {work}")
    else:
        import shutil
        shutil.rmtree(work, ignore_errors=True)


def forward_args(args, threads=None):
    return ["--model", args.model, "--d", str(args.d), "--layers", str(args.layers),
            "--heads", str(args.heads), "--seq", str(args.seq), "--batch", str(args.batch),
            "--vocab", str(args.vocab), "--steps", str(args.steps),
            "--threads", str(threads or args.threads)]


def torch_threads(args):
    """--threads, and for hf-llama also the other of 1 and 2 threads."""
    if args.model != "hf-llama":
        return [args.threads]
    return sorted({args.threads, 1, min(2, args.threads)})


def in_venv():
    """Re-runs this script under third_party/hf-venv's Python unless transformers imports."""
    try:
        import transformers  # noqa: F401
        return
    except ImportError:
        pass
    if not os.path.exists(hf_llama.VENV_PYTHON) or os.environ.get("PIPER_HF_REEXEC"):
        sys.exit("--model hf-llama needs transformers: run tools/install-deps.sh "
                 "(third_party/hf-venv)")
    os.environ["PIPER_HF_REEXEC"] = "1"
    os.execv(hf_llama.VENV_PYTHON, [hf_llama.VENV_PYTHON] + sys.argv)


if __name__ == "__main__":
    main()
