#!/usr/bin/env python3
"""How much of DualPipe's expert-parallel communication hides behind the other microbatch's
computation, measured from Piper's CPU traces (issue 16).

    /usr/bin/python3 bench/dualpipe_overlap.py [--d 128] [--seq 64] [--batch 16] [--steps 4]
        [--microbatches 4]

Exports samples/moe's GPT with batched experts at the given width (2 blocks, 4 experts), plans
it under `dualpipe` on 2 devices (4 microbatches unless told, ZeRO-2) with the experts split
over each stage's mirror pair (expert parallelism: tokens reach their experts by all-to-all),
trains it with piper-launch and records the last step's trace on every rank (read by
trace_overlap.py, which tests/integration/test_dualpipe.py shares). A device's two stages
compute on streams `compute` and `compute2`, so an overlapped pair's forward and backward run
at once, and each stage's all-to-alls run on its exchange stream, `a2a_compute` or
`a2a_compute2`. Two figures per rank: of the all-to-alls of the microbatches the schedule
pairs (an order group of a forward and a backward), the share of their time under the paired
microbatch's kernels (issue 16's measure); and of every all-to-all, warm-up and cool-down
included, the share under any kernel of the other stage's compute stream.
A benchmark, not a test: nothing asserts it.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from trace_overlap import each_pair_hidden_share, hidden_share, stages_of_tasks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERTS = {"blocks.*.mlp.w1": 0, "blocks.*.mlp.b1": 0, "blocks.*.mlp.w2": 0,
           "blocks.*.mlp.b2": 0}


def moe_sample():
    spec = importlib.util.spec_from_file_location(
        "piper_sample_moe", os.path.join(ROOT, "samples", "moe", "export.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def overlapped_pairs(tools, model_path, strategy_path):
    """Each device's overlapped pairs, [((PP, MB, PASS), (PP, MB, PASS))], from the `order`s
    that piper-plan --expand writes: its groups of two."""
    expanded = json.loads(subprocess.run(
        [os.path.join(tools, "piper-plan"), model_path, strategy_path, "--expand"], check=True,
        capture_output=True, text=True).stdout)
    pairs = {}
    for directive in expanded["directives"]:
        if directive["op"] == "order":
            pairs[directive["device"]] = [tuple((f["PP"], f["MB"], f["PASS"]) for f in group)
                                          for group in directive["filters"] if len(group) == 2]
    return pairs


def plan_json(tools, plan_path):
    """One rank's plan as `piper-dump --json` prints it."""
    return json.loads(subprocess.run([os.path.join(tools, "piper-dump"), "--json", plan_path],
                                     check=True, capture_output=True, text=True).stdout)


def measure(tools, work, d, seq, batch, steps, microbatches=4):
    """Plans and trains the experiment in `work` with the binaries in `tools`: (the median
    step's seconds after the first, [(all-to-all us, of it hidden us) per rank] of the paired
    microbatches' all-to-alls under their partners' kernels, the same of every all-to-all
    under the other stage's kernels)."""
    moe = moe_sample()
    torch.manual_seed(moe.SEED)
    model = moe.gpt.GPT(block=seq, d=d, make_mlp=lambda width: moe.MoE(width))
    model_path = os.path.join(work, "model.onnx")
    moe.gpt.export_model(model, model_path, block=seq)
    data = os.path.join(work, "data")
    os.makedirs(data)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, moe.gpt.VOCAB, (4 * batch, seq)).astype(np.int64)
    np.save(os.path.join(data, "idx.npy"), idx)
    np.save(os.path.join(data, "targets.npy"), np.roll(idx, -1, axis=1))
    strategy = {
        "batch": {"global": batch},
        "optimizer": {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01},
        "frozen": ["*mask*"],
        "annotations": [{"match": f"/blocks.{s}/*", "tags": {"PP": s}} for s in range(2)],
        "directives": [
            {"op": "pipeline", "schedule": "dualpipe", "devices": [0, 1],
             "num_microbatches": microbatches, "zero": 2},
            {"op": "shard", "devices": [[0, 1]], "params": EXPERTS}]}
    strategy_path = os.path.join(work, "strategy.json")
    with open(strategy_path, "w") as f:
        json.dump(strategy, f)
    plans = os.path.join(work, "plans")
    subprocess.run([os.path.join(tools, "piper-plan"), model_path, strategy_path, "-o", plans],
                   check=True, stdout=subprocess.DEVNULL)
    metrics = os.path.join(work, "metrics.jsonl")
    subprocess.run([os.path.join(tools, "piper-launch"), "--plans", plans, "--steps",
                    str(steps), "--data", data, "--metrics", metrics,
                    "--trace", os.path.join(work, "trace%r.json")], check=True,
                   stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        seconds = [json.loads(line)["seconds"] for line in f][1:]
    pairs = overlapped_pairs(tools, model_path, strategy_path)
    traces = [os.path.join(work, f"trace{rank}.json") for rank in range(2)]
    paired = [each_pair_hidden_share(trace, pairs[rank], stages_of_tasks(
        plan_json(tools, os.path.join(plans, f"rank{rank}.plan"))))
              for rank, trace in enumerate(traces)]
    return float(np.median(seconds)), paired, [hidden_share(trace) for trace in traces]


def label(pair):
    return " & ".join(f"{mb}{p} (PP {pp})" for pp, mb, p in pair)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=4,
                        help="DualPipe's microbatches per step, even and >= 4 (half enter at "
                             "each end); more give more overlapped pairs between warm-up and "
                             "cool-down")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="piper_dualpipe_overlap_")
    step, paired, shares = measure(os.path.join(args.build, "tools"), tmp, args.d, args.seq,
                                   args.batch, args.steps, args.microbatches)
    print(f"dualpipe x EP=2 on 2 CPU ranks, d={args.d}, seq={args.seq}, batch={args.batch}, "
          f"{args.microbatches} microbatches: "
          f"step {1000 * step:.1f} ms (median of steps 2..{args.steps})")
    for rank, (each_pair, (every, under)) in enumerate(zip(paired, shares)):
        total = sum(t for t, _ in each_pair.values())
        hidden = sum(h for _, h in each_pair.values())
        print(f"  rank {rank}: overlapped pairs' all-to-all {total / 1000:.2f} ms, of it under "
              f"the paired microbatch's computation {hidden / 1000:.2f} ms ({hidden / total:.0%}); "
              f"every all-to-all {every / 1000:.2f} ms, of it under the other stage's "
              f"computation {under / 1000:.2f} ms ({under / every:.0%})")
        each = [f"{label(pair)} {h / t:.0%}" for pair, (t, h) in each_pair.items() if t > 0]
        print(f"    each pair (MB PASS (stage) & MB PASS (stage): share): {', '.join(each)}")
    if args.keep:
        print(f"  files in {tmp}")
    else:
        subprocess.run(["rm", "-rf", tmp], check=True)


if __name__ == "__main__":
    sys.exit(main())
