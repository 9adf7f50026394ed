#!/usr/bin/python3
"""Measured cost model against measured steps: profiles this machine with piper-run
--profile-costs, plans the CPU benchmark model (bench/cpu_gpt.py's GPT) three ways with that
profile, runs each plan, and prints the planned step beside the measured median step.

    /usr/bin/python3 bench/cost_profile.py [--steps 8 --rounds 1 --build DIR --save DIR]
    /usr/bin/python3 bench/cost_profile.py --profiles DIR   # plan with saved profiles
    /usr/bin/python3 bench/cost_profile.py --profiles profiles   # the shipped ones for this CPU
    /usr/bin/python3 bench/cost_profile.py --profiles profiles --by-pass   # and where it differs

The three configurations, all of samples/gpt at d=256, 4 layers, 4 heads, T=128, vocab 512:
  single  one rank, global batch 8, all cores (bench/cpu_gpt.py's run)
  1f1b    two ranks, blocks 0-1 and 2-3 as two stages, 1F1B over 4 microbatches, batch 16
  zero2   two replicas under ZeRO-2, batch 16 (8 per rank)
A profile describes one rank of a job laid out as the run is: the one-rank configuration is
planned with a profile taken by one process on every core, the two-rank ones with a profile
taken by two ranks at once, each on its share of the cores (--threads-per-rank). Profiles and
runs are measured back to back in this one run, and the load average is printed before and
after, since other processes on the machine change both. Before each run the round trip of a
cache line between the first two cores is measured (bench/core_latency.cc) and printed beside
that round's ratio: a VM may run its two vCPUs close (tens of nanoseconds) or far apart
(hundreds), and a rank of two threads runs 10-15% slower far apart (bench/README.md). With
--save DIR the two profiles are copied there (profiles/ holds the ones measured here, written
so). With --by-pass each configuration runs once more, traced, and each rank's compute is
printed by pass (forward, backward, update) as planned and as traced: where a plan misses.
This is a benchmark: nothing here asserts times.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import cpu_gpt

CONFIG = dict(d=256, layers=4, heads=4, seq=128, vocab=512)
OPTIMIZER = {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01}


def strategies():
    pipeline = {
        "batch": {"global": 16}, "optimizer": OPTIMIZER, "frozen": ["*mask*"],
        "annotations": [{"match": "/blocks.[0-1]/*", "tags": {"PP": 0}},
                        {"match": "/blocks.[2-3]/*", "tags": {"PP": 1}}],
        "directives": [{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1],
                        "num_microbatches": 4}]}
    zero2 = {"batch": {"global": 16}, "optimizer": OPTIMIZER, "frozen": ["*mask*"],
             "directives": [{"op": "zero", "stage": 2, "devices": [0, 1]}]}
    single = {"batch": {"global": 8}, "optimizer": OPTIMIZER, "frozen": ["*mask*"]}
    return {"single": (single, 1), "1f1b": (pipeline, 2), "zero2": (zero2, 2)}


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(cmd, env, what):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{what} failed (rc {r.returncode}): {' '.join(cmd)}\n{r.stdout[-3000:]}"
                 f"{r.stderr[-3000:]}")
    return r.stdout


def thread_env(threads):
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def instruction_set():
    """"avx512" or "avx2", as profiles/ names its CPU profiles."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split() for line in f if line.startswith("flags")), [])
    return "avx512" if "avx512f" in flags else "avx2"


def saved_profiles(folder, cores):
    """The one-rank and two-rank profiles in `folder`: as --save names them
    (cpu-2core-1rank.json), else as profiles/ does (cpu-2core-avx2-1rank.json)."""
    prefixes = (f"cpu-{cores}core", f"cpu-{cores}core-{instruction_set()}")
    for prefix in prefixes:
        paths = {1: os.path.join(folder, f"{prefix}-1rank.json"),
                 2: os.path.join(folder, f"{prefix}-2ranks.json")}
        if all(os.path.exists(path) for path in paths.values()):
            return paths
    sys.exit(f"--profiles {folder}: no {prefixes[0]}-1rank.json and -2ranks.json there, nor "
             f"{prefixes[1]}-1rank.json and -2ranks.json; measure them with --save {folder}")


def core_round_trip(tool, env):
    """Nanoseconds a cache line takes from one of the first two cores to the other and back."""
    out = run([tool["piper-core-latency"], "--rounds", "3"], env, "piper-core-latency")
    found = re.search(r"round trip between CPU \d+ and CPU \d+: ([0-9.]+) ns", out)
    if not found:
        sys.exit(f"no round trip in piper-core-latency's output:\n{out}")
    return float(found.group(1))


def planned_step(summary):
    """The slowest rank's planned step in seconds, from piper-plan's summary."""
    steps = []
    for value, unit in re.findall(r"planned step ([0-9.]+) (us|ms|s)\b", summary):
        steps.append(float(value) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit])
    if not steps:
        sys.exit(f"no planned step in piper-plan's summary:\n{summary}")
    return max(steps)


def measured_steps(metrics):
    with open(metrics) as f:
        return [json.loads(line)["seconds"] for line in f if line.strip()][1:]


def compute_by_pass(tool, plans, trace, ranks):
    """{rank: {pass: (planned s, traced s)}}: each rank's compute tasks summed by pass, as its
    plan's simulation placed them (piper-dump --json's planned_tasks) and as one traced step ran
    them (piper-run --trace, a file per rank)."""
    sums = {}
    for rank in range(ranks):
        dump = json.loads(run([tool["piper-dump"], "--json",
                               os.path.join(plans, f"rank{rank}.plan")], None, "piper-dump"))
        planned = {t["task"]: t for t in dump["planned_tasks"] if t["kind"] == "compute"}
        with open(trace.replace("%r", str(rank))) as f:
            events = json.load(f)["traceEvents"]
        by_pass = sums.setdefault(rank, {})
        for event in events:
            task = planned.get(event.get("args", {}).get("task"))
            if event.get("ph") != "X" or event.get("cat") != "compute" or task is None:
                continue
            both = by_pass.setdefault(task["pass"].lower(), [0.0, 0.0])
            both[0] += task["end_s"] - task["start_s"]
            both[1] += event["dur"] * 1e-6
    return sums


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="steps per run (the first is not counted)")
    p.add_argument("--rounds", type=int, default=1,
                   help="runs of every configuration, in turn (medians over all)")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="threads of the one-rank run and its profile (default: all cores)")
    p.add_argument("--threads-per-rank", type=int, default=max(1, os.cpu_count() // 2),
                   help="threads of each of the two ranks and of their profile")
    p.add_argument("--build", default=os.path.join(cpu_gpt.ROOT, "build"))
    p.add_argument("--save", help="copy the two profiles into this folder")
    p.add_argument("--profiles", metavar="DIR",
                   help="plan with the two profiles in DIR (as --save writes them, or named "
                        "as profiles/ names them for this CPU's cores and instruction set) "
                        "instead of measuring new ones")
    p.add_argument("--by-pass", action="store_true",
                   help="run each configuration once more with --trace and print, per rank, its "
                        "compute tasks' planned and traced seconds by pass")
    p.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = p.parse_args()
    tools = os.path.join(args.build, "tools")
    tool = {name: os.path.join(tools, name)
            for name in ("piper-plan", "piper-run", "piper-launch", "piper-dump")}
    tool["piper-core-latency"] = os.path.join(args.build, "bench", "piper-core-latency")
    cores = os.cpu_count()
    saved = saved_profiles(args.profiles, cores) if args.profiles else None
    work = tempfile.mkdtemp(prefix="piper_cost_profile_")
    profiles = saved or {1: os.path.join(work, f"cpu-{cores}core-1rank.json"),
                         2: os.path.join(work, f"cpu-{cores}core-2ranks.json")}
    one, two = thread_env(args.threads), thread_env(args.threads_per_rank)
    print(f"load average at start: {load()}", flush=True)

    ns = argparse.Namespace(**CONFIG)
    gpt = cpu_gpt.load_gpt_module()
    model = cpu_gpt.build(gpt, ns)
    onnx_path = os.path.join(work, "model.onnx")
    gpt.export_model(model, onnx_path, vocab=ns.vocab, block=ns.seq, batch=2)
    data = os.path.join(work, "data")
    os.makedirs(data)
    cpu_gpt.make_data(data, ns.vocab, ns.seq)

    if not args.profiles:
        print(run([tool["piper-run"], "--profile-costs", profiles[1]], one, "profile (1 rank)"),
              flush=True)
        print(run([tool["piper-launch"], "--ranks", "2", "--profile-costs", profiles[2]], two,
                  "profile (2 ranks)"), flush=True)
        print(f"load average after profiling: {load()}", flush=True)

    planned, default_planned, seconds, round_trips = {}, {}, {}, {}
    for name, (strategy, ranks) in strategies().items():
        path = os.path.join(work, f"{name}.json")
        with open(path, "w") as f:
            json.dump(strategy, f)
        plans = os.path.join(work, f"plans-{name}")
        planned[name] = planned_step(run([tool["piper-plan"], onnx_path, path, "-o", plans,
                                          "--cluster", profiles[ranks]], one, f"plan {name}"))
        default_planned[name] = planned_step(run([tool["piper-plan"], onnx_path, path, "-o",
                                                  plans + "-default"], one, f"plan {name}"))
    for round_ in range(args.rounds):
        for name, (strategy, ranks) in strategies().items():
            plans = os.path.join(work, f"plans-{name}")
            metrics = os.path.join(work, f"{name}.jsonl")
            common = ["--steps", str(args.steps), "--data", data, "--metrics", metrics]
            round_trips.setdefault(name, []).append(core_round_trip(tool, one))
            if ranks == 1:
                run([tool["piper-run"], "--plan", os.path.join(plans, "rank0.plan")] + common,
                    one, f"run {name}")
            else:
                run([tool["piper-launch"], "--plans", plans] + common, two, f"run {name}")
            seconds.setdefault(name, []).append(measured_steps(metrics))
    print(f"load average at the end: {load()}")

    print()
    print(f"samples/gpt d={ns.d} layers={ns.layers} heads={ns.heads} T={ns.seq} vocab={ns.vocab}; "
          f"median of steps 2..{args.steps} over {args.rounds} round(s); one rank at "
          f"{args.threads} threads, two at {args.threads_per_rank} each")
    print(f"{'config':<8}{'planned ms':>12}{'measured ms':>13}{'planned/measured':>18}"
          f"{'default rates ms':>18}   planned/measured by round (cores' round trip)")
    for name in strategies():
        measured = statistics.median([s for run_ in seconds[name] for s in run_])
        by_round = " ".join(f"{planned[name] / statistics.median(run_):.3f} ({trip:.0f} ns)"
                            for run_, trip in zip(seconds[name], round_trips[name]))
        print(f"{name:<8}{planned[name] * 1e3:>12.1f}{measured * 1e3:>13.1f}"
              f"{planned[name] / measured:>18.3f}{default_planned[name] * 1e3:>18.1f}   {by_round}")
    if args.by_pass:
        print("\ncompute by pass, planned / traced ms (one more traced run of each):")
        for name, (strategy, ranks) in strategies().items():
            plans = os.path.join(work, f"plans-{name}")
            trace = os.path.join(work, f"{name}-trace-%r.json")
            common = ["--steps", "3", "--data", data, "--trace", trace]
            if ranks == 1:
                run([tool["piper-run"], "--plan", os.path.join(plans, "rank0.plan")] + common,
                    one, f"traced run {name}")
            else:
                run([tool["piper-launch"], "--plans", plans] + common, two, f"traced run {name}")
            for rank, by_pass in compute_by_pass(tool, plans, trace, ranks).items():
                print(f"  {name} rank {rank}: " + ", ".join(
                    f"{pass_} {planned * 1e3:.1f} / {traced * 1e3:.1f} ({planned / traced:.3f})"
                    for pass_, (planned, traced) in by_pass.items()))
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        for ranks, path in profiles.items():
            shutil.copy(path, os.path.join(args.save, os.path.basename(path)))
        print(f"saved the profiles to {args.save}")
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
