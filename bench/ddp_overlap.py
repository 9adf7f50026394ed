#!/usr/bin/python3
"""Data parallelism on 2 CPU ranks: Piper's default replicate against PyTorch DDP (gloo) on the
same model, weights and rows, in one run (issue 18).

    /usr/bin/python3 bench/ddp_overlap.py [--d 256 --layers 4 --heads 4 --seq 128 --batch 16
                                           --vocab 512 --steps 8 --threads 1 --rounds 1
                                           --build DIR]

samples/gpt at a benchmark size, global batch --batch split over 2 ranks, AdamW. Piper plans
`{"op": "replicate", "devices": [0, 1]}` with its defaults (buckets of at most 25 MiB and an
eighth of the gradients, the first of 1 MiB, the backward cut where a bucket is ready) and
runs under piper-launch; PyTorch runs 2 processes of DistributedDataParallel with its defaults
(25 MiB buckets, the first of 1 MiB). Each rank gets --threads threads (1: the 2 ranks fill
this 2-core machine). Prints the median step time of each (the first step is warm-up), the
Piper/DDP ratio, both runs' last loss, and from each rank's trace of the last step how much of
the gradient all-reduces' time (waiting for the peer included) the compute stream spends
computing. With --rounds N the two run alternately N times and each round's ratio is printed
with their median: a shared VM's cores change speed for seconds to minutes at a time, which
one run of each can mistake for a difference between the two. --keep DIR keeps the model,
plans and traces (of the last round). A benchmark, not a test: nothing asserts times.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import cpu_gpt
import trace_overlap

WORLD = 2


def child_ddp(args):
    """One DDP rank: trains and, on rank 0, writes each step's seconds and global mean loss."""
    import numpy as np
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{args.work}/ddp_store",
                            rank=args.rank, world_size=WORLD)
    gpt = cpu_gpt.load_gpt_module()
    model = cpu_gpt.build(gpt, args)
    gpt.load_initializers(model, os.path.join(args.work, "model.onnx"))
    model = torch.nn.parallel.DistributedDataParallel(model)
    idx = np.load(os.path.join(args.work, "data", "idx.npy"))
    targets = np.load(os.path.join(args.work, "data", "targets.npy"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cpu_gpt.LR,
                                  weight_decay=cpu_gpt.WEIGHT_DECAY)
    half = args.batch // WORLD
    steps = []
    for step in range(args.steps):
        rows = cpu_gpt.batch_rows(step, args.batch, len(idx))[args.rank * half:][:half]
        x, y = torch.from_numpy(idx[rows]), torch.from_numpy(targets[rows])
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        seconds = time.perf_counter() - start
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        steps.append({"seconds": seconds, "loss": float(mean) / WORLD})
    if args.rank == 0:
        with open(args.child_out, "w") as f:
            json.dump(steps, f)
    dist.destroy_process_group()


def run_ddp(args, env):
    out = os.path.join(args.work, "ddp.json")
    store = os.path.join(args.work, "ddp_store")
    if os.path.exists(store):  # left by an earlier run in a --keep directory
        os.remove(store)
    base = [sys.executable, os.path.abspath(__file__), "--child", "--work", args.work,
            "--child-out", out] + [f"--{name}={getattr(args, name)}" for name in
                                   ("d", "layers", "heads", "seq", "batch", "vocab", "steps",
                                    "threads")]
    ranks = [subprocess.Popen(base + ["--rank", str(r)], env=env) for r in range(WORLD)]
    codes = [rank.wait(timeout=args.timeout) for rank in ranks]
    if any(codes):
        sys.exit(f"PyTorch DDP failed: exit codes {codes}")
    with open(out) as f:
        return json.load(f)


def run_piper(args, env, tools):
    with open(os.path.join(args.work, "strategy.json"), "w") as f:
        json.dump({"batch": {"global": args.batch}, "frozen": ["*mask*"],
                   "optimizer": {"type": "adamw", "lr": cpu_gpt.LR,
                                 "weight_decay": cpu_gpt.WEIGHT_DECAY},
                   "directives": [{"op": "replicate", "devices": list(range(WORLD))}]}, f)
    plans = os.path.join(args.work, "plans")
    subprocess.run([os.path.join(tools, "piper-plan"), os.path.join(args.work, "model.onnx"),
                    os.path.join(args.work, "strategy.json"), "-o", plans], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    metrics = os.path.join(args.work, "piper.jsonl")
    trace = os.path.join(args.work, "trace%r.json")
    subprocess.run([os.path.join(tools, "piper-launch"), "--plans", plans, "--steps",
                    str(args.steps), "--data", os.path.join(args.work, "data"), "--metrics",
                    metrics, "--trace", trace, "--log-every", "0"], env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=args.timeout)
    with open(metrics) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    return steps, trace.replace("%r", "0")


def gradient_all_reduce_share(trace_path):
    """(microseconds of the backward's all-reduces, of them while `compute` runs a kernel); the
    loss's all-reduce (labelled "all_reduce loss", lower.cc emit_collective) is not counted."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    streams = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    work = [(e["ts"], e["ts"] + e["dur"]) for e in kernels
            if streams[e["tid"]] == "compute" and e["name"] not in trace_overlap.COLLECTIVES]
    reduces = [e for e in kernels if e["name"] == "ALL_REDUCE" and not e["args"]["label"].endswith(" loss")]
    total = sum(e["dur"] for e in reduces)
    hidden = sum(trace_overlap.covered((e["ts"], e["ts"] + e["dur"]), work) for e in reduces)
    return total, hidden


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16, help="global batch, split over 2 ranks")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1, help="threads per rank")
    p.add_argument("--rounds", type=int, default=1, help="alternate Piper and DDP this often")
    p.add_argument("--build", default=os.path.join(cpu_gpt.ROOT, "build"))
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--keep", metavar="DIR",
                   help="work in DIR (made if missing) and keep the model, plans and traces")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child_ddp(args)

    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    tools = os.path.join(args.build, "tools")
    with tempfile.TemporaryDirectory(prefix="piper_ddp_") as scratch:
        work = args.work = os.path.abspath(args.keep) if args.keep else scratch
        os.makedirs(os.path.join(work, "data"), exist_ok=True)
        gpt = cpu_gpt.load_gpt_module()
        model = cpu_gpt.build(gpt, args)
        parameters = sum(p.numel() for p in model.parameters())
        gpt.export_model(model, os.path.join(work, "model.onnx"), vocab=args.vocab,
                         block=args.seq, batch=2)
        cpu_gpt.make_data(os.path.join(work, "data"), args.vocab, args.seq)
        print(f"samples/gpt d={args.d} layers={args.layers} T={args.seq}: {parameters} "
              f"parameters ({parameters * 4 / 2**20:.1f} MiB of gradients), global batch "
              f"{args.batch} on {WORLD} ranks, {args.threads} thread(s) each", flush=True)
        ratios = []
        for round_index in range(args.rounds):
            piper, trace = run_piper(args, env, tools)
            ddp = run_ddp(args, env)
            piper_s = statistics.median(s["seconds"] for s in piper[1:])
            ddp_s = statistics.median(s["seconds"] for s in ddp[1:])
            ratios.append(piper_s / ddp_s)
            if args.rounds > 1:
                print(f"round {round_index + 1}: Piper {piper_s * 1e3:.1f} ms, DDP "
                      f"{ddp_s * 1e3:.1f} ms, Piper / DDP {ratios[-1]:.2f}", flush=True)
        shares = [gradient_all_reduce_share(trace.replace("trace0", f"trace{rank}"))
                  for rank in range(WORLD)]

    last_round = " (the last round)" if args.rounds > 1 else ""
    print(f"{'system':<22} {'median step':>12} {'last loss':>10}{last_round}")
    print(f"{'Piper replicate':<22} {piper_s * 1e3:>9.1f} ms {piper[-1]['loss']:>10.4f}")
    print(f"{'PyTorch DDP (gloo)':<22} {ddp_s * 1e3:>9.1f} ms {ddp[-1]['loss']:>10.4f}")
    if args.rounds > 1:
        print(f"Piper / DDP step time: {statistics.median(ratios):.2f} (median of {args.rounds} "
              f"rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
    else:
        print(f"Piper / DDP step time: {ratios[0]:.2f}")
    for rank, (total, hidden) in enumerate(shares):
        share = hidden / total if total else 0.0
        print(f"Piper rank {rank}, last step: gradient all-reduces {total / 1e3:.1f} ms, "
              f"{share:.0%} of it while the compute stream computes")


if __name__ == "__main__":
    main()
