#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from real inputs.

    /usr/bin/python3 tests/fuzz/make_seeds.py --piper-plan build/tools/piper-plan

onnx_import: samples/mlp and small ONNX backend node tests; strategy: samples/strategies and
the whole strategies docs/strategy.md shows; plan: a plan piper-plan writes, whole and as a
payload; npy: arrays numpy.save writes; store: client sessions as the TCP store's wire
carries them (engine/comm/tcp_store.h). Rerun it when a format changes.
"""
import argparse
import io
import json
import pathlib
import re
import shutil
import struct
import subprocess
import tempfile

import numpy

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
NODE_TESTS = pathlib.Path("/usr/share/libonnx-testdata/data/node")
# Ops across Piper's import: elementwise, matmul, shapes and the constants folding reads.
NODE_MODELS = [
    "test_add", "test_relu", "test_gemm_default_single_elem_vector_bias", "test_matmul_2d",
    "test_softmax_axis_1", "test_reshape_reordered_all_dims", "test_transpose_default",
    "test_gather_0", "test_concat_2d_axis_0", "test_layer_normalization_2d_axis0",
    "test_slice", "test_expand_dim_changed", "test_where_example", "test_reduce_mean_keepdims_example",
    "test_cast_FLOAT_to_DOUBLE", "test_unsqueeze_axis_0", "test_squeeze", "test_constant",
    "test_shape", "test_range_float_type_positive_delta_expanded", "test_erf",
    "test_einsum_batch_matmul", "test_split_equal_parts_1d", "test_tile", "test_sce_mean",
]


def write(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def onnx_seeds():
    write("onnx_import", "mlp.onnx", (ROOT / "samples/mlp/model.onnx").read_bytes())
    for name in NODE_MODELS:
        model = NODE_TESTS / name / "model.onnx"
        if not model.exists():
            raise SystemExit(f"make_seeds: {model} is missing (install libonnx-testdata)")
        write("onnx_import", name + ".onnx", model.read_bytes())


def strategy_seeds():
    for path in sorted((ROOT / "samples/strategies").glob("*.json")):
        write("strategy", path.name, path.read_bytes())
    docs = (ROOT / "docs/strategy.md").read_text()
    # The docs show whole files, single directives and runs of top-level keys: each made a file.
    for i, block in enumerate(re.findall(r"```json\n(.*?)```", docs, re.S)):
        value = None
        for text in (block, "{" + block + "}"):
            try:
                value = json.loads(text)
                break
            except json.JSONDecodeError:
                pass
        if not isinstance(value, dict):
            continue
        if "op" in value:
            value = {"directives": [value]}
        value.setdefault("batch", {"global": 8})
        write("strategy", f"docs_{i}.json", json.dumps(value).encode())


def plan_seeds(piper_plan):
    with tempfile.TemporaryDirectory() as plans:
        for model, strategy in [("mlp", "single"), ("mlp", "zero2")]:
            out = pathlib.Path(plans) / strategy
            subprocess.run([piper_plan, ROOT / f"samples/{model}/model.onnx",
                            ROOT / f"samples/strategies/{strategy}.json", "-o", out], check=True,
                           stdout=subprocess.DEVNULL)
            plan = (out / "rank0.plan").read_bytes()
            # plan_fuzz.cc: an even first byte takes the rest as the file, an odd one as the
            # payload behind the 28-byte framing.
            write("plan", f"{model}_{strategy}.file", b"\0" + plan)
            write("plan", f"{model}_{strategy}.payload", b"\1" + plan[28:])


def npy_seeds():
    arrays = {
        "f4_vector": numpy.arange(6, dtype="<f4"),
        "f4_matrix": numpy.ones((2, 3), dtype="<f4"),
        "i8_labels": numpy.array([[1, 0], [3, 2]], dtype="<i8"),
        "b1_mask": numpy.array([True, False, True]),
        "f4_scalar": numpy.float32(2.5),
        "f4_empty": numpy.zeros((0, 4), dtype="<f4"),
        "f4_fortran": numpy.asfortranarray(numpy.ones((2, 2), dtype="<f4")),
    }
    for name, array in arrays.items():
        out = io.BytesIO()
        numpy.save(out, array)
        write("npy", name + ".npy", out.getvalue())
    out = io.BytesIO()
    numpy.lib.format.write_array(out, numpy.ones((3,), dtype="<f4"), version=(2, 0))
    write("npy", "f4_version2.npy", out.getvalue())


def store_seeds():
    def string(text):
        data = text.encode()
        return struct.pack("<I", len(data)) + data

    def message(payload):
        return struct.pack("<I", len(payload)) + payload

    set_ = lambda key, value: message(b"\1" + string(key) + string(value))
    get = lambda key: message(b"\2" + string(key))
    add = lambda key, delta: message(b"\3" + string(key) + struct.pack("<q", delta))
    check = lambda *keys: message(b"\4" + struct.pack("<I", len(keys)) + b"".join(map(string, keys)))
    # A rank's rendezvous: register, count in, wait for the others, read their addresses.
    write("store", "rendezvous", set_("rank/0", "127.0.0.1:29500") + add("joined", 1) +
          check("rank/0", "rank/1") + get("rank/0") + get("rank/1"))
    write("store", "counter", add("barrier/0", 1) + add("barrier/0", -1) + add("barrier/0", 5))
    write("store", "add_to_text", set_("x", "text") + add("x", 1))
    write("store", "malformed", message(b"\9") + get("never"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--piper-plan", required=True)
    args = parser.parse_args()
    shutil.rmtree(CORPUS, ignore_errors=True)
    onnx_seeds()
    strategy_seeds()
    plan_seeds(args.piper_plan)
    npy_seeds()
    store_seeds()
    for folder in sorted(CORPUS.iterdir()):
        print(f"make_seeds: {folder.name}: {len(list(folder.iterdir()))} inputs")


if __name__ == "__main__":
    main()
