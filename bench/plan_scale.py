#!/usr/bin/python3
"""Planner scaling benchmark (issue 18): piper-plan's wall time and peak RSS as the number
of ranks grows, with and without --no-verify.

    /usr/bin/python3 bench/plan_scale.py [--layers 48 --d 64 --ranks 8,16,32,64,128,256
                                          --limit 60 --build DIR --figure FILE.svg
                                          --cluster FILE]

samples/gpt's GPT at a small width but `--layers` blocks is planned under a 1F1B pipeline
of PP stages (blocks split evenly) with 2·PP microbatches, each stage replicated over DP
data-parallel replicas at ZeRO-1 (a ["dp", DP] x ["pp", PP] mesh), for every n = PP·DP in
`--ranks`. A size whose run exceeds `--limit` seconds ends the sweep for that mode. Prints
one row per n and mode and the fitted growth (exponent k of time ~ n^k between the two
largest sizes run, and a least-squares fit of a·n + b·n² over all of them). With `--figure`,
also draws wall time and peak RSS against n, log-log, as an SVG.
This is a benchmark, not a test: nothing here asserts times.
"""
import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXPORT_PY = os.path.join(ROOT, "samples", "gpt", "export.py")


def export_model(layers, d, path):
    """In this process: run by export_in_child, so that torch stays out of the benchmark's
    process, whose resident pages a forked piper-plan would count in its peak RSS."""
    spec = importlib.util.spec_from_file_location("piper_sample_gpt", EXPORT_PY)
    gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt)
    import warnings
    import torch
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    torch.manual_seed(gpt.SEED)
    model = gpt.GPT(vocab=64, block=16, d=d, layers=layers, heads=2)
    gpt.export_model(model, path, vocab=64, block=16)


def export_in_child(layers, path, d=32):
    subprocess.run([sys.executable, os.path.abspath(__file__), "--export", path,
                    "--layers", str(layers), "--d", str(d)], check=True)


def mesh_of(ranks, layers):
    """(PP, DP): as many stages as divide the layers evenly, up to 16, two or more replicas."""
    pp = max(p for p in range(1, 17) if layers % p == 0 and ranks % p == 0 and ranks // p >= 2)
    return pp, ranks // pp


def strategy(layers, pp, dp):
    per_stage = layers // pp
    return {
        "batch": {"global": dp * 2 * pp},
        "optimizer": {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01},
        "frozen": ["*mask*"],
        "mesh": [["dp", dp], ["pp", pp]],
        "annotations": [{"match": f"/blocks.{i}/*", "tags": {"PP": i // per_stage}}
                        for i in range(layers)],
        "directives": [{"op": "pipeline", "schedule": "1f1b", "axis": "pp",
                        "num_microbatches": 2 * pp, "zero": 1}],
    }


def plan(piper_plan, model, strategy_path, out, extra, limit):
    """(wall seconds, peak RSS in MiB, CPU seconds) of one piper-plan run, or None past `limit`
    seconds. CPU seconds (user + system) tell more than wall time on a shared machine."""
    start = time.monotonic()
    child = subprocess.Popen([piper_plan, model, strategy_path, "-o", out, "--force"] + extra,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > limit:
            child.kill()
            os.wait4(child.pid, 0)
            return None
        time.sleep(0.05)
    seconds = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"piper-plan failed on {strategy_path}: {child.stderr.read().decode()}")
    return seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def growth(rows):
    """'n^k' between the two largest sizes and the least-squares a·n + b·n² over all."""
    if len(rows) < 2:
        return "too few sizes for a fit"
    (n0, t0), (n1, t1) = rows[-2], rows[-1]
    k = math.log(t1 / t0) / math.log(n1 / n0)
    # Least squares over the basis (n, n^2): the 2x2 normal equations.
    s2, s3, s4 = (sum(n**p for n, _ in rows) for p in (2, 3, 4))
    y1, y2 = (sum(t * n**p for n, t in rows) for p in (1, 2))
    det = s2 * s4 - s3 * s3
    a, b = (y1 * s4 - y2 * s3) / det, (s2 * y2 - s3 * y1) / det
    return f"time ~ n^{k:.2f} from n={n0} to {n1}; fit {a:.4g} s*n + {b:.3g} s*n^2"


def svg_figure(curves, title):
    """Two log-log panels, wall seconds and peak RSS MiB against ranks, one line per mode."""
    width, height, left, top, panel_w, panel_h = 860, 360, 70, 40, 330, 260
    colours = {"verify": "#1f77b4", "no-verify": "#d62728"}
    points = [p for rows in curves.values() for p in rows]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>']
    if not points:
        return "\n".join(out + ["</svg>"])
    xs = [p[0] for p in points]
    for panel, (column, label) in enumerate(((1, "wall seconds"), (2, "peak RSS MiB"))):
        x0 = left + panel * (panel_w + 100)
        ys = [p[column] for p in points]
        lo_x, hi_x = math.log10(min(xs)), math.log10(max(xs))
        lo_y, hi_y = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
        hi_x, hi_y = max(hi_x, lo_x + 1e-9), max(hi_y, lo_y + 1)

        def at(n, y):
            return (x0 + (math.log10(n) - lo_x) / (hi_x - lo_x) * panel_w,
                    top + panel_h - (math.log10(y) - lo_y) / (hi_y - lo_y) * panel_h)
        out.append(f'<rect x="{x0}" y="{top}" width="{panel_w}" height="{panel_h}" '
                   'fill="none" stroke="#888"/>')
        for n in sorted(set(xs)):
            x, _ = at(n, 10 ** lo_y)
            out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + panel_h}" '
                       'stroke="#eee"/>')
            out.append(f'<text x="{x:.1f}" y="{top + panel_h + 14}" text-anchor="middle">{n}'
                       '</text>')
        for e in range(lo_y, hi_y + 1):
            _, y = at(min(xs), 10 ** e)
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + panel_w}" y2="{y:.1f}" '
                       'stroke="#eee"/>')
            out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
        out.append(f'<text x="{x0 + panel_w / 2}" y="{top + panel_h + 30}" '
                   'text-anchor="middle">ranks n</text>')
        out.append(f'<text x="{x0 + 6}" y="{top + 14}">{label}</text>')
        for row, (mode, rows) in enumerate(curves.items()):
            colour = colours.get(mode, "#2ca02c")
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (at(p[0], p[column]) for p in rows))
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                       'stroke-width="2"/>')
            for p in rows:
                x, y = at(p[0], p[column])
                out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
            out.append(f'<text x="{x0 + 6}" y="{top + 30 + 14 * row}" fill="{colour}">{mode}'
                       '</text>')
    return "\n".join(out + ["</svg>"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--d", type=int, default=64, help="model width")
    parser.add_argument("--figure", help="write wall time and peak RSS against n to this SVG")
    parser.add_argument("--ranks", default="8,16,32,64,128,256")
    parser.add_argument("--limit", type=float, default=60.0,
                        help="seconds: a size whose run takes longer ends that mode's sweep")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--cluster", metavar="FILE",
                        help="plan for this cluster file (piper-plan --cluster), e.g. a measured "
                             "profile of profiles/, whose times alone make the step simulation "
                             "replay each step until it settles")
    parser.add_argument("--modes", default="verify,no-verify",
                        help="comma-separated: verify (the default flags), no-verify")
    parser.add_argument("--export", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export:
        export_model(args.layers, args.d, args.export)
        return
    piper_plan = os.path.join(args.build, "tools", "piper-plan")
    with tempfile.TemporaryDirectory(prefix="piper_plan_scale_") as tmp:
        model = os.path.join(tmp, "gpt.onnx")
        export_in_child(args.layers, model, args.d)
        print(f"GPT, {args.layers} layers, d {args.d}; 1F1B with 2*PP microbatches, ZeRO-1 "
              "over DP")
        curves = {}
        print(f"{'mode':10} {'n':>5} {'PP':>3} {'DP':>3} {'seconds':>9} {'peak MiB':>9} "
              f"{'CPU s':>9}")
        for mode in args.modes.split(","):
            extra = ["--no-verify"] if mode == "no-verify" else []
            if args.cluster:
                extra += ["--cluster", args.cluster]
            rows = []
            for ranks in (int(r) for r in args.ranks.split(",")):
                pp, dp = mesh_of(ranks, args.layers)
                strategy_path = os.path.join(tmp, f"n{ranks}.json")
                with open(strategy_path, "w") as f:
                    json.dump(strategy(args.layers, pp, dp), f)
                result = plan(piper_plan, model, strategy_path, os.path.join(tmp, "plans"),
                              extra, args.limit)
                if result is None:
                    print(f"{mode:10} {ranks:5} {pp:3} {dp:3} {'>' + str(args.limit):>9}")
                    break
                seconds, rss, cpu = result
                print(f"{mode:10} {ranks:5} {pp:3} {dp:3} {seconds:9.2f} {rss:9.0f} {cpu:9.2f}",
                      flush=True)
                rows.append((ranks, seconds))
                curves.setdefault(mode, []).append((ranks, seconds, rss))
            print(f"{mode}: {growth(rows)}")
        if args.figure:
            with open(args.figure, "w") as f:
                f.write(svg_figure(curves, f"piper-plan, GPT {args.layers} layers d {args.d}: "
                                           "PP x DP ranks, 1F1B, ZeRO-1"))
            print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
