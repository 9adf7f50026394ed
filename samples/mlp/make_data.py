#!/usr/bin/env python3
"""Writes a small learnable data set for the sample, in piper-run's --data format.

    /usr/bin/python3 samples/mlp/make_data.py [-o samples/mlp/data]

x.npy: float32 [512, 32]; y.npy: int64 [512] in [0, 10). Each class is a
Gaussian cluster (a random centre plus unit noise), so the loss visibly falls
within a few dozen steps. Deterministic: the files are committed.
"""
import argparse
import os

import numpy as np

SAMPLES = 512
FEATURES = 32
CLASSES = 10
SEED = 0


def make(seed=SEED):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, SAMPLES).astype(np.int64)
    x = (centres[y] + rng.standard_normal((SAMPLES, FEATURES))).astype(np.float32)
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    parser.add_argument("-o", "--output", default=default, help="directory to write")
    args = parser.parse_args()
    os.makedirs(args.output, exist_ok=True)
    x, y = make()
    np.save(os.path.join(args.output, "x.npy"), x)
    np.save(os.path.join(args.output, "y.npy"), y)
    print(f"wrote {args.output}/x.npy {x.dtype}{list(x.shape)}, y.npy {y.dtype}{list(y.shape)}")


if __name__ == "__main__":
    main()
