#!/usr/bin/env python3
"""Converts piper-run's metrics (--metrics FILE: a JSON line per step) into TensorBoard event
files, through PyTorch's SummaryWriter over the `tensorboard` package (pinned by
tools/install-deps.sh in third_party/hf-venv):

    third_party/hf-venv/bin/python tools/metrics-to-tensorboard.py metrics.jsonl runs/job1
    tensorboard --logdir runs

Every number of a line but "step" becomes a scalar of that name at that step (loss, lr,
grad_norm, seconds, samples_per_s, tokens_per_s, mfu, peak_bytes, peak_rss_bytes,
skipped_steps; true/false as 1/0), written in float32 as TensorBoard stores scalars. A resumed
run appends lines for the steps after its checkpoint again: the last line of a step wins. The
metrics of several ranks (--metrics m%r.jsonl) go to one LOGDIR each.
"""
import argparse
import json
import os
import sys


def read_records(path):
    """The metrics lines of `path` by step, the last line of each step kept, in step order."""
    by_step = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SystemExit(f"metrics-to-tensorboard: {path}:{number}: not a JSON line ({error})")
            step = record.get("step") if isinstance(record, dict) else None
            if not isinstance(step, int) or isinstance(step, bool):
                raise SystemExit(f"metrics-to-tensorboard: {path}:{number}: no integer \"step\" in {line.strip()!r}")
            by_step[step] = record
    return [by_step[step] for step in sorted(by_step)]


def scalars(record):
    """The (name, value) pairs of a metrics line TensorBoard can plot."""
    for name, value in record.items():
        if name == "step" or not isinstance(value, (int, float)):
            continue
        yield name, float(value)


def convert(metrics, logdir):
    """Writes the scalars of `metrics` into event files under `logdir`; returns how many."""
    from torch.utils.tensorboard import SummaryWriter

    records = read_records(metrics)
    written = 0
    with SummaryWriter(log_dir=logdir) as writer:
        for record in records:
            for name, value in scalars(record):
                writer.add_scalar(name, value, global_step=record["step"])
                written += 1
    return len(records), written


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("metrics", help="piper-run --metrics file (JSON lines)")
    parser.add_argument("logdir", help="folder for the event files (made when missing)")
    args = parser.parse_args()
    if not os.path.isfile(args.metrics):
        sys.exit(f"metrics-to-tensorboard: no metrics file '{args.metrics}'")
    steps, written = convert(args.metrics, args.logdir)
    print(f"metrics-to-tensorboard: {written} scalars of {steps} steps from {args.metrics} "
          f"written to {args.logdir}")


if __name__ == "__main__":
    main()
