#!/usr/bin/python3
"""Checks that two piper-plan builds write the same plans (issue 18: planner speed-ups must not
change a plan unless on purpose).

    /usr/bin/python3 bench/plan_compare.py --before OLD/piper-plan [--after build/tools/piper-plan]
                                           [--no-verify]

Plans each case below with both binaries into fresh folders and compares every rank's plan
as `piper-dump --json` prints it, less the header's plan id and planner version (random per
run, and the build's commit). Cases: the sample strategies on their models, every pipeline
schedule over a 4-block GPT (with and without a data-parallel mesh, ZeRO 1 to 3),
bench/plan_scale.py's strategy at 16 ranks on 8 blocks, and cases whose ranks fall into classes
of three or more that differ only in a mesh coordinate (data parallelism by 4 with ZeRO-3 and
with DualPipe, dp 4 x tp 2, experts over 4 replicas), and cases for the specialisation of
symmetric ranks (samples/gpt with Dropout in its MLPs under ZeRO-2 over 4 replicas, dp 4 x pp 2
and dp 3 x tp 2; interleaved stages over dp 4 x pp 2). Prints one line per case and exits
1 on the first case whose plans differ, naming the rank and the first differing line.
This is a developer check, not a ctest test: it needs two builds.
"""
import argparse
import difflib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SAMPLES = os.path.join(ROOT, "samples")
STRATEGIES = os.path.join(SAMPLES, "strategies")


def load_plan_scale():
    spec = importlib.util.spec_from_file_location("plan_scale", os.path.join(HERE, "plan_scale.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stages(layers, per_stage=1):
    return [{"match": f"/blocks.{i}/*", "tags": {"PP": i // per_stage}} for i in range(layers)]


# samples/gpt with Dropout in every MLP, as tests/integration/test_dropout_layouts.py exports it.
DROPOUT_EXPORT = """
import sys
sys.path.insert(0, sys.argv[1])
import export as gpt
import torch.nn as nn
import torch.nn.functional as F

class DroppingMLP(gpt.MLP):
    def __init__(self, d):
        super().__init__(d)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        return self.drop(self.out(self.drop(F.gelu(self.fc(x)))))

gpt.torch.manual_seed(gpt.SEED)
gpt.export_model(gpt.GPT(make_mlp=DroppingMLP), sys.argv[2])
"""


def export_dropout_gpt(path):
    subprocess.run([sys.executable, "-c", DROPOUT_EXPORT, os.path.join(SAMPLES, "gpt"), path],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pipeline_case(schedule, layers, microbatches, devices=None, axis_mesh=None, **keys):
    common = {"batch": {"global": 32}, "frozen": ["*mask*"],
              "optimizer": {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01}}
    directive = {"op": "pipeline", "schedule": schedule, "num_microbatches": microbatches, **keys}
    if axis_mesh:
        common["mesh"] = axis_mesh
        directive["axis"] = "pp"
    else:
        directive["devices"] = devices
    return {**common, "annotations": stages(layers), "directives": [directive]}


def cases(gpt4, gpt8, plan_scale, dropout_gpt):
    gpt = os.path.join(SAMPLES, "gpt", "model.onnx")
    moe = os.path.join(SAMPLES, "moe", "model.onnx")
    mlp = os.path.join(SAMPLES, "mlp", "model.onnx")
    sample = lambda name: os.path.join(STRATEGIES, name)  # noqa: E731
    yield "gpt_pipeline", gpt, sample("gpt_pipeline.json")
    yield "gpt_tp2_dp2", gpt, sample("gpt_tp2_dp2.json")
    yield "gpt_zero3", gpt, sample("gpt_zero3.json")
    yield "moe_ep2_zero2", moe, sample("moe_ep2_zero2.json")
    yield "mlp_single", mlp, sample("single.json")
    yield "mlp_zero2", mlp, sample("zero2.json")
    for schedule in ("gpipe", "1f1b", "zb-h1", "dualpipe"):
        yield f"gpt4_{schedule}", gpt4, pipeline_case(schedule, 4, 8, devices=[0, 1, 2, 3])
    yield "gpt4_dualpipev", gpt4, pipeline_case("dualpipev", 4, 4, devices=[0, 1])
    yield "gpt4_interleaved", gpt4, pipeline_case("interleaved", 4, 4, devices=[0, 1], chunks=2)
    for zero in (1, 2, 3):
        yield (f"gpt4_1f1b_dp2_zero{zero}", gpt4,
               pipeline_case("1f1b", 4, 4, axis_mesh=[["dp", 2], ["pp", 4]], zero=zero))
    yield ("gpt4_dualpipe_dp2_zero1", gpt4,
           pipeline_case("dualpipe", 4, 8, axis_mesh=[["dp", 2], ["pp", 4]], zero=1))
    pp, dp = plan_scale.mesh_of(16, 8)
    yield "plan_scale_n16", gpt8, plan_scale.strategy(8, pp, dp)
    # Classes of three or more symmetric ranks (ranks that differ only in a mesh coordinate
    # share a memory plan): data parallelism by 4 under ZeRO-3 and DualPipe, dp x tp, experts.
    yield ("gpt4_1f1b_dp4_zero3", gpt4,
           pipeline_case("1f1b", 4, 4, axis_mesh=[["dp", 4], ["pp", 4]], zero=3))
    yield ("gpt4_dualpipe_dp4_zero2", gpt4,
           pipeline_case("dualpipe", 4, 8, axis_mesh=[["dp", 4], ["pp", 4]], zero=2))
    with open(sample("gpt_tp2_dp2.json")) as f:
        tp_dp = json.load(f)
    tp_dp["mesh"] = [["dp", 4], ["tp", 2]]
    yield "gpt_tp2_dp4", gpt, tp_dp
    with open(sample("moe_ep2_zero2.json")) as f:
        experts = json.load(f)
    experts["mesh"] = [["dp", 4]]
    yield "moe_ep4_zero2", moe, experts
    # Symmetric ranks specialised from one lowering (planner/lower/lower.h): dropout keys follow
    # the replica (and the tensor-parallel member), interleaved stages and dp x pp meshes.
    yield "dropout_dp4_zero2", dropout_gpt, {
        "batch": {"global": 32}, "frozen": ["*mask*"],
        "optimizer": {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01},
        "directives": [{"op": "split", "dim_name": "MB", "num_microbatches": 2},
                       {"op": "zero", "stage": 2, "devices": [0, 1, 2, 3]}]}
    yield ("dropout_1f1b_dp4_pp2", dropout_gpt,
           pipeline_case("1f1b", 2, 4, axis_mesh=[["dp", 4], ["pp", 2]], zero=1))
    yield "dropout_tp2_dp3", dropout_gpt, {**tp_dp, "mesh": [["dp", 3], ["tp", 2]],
                                           "batch": {"global": 36}}
    yield ("gpt4_interleaved_dp4", gpt4,
           pipeline_case("interleaved", 4, 4, axis_mesh=[["dp", 4], ["pp", 2]], chunks=2))


def dumps(piper_dump, folder):
    """rank -> the plan's JSON lines, less the header's plan id and planner version."""
    result = {}
    for name in sorted(os.listdir(folder)):
        text = subprocess.run([piper_dump, "--json", os.path.join(folder, name)], check=True,
                              capture_output=True, text=True).stdout
        value = json.loads(text)
        value["header"].pop("plan_id", None)
        value["header"].pop("planner_version", None)
        result[name] = json.dumps(value, indent=1, sort_keys=True).splitlines()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the reference piper-plan")
    parser.add_argument("--after", default=os.path.join(ROOT, "build", "tools", "piper-plan"))
    parser.add_argument("--dump", default=os.path.join(ROOT, "build", "tools", "piper-dump"))
    parser.add_argument("--no-verify", action="store_true",
                        help="plan with the new build under --no-verify (whose plans must be the "
                             "same; it routes replicated pipeline stages once)")
    args = parser.parse_args()
    plan_scale = load_plan_scale()
    with tempfile.TemporaryDirectory(prefix="piper_plan_compare_") as tmp:
        gpt4, gpt8 = os.path.join(tmp, "gpt4.onnx"), os.path.join(tmp, "gpt8.onnx")
        plan_scale.export_in_child(4, gpt4)
        plan_scale.export_in_child(8, gpt8)
        dropout_gpt = os.path.join(tmp, "dropout_gpt.onnx")
        export_dropout_gpt(dropout_gpt)
        for name, model, strategy in cases(gpt4, gpt8, plan_scale, dropout_gpt):
            if isinstance(strategy, dict):
                path = os.path.join(tmp, name + ".json")
                with open(path, "w") as f:
                    json.dump(strategy, f)
                strategy = path
            plans = {}
            for which, binary in (("before", args.before), ("after", args.after)):
                out = os.path.join(tmp, name, which)
                flags = ["--no-verify"] if which == "after" and args.no_verify else []
                subprocess.run([binary, model, strategy, "-o", out] + flags, check=True,
                               stdout=subprocess.DEVNULL)
                plans[which] = dumps(args.dump, out)
            if plans["before"].keys() != plans["after"].keys():
                sys.exit(f"{name}: rank files differ: {sorted(plans['before'])} vs "
                         f"{sorted(plans['after'])}")
            for rank, before in plans["before"].items():
                after = plans["after"][rank]
                if before != after:
                    diff = list(difflib.unified_diff(before, after, "before", "after", n=2,
                                                     lineterm=""))
                    sys.exit(f"{name}: {rank} differs:\n" + "\n".join(diff[:40]))
            print(f"{name}: {len(plans['before'])} plans identical", flush=True)
    print("all identical")


if __name__ == "__main__":
    main()
