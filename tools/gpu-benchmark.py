#!/usr/bin/env python3
"""GPU training benchmark (issue 6, item 6): a GPT that fills an H200, trained by Piper
(--device cuda) and by PyTorch eager in the same run, same model, same batch size.
A benchmark, not a test: nothing asserts times.

    tools/gpu-benchmark.py skeleton OUT.onnx [sizes]     # where torch 1.13 exports (here)
    tools/gpu-benchmark.py run SKELETON.onnx --bin DIR    # on the GPU machine

`skeleton` exports samples/gpt's GPT at the given size with samples/gpt/export.py and
drops the initializers' data, so the file stays small enough to carry (the exporter of
the GPU machine's newer PyTorch differs). `run` fills in weights (normal(0, 0.02)
matrices, LayerNorm scales 1, biases 0, causal masks), plans it (one rank, AdamW,
"precision" bf16 and fp32), trains it with piper-run, then trains the same module with
the same weights in PyTorch eager, float32 (TF32 off, as Piper's fp32) and bf16
autocast with scaled_dot_product_attention, and prints tokens/s, Piper/PyTorch ratios
(bf16 against bf16, fp32 against fp32), MFU (6·N·tokens plus attention FLOPs over
989 TFLOP/s dense bf16) and peak GPU memory.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEAK_BF16_FLOPS = 989e12


def gpt_module():
    spec = importlib.util.spec_from_file_location(
        "gpt_export", os.path.join(ROOT, "samples", "gpt", "export.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sizes(parser):
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=50304)


def skeleton(args):
    import onnx
    import torch

    gpt = gpt_module()
    torch.manual_seed(0)
    model = gpt.GPT(vocab=args.vocab, block=args.seq, d=args.d, layers=args.layers,
                    heads=args.heads)
    with tempfile.TemporaryDirectory() as tmp:
        full = os.path.join(tmp, "model.onnx")
        gpt.export_model(model, full, vocab=args.vocab, block=args.seq, batch=1)
        proto = onnx.load(full)
    for tensor in proto.graph.initializer:
        tensor.ClearField("raw_data")
        tensor.ClearField("float_data")
    meta = proto.metadata_props.add()
    meta.key, meta.value = "piper_benchmark_sizes", json.dumps(vars(args))
    onnx.save(proto, args.output)
    print(f"wrote {args.output} ({os.path.getsize(args.output)} bytes)")


def fill_weights(skeleton_path, out_path):
    """Writes the skeleton with initializer values; returns the sizes it was made with."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(skeleton_path)
    config = json.loads({p.key: p.value for p in proto.metadata_props}["piper_benchmark_sizes"])
    rng = np.random.default_rng(0)
    filled = []
    for tensor in proto.graph.initializer:
        shape = tuple(tensor.dims)
        if "mask" in tensor.name:
            t = shape[-1]
            value = np.tril(np.ones((t, t), np.float32)).reshape(shape)
        elif tensor.data_type != onnx.TensorProto.FLOAT:
            value = np.zeros(shape, onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
        elif tensor.name.endswith("bias"):
            value = np.zeros(shape, np.float32)
        elif len(shape) == 1:
            value = np.ones(shape, np.float32)
        else:
            value = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        filled.append(numpy_helper.from_array(value, tensor.name))
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(filled)
    onnx.save(proto, out_path)
    return config


def run_piper(bin_dir, model, work, batch, steps, precision):
    strategy = os.path.join(work, f"{precision}.json")
    with open(strategy, "w") as f:
        json.dump({"batch": {"global": batch}, "precision": precision,
                   "optimizer": {"type": "adamw", "lr": 1e-4, "weight_decay": 0.01},
                   "frozen": ["*mask*"]}, f)
    plans = os.path.join(work, f"plans_{precision}")
    subprocess.run([os.path.join(bin_dir, "piper-plan"), model, strategy, "-o", plans],
                   check=True)
    metrics = os.path.join(work, f"{precision}.jsonl")
    subprocess.run([os.path.join(bin_dir, "piper-run"), "--plan", os.path.join(plans, "rank0.plan"),
                    "--device", "cuda", "--steps", str(steps), "--metrics", metrics], check=True)
    with open(metrics) as f:
        records = [json.loads(line) for line in f]
    seconds = sorted(r["seconds"] for r in records[1:]) or [records[0]["seconds"]]
    return {"step_s": seconds[len(seconds) // 2], "peak_bytes": records[-1]["peak_bytes"],
            "loss": (records[0]["loss"], records[-1]["loss"])}


def run_torch(model_path, config, batch, steps, bf16):
    import torch
    import torch.nn.functional as F

    gpt = gpt_module()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = gpt.GPT(vocab=config["vocab"], block=config["seq"], d=config["d"],
                    layers=config["layers"], heads=config["heads"])
    gpt.load_initializers(model, model_path)
    if bf16:
        # The same attention through PyTorch's fused kernel (causal, no mask buffer).
        def attention(self, x):
            b, t, d = x.shape
            hd = d // self.heads

            def split(y):
                return y.reshape(b, t, self.heads, hd).transpose(1, 2)

            y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)),
                                               split(self.v(x)), is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

        for block in model.blocks:
            block.attn.forward = attention.__get__(block.attn)
    model = model.cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    idx = torch.randint(0, config["vocab"], (batch, config["seq"]), device="cuda")
    targets = torch.randint(0, config["vocab"], (batch, config["seq"]), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    seconds = sorted(times[1:]) or times
    return {"step_s": seconds[len(seconds) // 2],
            "peak_bytes": torch.cuda.max_memory_allocated(), "loss": (losses[0], losses[-1])}


def run(args):
    work = tempfile.mkdtemp(prefix="piper_gpu_bench_")
    model = os.path.join(work, "model.onnx")
    config = fill_weights(args.skeleton, model)
    d, layers, t, vocab = config["d"], config["layers"], config["seq"], config["vocab"]
    params = 12 * layers * d * d + (vocab + t) * d  # blocks + embeddings (approximately)
    tokens = args.batch * t
    flops = 6 * params * tokens + 12 * layers * t * t * d * args.batch  # plus attention
    rows = []
    jobs = [("Piper bf16", lambda: run_piper(args.bin, model, work, args.batch, args.steps,
                                             "bf16")),
            ("PyTorch eager bf16+SDPA", lambda: run_torch(model, config, args.batch, args.steps,
                                                          True)),
            ("Piper fp32", lambda: run_piper(args.bin, model, work, args.batch, args.steps,
                                             "fp32")),
            ("PyTorch eager fp32", lambda: run_torch(model, config, args.batch, args.steps,
                                                     False))]
    for name, job in jobs:
        try:
            rows.append((name, job()))
        except Exception as error:  # a failed system is reported, not fatal
            rows.append((name, {"error": str(error).splitlines()[-1][:120]}))
        sys.stdout.flush()
    print(f"\nGPT d={d} layers={layers} heads={config['heads']} T={t} vocab={vocab} "
          f"batch={args.batch} (~{params / 1e6:.0f}M params), {args.steps} steps, median of 2..")
    print(f"{'system':26} {'step s':>8} {'tokens/s':>10} {'MFU':>6} {'peak GiB':>9}  loss")
    for name, r in rows:
        if "error" in r:
            print(f"{name:26} failed: {r['error']}")
            continue
        print(f"{name:26} {r['step_s']:8.3f} {tokens / r['step_s']:10.0f} "
              f"{flops / r['step_s'] / PEAK_BF16_FLOPS:6.1%} {r['peak_bytes'] / 2**30:9.2f}  "
              f"{r['loss'][0]:.4f}->{r['loss'][1]:.4f}")
    for (name, piper), (reference, r) in (rows[0:2], rows[2:4]):
        if "error" not in piper and "error" not in r:
            print(f"ratio {name}/{reference}: tokens/s {r['step_s'] / piper['step_s']:.3f}, "
                  f"peak memory {piper['peak_bytes'] / r['peak_bytes']:.2f}")
    print("MFU is over 989 TFLOP/s dense bf16 for every row.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("skeleton", help="export the model without weights")
    make.add_argument("output")
    sizes(make)
    bench = commands.add_parser("run", help="fill weights, train with Piper and PyTorch")
    bench.add_argument("skeleton")
    bench.add_argument("--bin", required=True, help="directory of piper-plan and piper-run")
    bench.add_argument("--batch", type=int, default=8)
    bench.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    (skeleton if args.command == "skeleton" else run)(args)


if __name__ == "__main__":
    main()
