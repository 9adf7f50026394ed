#!/usr/bin/python3
"""The Piper paper's evaluation (uw-syfi/piper, artifact/e2e_eval.py) redone through
`piper-plan --cluster`: its ZeRO, schedule and scalability sweeps planned for a cluster of
H100 80 GB nodes, printed as markdown tables.

    /usr/bin/python3 bench/paper_eval.py [--sweeps zero,schedule,scalability] [--jobs 2]
    /usr/bin/python3 bench/paper_eval.py --toy      # the same layouts trained on the CPU

Every point follows the artifact: sequence 4096, 2·PP microbatches of `mb` sequences each,
so a step's global batch is DP·2·PP·mb sequences; the devices are numbered DP-major (each
pipeline on consecutive devices, one data-parallel replica per node for PP = 8). The models
come from bench/decoder_graph.py with weights that are never materialised; each point is
one `piper-plan --no-verify --cluster` run, whose per-rank lines give the step time (the
slowest rank's planned step), the bubble and the peak memory (the largest rank's arena:
parameters, gradients, optimizer state and peak activations).

- ZeRO sweep (the artifact's zero_defaults): Qwen3-0.6B ("qwen3_1b"), PP 8 x DP 2, 1F1B,
  ZeRO-1/2/3, mb in 16, 24, 32, 34, 36, 38, 40, and per level the largest mb whose every
  rank fits the device (found from the arena's linear growth in mb, then confirmed by
  planning it and mb + 1).
- Schedule sweep (schedule_defaults): the MoE "qwen3_9b" (decoder_graph's qwen3_9b_moe),
  PP 2 x DP 2 with its experts split over DP (EP 2), ZeRO-1, mb 4, under 1F1B,
  interleaved 1F1B (2 chunks), ZB-H1 and DualPipeV (2·PP stages in a V).
- Scalability sweep (scalability_defaults): Qwen3-8B ("qwen3_9b" with ep 1, the dense
  model its torchtitan runs load), PP in {4, 8} x DP in {1, 2, 4}, 1F1B, ZeRO-0, mb 4:
  tokens/s per GPU = global batch · 4096 / step / GPUs.

Strategies use "precision": "bf16" (bfloat16 matrix products and activations, float32
master weights, gradients and AdamW state) and annotate block i to stage ⌊i·S/L⌋ of S.

`--toy` plans every layout above on the tiny configs of decoder_graph (8 blocks, d 32,
sequence 32, mb 1, random weights), at the paper's process count where it is at most
--toy-plan-limit (16), trains those of at most --toy-run-limit processes (4) with
piper-launch, plus each layout shrunk to PP 2 x DP 2 where the paper's needs more, and
compares every step's loss with one process on the same global batch: it prints the worst
relative error and exits non-zero above --toy-tolerance.
This is a benchmark, not a test: it is not registered with ctest.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import decoder_graph  # noqa: E402

SEQ = 4096
# H100 SXM 80 GB, 8 per node: dense bf16 989 TFLOP/s and tf32-less float32 67 TFLOP/s (the
# datasheet's), HBM3 3.35 TB/s, NVLink 4 (900 GB/s bidirectional: 450 GB/s per direction,
# about 3 us per transfer or collective), one 400 Gb/s NDR InfiniBand NIC per GPU (50 GB/s
# per direction, about 10 us), 4 us per kernel launch.
CLUSTER = {
    "devices_per_node": 8,
    "flops": {"float32": 67e12, "bfloat16": 989e12},
    "memory_bytes": 80e9,
    "memory_bandwidth": 3.35e12,
    "intra_node": {"bandwidth": 450e9, "latency": 3e-6},
    "inter_node": {"bandwidth": 50e9, "latency": 10e-6},
    "kernel_overhead": 4e-6,
}
ZERO_MBS = (16, 24, 32, 34, 36, 38, 40)
SCHEDULES = (("1F1B", "1f1b"), ("Interleaved 1F1B", "interleaved"), ("ZB-H1", "zb-h1"),
             ("DualPipeV", "dualpipev"))
EXPERT_PARAMS = {"blocks.*.mlp.w_*": 0}


def point(config, pp, dp, schedule="1f1b", zero=0, mb=4, ep=False, seq=SEQ):
    return dict(config=config, pp=pp, dp=dp, schedule=schedule, zero=zero, mb=mb, ep=ep,
                seq=seq)


def stages_of(p):
    return 2 * p["pp"] if p["schedule"] in ("interleaved", "dualpipev") else p["pp"]


def strategy(p, layers, precision="bf16", lr=1e-4):
    """The strategy JSON of a sweep point."""
    result = {"batch": {"global": p["dp"] * 2 * p["pp"] * p["mb"]},
              "optimizer": {"type": "adamw", "lr": lr, "weight_decay": 0.01}}
    if precision:
        result["precision"] = precision
    if p["pp"] == 1 and p["dp"] == 1:
        return result  # one process
    stages = stages_of(p)
    pipe = {"op": "pipeline", "schedule": p["schedule"], "axis": "pp",
            "num_microbatches": 2 * p["pp"]}
    if p["schedule"] == "interleaved":
        pipe["chunks"] = 2
    if p["dp"] > 1:
        pipe["zero"] = p["zero"]
        pipe["replica_axes"] = ["dp"]
    directives = [pipe]
    if p["ep"]:
        directives.append({"op": "shard", "axis": "dp", "params": EXPERT_PARAMS})
    result["mesh"] = [["dp", p["dp"]], ["pp", p["pp"]]]
    result["annotations"] = [{"match": f"/blocks.{i}/*", "tags": {"PP": i * stages // layers}}
                             for i in range(layers)]
    result["directives"] = directives
    return result


RANK_LINE = re.compile(r"rank (\d+): planned step ([\d.]+) (s|ms|us), compute busy [\d.]+ \w+, "
                       r"bubble ([\d.]+)%, peak activations [\d.]+ \w+, arena ([\d.]+) (\w+) "
                       r"(exceeds|of) the device")
ARENA_LINE = re.compile(r"rank (\d+): \d+ instructions, arena [\d.]+ \w+ \(parameters ([\d.]+) (\w+), "
                        r"gradients ([\d.]+) (\w+), optimizer ([\d.]+) (\w+), activations peak "
                        r"([\d.]+) (\w+)\)")
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
         "TiB": 2**40}


def parse_plan_output(text):
    """{step_s, bubble (largest), peak_bytes (largest arena), fits, ranks} from piper-plan's
    per-rank lines."""
    ranks = RANK_LINE.findall(text)
    if not ranks:
        raise RuntimeError(f"no per-rank cost lines in piper-plan's output:\n{text}")
    arenas = [float(r[4]) * UNITS[r[5]] for r in ranks]
    largest = ranks[arenas.index(max(arenas))][0]
    parts = next(a for a in ARENA_LINE.findall(text) if a[0] == largest)
    return {
        "largest_rank": int(largest),
        # parameters, gradients, optimizer state, peak activations of the largest rank
        "parts": [float(parts[i]) * UNITS[parts[i + 1]] for i in (1, 3, 5, 7)],
        "step_s": max(float(r[1]) * UNITS[r[2]] for r in ranks),
        "bubble": max(float(r[3]) for r in ranks) / 100,
        "peak_bytes": max(arenas),
        "fits": all(r[6] == "of" for r in ranks),
        "ranks": len(ranks),
    }


class Planner:
    def __init__(self, build, work):
        self.piper_plan = os.path.join(build, "tools", "piper-plan")
        self.work = work
        self.cluster = os.path.join(work, "h100_cluster.json")
        with open(self.cluster, "w") as f:
            json.dump(CLUSTER, f, indent=1)
        self.models = {}
        # plan_all's threads share the models: one writes each while the others wait for it
        # (without the lock a second thread planned a half-written model.onnx).
        self.models_lock = threading.Lock()

    def model(self, config, seq=SEQ, weights="none"):
        key = (config, seq, weights)
        with self.models_lock:
            if key not in self.models:
                path = os.path.join(self.work, f"{config}_T{seq}_{weights}", "model.onnx")
                decoder_graph.write(config, seq, path, weights)
                self.models[key] = path
            return self.models[key]

    def plan(self, p, out=None, cluster=True, precision="bf16", lr=1e-4):
        cfg = decoder_graph.CONFIGS[p["config"]]
        name = "{config}_pp{pp}_dp{dp}_{schedule}_z{zero}_mb{mb}".format(**p)
        spath = os.path.join(self.work, name + ".json")
        with open(spath, "w") as f:
            json.dump(strategy(p, cfg["layers"], precision, lr), f)
        out = out or os.path.join(self.work, "plans_" + name)
        cmd = [self.piper_plan, self.model(p["config"], p["seq"]), spath, "-o", out, "--force",
               "--no-verify"] + (["--cluster", self.cluster] if cluster else [])
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"piper-plan failed for {name}:\n{result.stderr}")
        return parse_plan_output(result.stdout) if cluster else out

    def plan_all(self, points, jobs):
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            return list(pool.map(self.plan, points))


def gb(n):
    return f"{n / 1e9:.1f}"


def parts(r):
    """The largest rank and its parameters / gradients / optimizer state / activations, GB."""
    return f"{r['largest_rank']}: " + " / ".join(gb(x) for x in r["parts"])


PARTS_HEADER = "largest rank: parameters / gradients / optimizer / activations GB"


def largest_fit(planner, base, a, b):
    """The largest mb whose plan fits, from arena(mb) = a.mb0 + slope (two planned points a, b
    of (mb, result)), confirmed by planning it and mb + 1."""
    (m0, r0), (m1, r1) = a, b
    slope = (r1["peak_bytes"] - r0["peak_bytes"]) / (m1 - m0)
    guess = max(1, int((CLUSTER["memory_bytes"] - r0["peak_bytes"]) / slope) + m0)
    tried = {}

    def fits(mb):
        if mb not in tried:
            tried[mb] = planner.plan(dict(base, mb=mb))
        return tried[mb]["fits"]

    mb = guess
    while mb > 1 and not fits(mb):
        mb -= 1
    if not fits(mb):
        return None, tried
    while fits(mb + 1):
        mb += 1
    return mb, tried


def zero_sweep(planner, jobs):
    rows, fits = [], []
    for zero in (1, 2, 3):
        base = point("qwen3_0.6b", 8, 2, zero=zero)
        results = planner.plan_all([dict(base, mb=mb) for mb in ZERO_MBS], jobs)
        for mb, r in zip(ZERO_MBS, results):
            rows.append((zero, mb, r))
        best, tried = largest_fit(planner, base, (ZERO_MBS[0], results[0]),
                                  (ZERO_MBS[1], results[1]))
        fits.append((zero, best, tried.get(best)))
    print("### ZeRO sweep: Qwen3-0.6B, PP 8 x DP 2, 1F1B, 16 microbatches, sequence 4096\n")
    print("| ZeRO | mb | global batch | step s | tokens/s per GPU | peak memory GB | fits 80 GB | "
          f"{PARTS_HEADER} |")
    print("|---|---|---|---|---|---|---|---|")
    for zero, mb, r in rows:
        print(f"| {zero} | {mb} | {2 * 16 * mb} | {r['step_s']:.3f} | "
              f"{2 * 16 * mb * SEQ / r['step_s'] / 16:.0f} | {gb(r['peak_bytes'])} | "
              f"{'yes' if r['fits'] else 'no'} | {parts(r)} |")
    print(f"\n| ZeRO | largest mb that fits | step s | tokens/s per GPU | peak memory GB | "
          f"{PARTS_HEADER} |")
    print("|---|---|---|---|---|---|")
    for zero, best, r in fits:
        if best is None:
            print(f"| {zero} | none (mb 1 does not fit) | | | | |")
        else:
            print(f"| {zero} | {best} | {r['step_s']:.3f} | "
                  f"{2 * 16 * best * SEQ / r['step_s'] / 16:.0f} | {gb(r['peak_bytes'])} | "
                  f"{parts(r)} |")
    print()


def schedule_sweep(planner, jobs):
    points = [point("qwen3_9b_moe", 2, 2, schedule=s, zero=1, mb=4, ep=True)
              for _, s in SCHEDULES]
    results = planner.plan_all(points, jobs)
    base = results[0]["step_s"]
    print("### Schedule sweep: qwen3_9b MoE (8 experts, top 2), PP 2 x DP 2, EP 2 over DP, "
          "ZeRO-1, mb 4, 4 microbatches, sequence 4096\n")
    print("| schedule | stages | step s | speed-up over 1F1B | largest bubble | peak memory GB | "
          f"fits 80 GB | {PARTS_HEADER} |")
    print("|---|---|---|---|---|---|---|---|")
    for (label, _), p, r in zip(SCHEDULES, points, results):
        print(f"| {label} | {stages_of(p)} | {r['step_s']:.3f} | {base / r['step_s']:.3f}x | "
              f"{100 * r['bubble']:.1f}% | {gb(r['peak_bytes'])} | "
              f"{'yes' if r['fits'] else 'no'} | {parts(r)} |")
    print()


def scalability_sweep(planner, jobs):
    points = [point("qwen3_8b", pp, dp, zero=0, mb=4) for pp in (4, 8) for dp in (1, 2, 4)]
    results = planner.plan_all(points, jobs)
    print("### Scalability sweep: Qwen3-8B, 1F1B, ZeRO-0, mb 4, 2·PP microbatches, "
          "sequence 4096\n")
    print("| PP | DP | GPUs | global batch | step s | tokens/s per GPU | largest bubble | "
          f"peak memory GB | fits 80 GB | {PARTS_HEADER} |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p, r in zip(points, results):
        n = p["pp"] * p["dp"]
        batch = p["dp"] * 2 * p["pp"] * p["mb"]
        print(f"| {p['pp']} | {p['dp']} | {n} | {batch} | {r['step_s']:.3f} | "
              f"{batch * SEQ / r['step_s'] / n:.0f} | {100 * r['bubble']:.1f}% | "
              f"{gb(r['peak_bytes'])} | {'yes' if r['fits'] else 'no'} | {parts(r)} |")
    print()


# --- toy runs ----------------------------------------------------------------------------

TOY_SEQ = 32
TOY_LR = 1e-2  # large enough that three steps move the weights visibly


def toy_layouts():
    """(sweep, point) at the paper's process counts, on the tiny configs."""
    out = []
    for zero in (1, 2, 3):
        out.append(("zero", point("tiny", 8, 2, zero=zero, mb=1, seq=TOY_SEQ)))
    for _, s in SCHEDULES:
        out.append(("schedule", point("tiny_moe", 2, 2, schedule=s, zero=1, mb=1, ep=True,
                                      seq=TOY_SEQ)))
    for pp in (4, 8):
        for dp in (1, 2, 4):
            out.append(("scalability", point("tiny", pp, dp, zero=0, mb=1, seq=TOY_SEQ)))
    return out


def shrunk(p):
    return dict(p, pp=2, dp=min(p["dp"], 2) if p["dp"] > 1 else 1)


def toy(args, planner):
    runner = os.path.join(args.build, "tools", "piper-launch")
    run = os.path.join(args.build, "tools", "piper-run")
    data = os.path.join(planner.work, "toy_data")
    os.makedirs(data, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in ("input_ids", "labels"):
        np.save(os.path.join(data, name + ".npy"),
                rng.integers(0, decoder_graph.CONFIGS["tiny"]["vocab"], (64, TOY_SEQ)))
    for config in ("tiny", "tiny_moe"):  # random weights, shared by every layout of a config
        planner.models[(config, TOY_SEQ, "none")] = planner.model(config, TOY_SEQ, "random")

    def losses(plan_dir, ranks, tag):
        metrics = os.path.join(planner.work, f"metrics_{tag}.jsonl")
        cmd = ([runner, "--plans", plan_dir] if ranks > 1 else
               [run, "--plan", os.path.join(plan_dir, "rank0.plan")])
        cmd += ["--steps", str(args.toy_steps), "--data", data, "--metrics", metrics]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")
        with open(metrics) as f:
            return [json.loads(line)["loss"] for line in f]

    singles = {}

    def single(p):
        key = (p["config"], p["dp"] * 2 * p["pp"] * p["mb"])
        if key not in singles:
            one = dict(p, pp=1, dp=1, schedule="1f1b", mb=key[1] // 2, ep=False)
            out = planner.plan(one, cluster=False, precision=None, lr=TOY_LR,
                               out=os.path.join(planner.work, f"toy_single_{key[0]}_{key[1]}"))
            singles[key] = losses(out, 1, f"single_{key[0]}_{key[1]}")
        return singles[key]

    # The graph itself: one process's first loss (before any update) against PyTorch's
    # forward of the same layers on the same rows.
    import decoder_reference
    ids, labels = (np.load(os.path.join(data, n + ".npy")) for n in ("input_ids", "labels"))
    for config in ("tiny", "tiny_moe"):
        weights = decoder_graph.read_weights(config, TOY_SEQ,
                                             planner.models[(config, TOY_SEQ, "none")])
        first = single(point(config, 2, 2, mb=1, seq=TOY_SEQ))[0]
        expected = decoder_reference.loss(config, weights, ids[:8], labels[:8])
        err = abs(first - expected) / abs(expected)
        print(f"{config}: Piper's first loss {first:.6f}, PyTorch's {expected:.6f} "
              f"(relative error {err:.1e})")
        if err > args.toy_tolerance:
            sys.exit(f"{config}: the graph does not compute what PyTorch's layers compute")
    print()
    worst = 0.0
    print("| sweep | layout | processes | planned | trained | worst relative loss error "
          "vs one process |")
    print("|---|---|---|---|---|---|")
    for sweep, p in toy_layouts():
        n = p["pp"] * p["dp"]
        runs = []
        label = f"{p['schedule']} PP {p['pp']} x DP {p['dp']} ZeRO-{p['zero']}" + \
            (" EP 2" if p["ep"] else "")
        if n <= args.toy_plan_limit:
            out = planner.plan(p, cluster=False, precision=None, lr=TOY_LR)
            if n <= args.toy_run_limit:
                runs.append((p, out))
            planned = "yes"
        else:
            planned = f"no (> {args.toy_plan_limit})"
        if n > args.toy_run_limit:
            small = shrunk(p)
            runs.append((small, planner.plan(small, cluster=False, precision=None, lr=TOY_LR)))
        for q, out in runs:
            m = q["pp"] * q["dp"]
            got = losses(out, m, os.path.basename(out))
            ref = single(q)
            err = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
            worst = max(worst, err)
            trained = "yes" if q is p else f"as PP {q['pp']} x DP {q['dp']} ({m})"
            print(f"| {sweep} | {label} | {n} | {planned} | {trained} | {err:.2e} |", flush=True)
    print(f"\nworst relative loss error over {args.toy_steps} steps: {worst:.2e} "
          f"(tolerance {args.toy_tolerance:g})")
    if worst > args.toy_tolerance:
        sys.exit("a layout does not train what one process trains")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--sweeps", default="zero,schedule,scalability")
    parser.add_argument("--jobs", type=int, default=2, help="piper-plan runs at once")
    parser.add_argument("--work", help="keep models, strategies and plans here")
    parser.add_argument("--toy", action="store_true")
    parser.add_argument("--toy-steps", type=int, default=3)
    parser.add_argument("--toy-plan-limit", type=int, default=16)
    parser.add_argument("--toy-run-limit", type=int, default=4)
    parser.add_argument("--toy-tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="piper_paper_eval_") as tmp:
        work = args.work or tmp
        os.makedirs(work, exist_ok=True)
        planner = Planner(args.build, work)
        if args.toy:
            toy(args, planner)
            return
        print("Cluster (--cluster file): " + json.dumps(CLUSTER) + "\n")
        sweeps = {"zero": zero_sweep, "schedule": schedule_sweep,
                  "scalability": scalability_sweep}
        for name in args.sweeps.split(","):
            sweeps[name](planner, args.jobs)


if __name__ == "__main__":
    main()
