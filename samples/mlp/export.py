#!/usr/bin/env python3
"""Exports the sample MLP, loss included, as a training-mode ONNX model.

    /usr/bin/python3 samples/mlp/export.py [-o samples/mlp/model.onnx]

The module is importable: tests build the PyTorch reference from `build_model()`
and copy the exported initializers into it by name (`load_initializers`).
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

IN_FEATURES = 32
HIDDEN = 64
CLASSES = 10
SEED = 0


class MLP(nn.Module):
    """Linear(32,64) -> ReLU -> Linear(64,64) -> Tanh -> Linear(64,10), with the
    mean cross-entropy loss computed inside forward, so the exported graph
    ends in the loss the planner differentiates."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(IN_FEATURES, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc3 = nn.Linear(HIDDEN, CLASSES)

    def logits(self, x):
        return self.fc3(torch.tanh(self.fc2(F.relu(self.fc1(x)))))

    def forward(self, x, y):
        return F.cross_entropy(self.logits(x), y)


def build_model(seed=SEED):
    """The sample's module with its fixed initial weights."""
    torch.manual_seed(seed)
    return MLP()


def load_initializers(model, onnx_path):
    """Copies the ONNX file's initializers into `model`'s parameters by name
    (fc1.weight, ...). Fails if a parameter has no initializer."""
    import onnx
    from onnx import numpy_helper

    values = {t.name: numpy_helper.to_array(t) for t in onnx.load(onnx_path).graph.initializer}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name not in values:
                raise KeyError(f"{onnx_path} has no initializer named {name!r}")
            param.copy_(torch.from_numpy(values[name].copy()))
    return model


def export(path, batch=8):
    model = build_model()
    x = torch.randn(batch, IN_FEATURES)
    y = torch.randint(0, CLASSES, (batch,))
    torch.onnx.export(
        model,
        (x, y),
        path,
        opset_version=17,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        input_names=["x", "y"],
        output_names=["loss"],
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
    )
    import onnx

    onnx.checker.check_model(onnx.load(path), full_check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model.onnx")
    parser.add_argument("-o", "--output", default=default, help="where to write the model")
    args = parser.parse_args()
    export(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
