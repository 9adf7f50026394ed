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
import subprocess
import sys
import unittest


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
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


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


def run(argv, timeout=120):
    completed = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                               timeout=timeout)
    return Result([str(a) for a in argv], completed)


def run_ok(argv, timeout=120):
    result = run(argv, timeout)
    if result.returncode != 0:
        raise AssertionError("command failed\n" + result.describe())
    return result


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
    return path


def strategy(global_batch, optimizer, **extra):
    """A single-device strategy: no directives."""
    value = {"batch": {"global": global_batch}, "optimizer": optimizer}
    value.update(extra)
    return value


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
