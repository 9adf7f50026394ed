"""HuggingFace `transformers` models as a user exports them (samples/hf/export.py: tiny
configs, random weights, the model's own loss, torch.onnx.export in training mode, the file
never edited) train with Piper as with PyTorch from the same weights on the same rows: on one
rank, on 2 replicas with ZeRO-2 and 2 microbatches, and as a 2-stage 1F1B pipeline, each 10
AdamW steps with every loss within 1e-4 relative and every final weight within 1e-3; on one
rank in bf16 within 1e-2 per step of PyTorch's CPU autocast (docs/strategy.md). The decoders
also train under Megatron's tensor parallelism over 2 devices, and with their embedding, head
and cross-entropy split along the vocabulary too. Attention fuses once per layer where the
architecture's attention is the fused kernel's.

Runs in the venv tools/install-deps.sh creates (third_party/hf-venv, transformers 4.40.2 over
/usr/bin/python3's torch); CTest starts it with /usr/bin/python3 and --hf-python VENV_PYTHON,
and the script re-runs itself there. Each model is exported once per run. PyTorch runs here;
no reference numbers are stored."""
from harness import run_under_hf_python

run_under_hf_python()

import copy  # noqa: E402
import fnmatch  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import importlib.util  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import harness  # noqa: E402
from harness import Tools  # noqa: E402
from test_data_parallel import launch_path, weights_of  # noqa: E402

STEPS = 10
GLOBAL_BATCH = 4
LOSS_RTOL = 1e-4
WEIGHT_RTOL = 1e-3
AUTOCAST_RTOL = 1e-2  # docs/strategy.md: bf16 against PyTorch's CPU autocast, per step
OPTIMIZER = {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01}

# Architecture -> the node-name globs of its two layers (the pipeline's stages; embeddings
# before the first join it, the head and the loss after the last join the last), whether its
# attention is the fused kernel's (one fused attention per layer expected), and its key
# biases: parameter-name glob -> the elements that add to the keys. Softmax cancels a key bias
# (it adds q·b to every score of a query), so its gradient is zero up to rounding, AdamW turns
# that rounding into full-size updates no two implementations reproduce, and the loss does
# not depend on it: those elements are left out of the weight comparison. Mixtral's expert
# dispatch (torch.where, ONNX NonZero) gives each expert as many rows as tokens chose it, an
# extent known only at run time (docs/plan-format.md).
DECODER_LAYERS = ["/model/model/layers.0/*", "/model/model/layers.1/*"]
# Megatron's plan on HF's Linear weights ([out, in]): q, k, v, gate and up split by output
# features, o and down by input features (biases follow their weights). Mixtral's experts stay
# whole: only its attention splits (test_huggingface_aux.py spreads its experts over replicas).
LLAMA_TENSOR_PARALLEL = {"*.self_attn.q_proj.weight": 0, "*.self_attn.k_proj.weight": 0,
                         "*.self_attn.v_proj.weight": 0, "*.self_attn.o_proj.weight": 1,
                         "*.mlp.gate_proj.weight": 0, "*.mlp.up_proj.weight": 0,
                         "*.mlp.down_proj.weight": 1}
ATTENTION_TENSOR_PARALLEL = {glob: dim for glob, dim in LLAMA_TENSOR_PARALLEL.items()
                             if "self_attn" in glob}
ARCHITECTURES = {
    "gpt2": {"layers": ["/model/transformer/h.0/*", "/model/transformer/h.1/*"],
             "fuses_attention": True,
             # c_attn writes q, k and v, HIDDEN (32) each.
             "key_biases": {"*attn.c_attn.bias": slice(32, 64)},
             # Conv1D weights are [in, out]; c_attn's output is q, k and v concatenated, so
             # its split does not follow the heads and the attention reads it gathered.
             "tensor_parallel": {"*.attn.c_attn.weight": 1, "*.attn.c_proj.weight": 0,
                                 "*.mlp.c_fc.weight": 1, "*.mlp.c_proj.weight": 0}},
    "llama": {"layers": DECODER_LAYERS, "fuses_attention": True, "key_biases": {},
              "tensor_parallel": LLAMA_TENSOR_PARALLEL},
    "mistral": {"layers": DECODER_LAYERS, "fuses_attention": True, "key_biases": {},
                "tensor_parallel": LLAMA_TENSOR_PARALLEL},
    "mixtral": {"layers": DECODER_LAYERS, "fuses_attention": True, "key_biases": {},
                "tensor_parallel": ATTENTION_TENSOR_PARALLEL},
    "qwen2": {"layers": DECODER_LAYERS, "fuses_attention": True,
              "key_biases": {"*self_attn.k_proj.bias": slice(None)},
              "tensor_parallel": LLAMA_TENSOR_PARALLEL},
    # Encoder, then decoder (which reads the encoder's output and the shared embedding). Only
    # the cross-attentions fuse: self-attention adds a position bias computed from a trained
    # table.
    "t5": {"layers": ["/model/encoder/*", "/model/decoder/*"], "fuses_attention": False,
           "key_biases": {}},
    "bert": {"layers": ["/model/bert/encoder/layer.0/*", "/model/bert/encoder/layer.1/*"],
             "fuses_attention": True,
             "key_biases": {"*attention.self.key.bias": slice(None)}},
    "codegen": {"layers": ["/model/transformer/h.0/*", "/model/transformer/h.1/*"],
                "fuses_attention": True, "key_biases": {}},
    # BERT's encoder; its position ids are computed from the tokens in int32.
    "roberta": {"layers": ["/model/roberta/encoder/layer.0/*",
                           "/model/roberta/encoder/layer.1/*"],
                "fuses_attention": True,
                "key_biases": {"*attention.self.key.bias": slice(None)}},
}

# Vocabulary parallelism on top: the token embedding and the output head split along the
# vocabulary (GPT-2's head is its embedding, tied), the cross-entropy computed blockwise.
DECODER_VOCAB_PARALLEL = {"*embed_tokens.weight": 0, "*lm_head.weight": 0}
VOCAB_PARALLEL = {"gpt2": {"*wte.weight": 0}, "llama": DECODER_VOCAB_PARALLEL,
                  "mistral": DECODER_VOCAB_PARALLEL, "qwen2": DECODER_VOCAB_PARALLEL,
                  "mixtral": DECODER_VOCAB_PARALLEL}

RESULTS = {}  # (architecture, strategy) -> (worst loss error, worst weight error)


def export_module():
    path = os.path.join(Tools.source_dir, "samples", "hf", "export.py")
    spec = importlib.util.spec_from_file_location("piper_hf_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def relative_error(actual, expected):
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def compared_elements(arch, param, value):
    """`value` (flattened) without the elements of `param` that are key biases."""
    keep = np.ones(value.size, dtype=bool)
    for glob, elements in ARCHITECTURES.get(arch, {}).get("key_biases", {}).items():
        if fnmatch.fnmatchcase(param, glob):
            keep[elements] = False
    return value.reshape(-1)[keep]


def float32_layer_norms(model):
    """Runs `model`'s LayerNorms in float32, as Piper's bf16 does and torch 1.13's CPU autocast
    does not (it refuses a LayerNorm of a bfloat16 input with float32 weights)."""
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.register_forward_pre_hook(lambda _, args: tuple(a.float() for a in args))
    return model


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=OPTIMIZER["lr"], weight_decay=OPTIMIZER["weight_decay"])


class HuggingFaceHarness:
    """One architecture: exported once, trained by PyTorch once per precision, and by Piper
    under each strategy (HuggingFaceCases: the strategies every architecture trains under;
    test_huggingface_aux.py: HF Mixtral's load-balancing loss)."""
    arch = None

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix=f"piper_hf_{cls.arch}_")
        started = time.monotonic()
        cls.model_path, model, cls.arrays = export_module().export(cls.arch, cls.tmp.name)
        cls.data = os.path.join(cls.tmp.name, "data")
        cls.initial = copy.deepcopy(model)
        reference = copy.deepcopy(model)
        cls.losses = harness.train_like_piper(reference, cls.arrays, make_optimizer, STEPS,
                                              GLOBAL_BATCH)
        cls.weights = {name: p.detach().numpy() for name, p in reference.named_parameters()}
        print(f"[{cls.arch}] exported and trained by PyTorch in "
              f"{time.monotonic() - started:.1f} s")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def plan(self, name, directives=(), annotations=(), precision="fp32", mesh=None):
        work = os.path.join(self.tmp.name, name)
        os.makedirs(work)
        extra = {"mesh": mesh} if mesh else {}
        strategy = harness.write_json(
            os.path.join(work, "strategy.json"),
            harness.strategy(GLOBAL_BATCH, OPTIMIZER, directives=list(directives),
                             annotations=list(annotations), precision=precision, **extra))
        plans = os.path.join(work, "plans")
        planned = harness.run_ok([Tools.plan, self.model_path, strategy, "-o", plans])
        return work, plans, planned.stdout

    def train(self, name, directives=(), annotations=(), precision="fp32", mesh=None):
        """Piper's losses and final weights, and piper-plan's summary."""
        work, plans, summary = self.plan(name, directives, annotations, precision, mesh)
        metrics = os.path.join(work, "metrics.jsonl")
        trained = os.path.join(work, "trained.onnx")
        flags = ["--steps", STEPS, "--data", self.data, "--metrics", metrics,
                 "--save-onnx", trained]
        if directives:
            harness.run_ok([launch_path(), "--plans", plans, "--timeout", 60] + flags,
                           timeout=240)
        else:
            harness.run_ok([Tools.run, "--plan", os.path.join(plans, "rank0.plan")] + flags)
        losses = [record["loss"] for record in harness.read_metrics(metrics)]
        return losses, weights_of(trained), summary

    def check_against_pytorch(self, strategy, directives=(), annotations=()):
        losses, weights, summary = self.train(strategy, directives, annotations)
        self.compare(strategy, losses, weights)
        return summary

    def compare(self, strategy, losses, weights, reference=None, loss_rtol=LOSS_RTOL,
                weight_rtol=WEIGHT_RTOL):
        """Asserts every step's loss and every final weight within the tolerances of
        `reference` ((losses, weights); PyTorch's by default); returns the worst errors."""
        want_losses, want_weights = reference or (self.losses, self.weights)
        label = f"[{self.arch} {strategy}]"
        self.assertEqual(len(losses), STEPS, label)
        loss_errors = [abs(got - want) / abs(want) for got, want in zip(losses, want_losses)]
        weight_errors = {}
        for param, want in want_weights.items():
            self.assertIn(param, weights, f"{label} no trained initializer {param}")
            weight_errors[param] = relative_error(
                compared_elements(self.arch, param, weights[param]),
                compared_elements(self.arch, param, want))
        worst = max(weight_errors, key=weight_errors.get)
        RESULTS[(self.arch, strategy)] = (max(loss_errors), weight_errors[worst])
        print(f"{label} losses {losses[0]:.6f} -> {losses[-1]:.6f}; worst loss error "
              f"{max(loss_errors):.2e}; worst weight error {weight_errors[worst]:.2e} ({worst})")
        for step, error in enumerate(loss_errors):
            self.assertLessEqual(error, loss_rtol, f"{label} step {step}: piper {losses[step]!r}, "
                                 f"reference {want_losses[step]!r}")
        for param, error in weight_errors.items():
            self.assertLessEqual(error, weight_rtol, f"{label} final {param}: {error:.2e}")
        return max(loss_errors), weight_errors[worst]


class HuggingFaceCases(HuggingFaceHarness):
    """The strategies every architecture trains under."""

    def test_one_rank(self):
        summary = self.check_against_pytorch("one_rank")
        fused = int(re.search(r"fuse-attention (\d+)", summary).group(1))
        layers = len(ARCHITECTURES[self.arch]["layers"])
        if ARCHITECTURES[self.arch]["fuses_attention"]:
            self.assertEqual(fused, layers, f"[{self.arch}] fused attentions\n{summary}")

    def test_two_replicas_zero2_two_microbatches(self):
        self.check_against_pytorch(
            "dp2_zero2_mb2",
            [{"op": "split", "dim_name": "MB", "num_microbatches": 2},
             {"op": "zero", "stage": 2, "devices": [0, 1]}])

    def test_two_stage_1f1b(self):
        stages = [{"match": glob, "tags": {"PP": stage}}
                  for stage, glob in enumerate(ARCHITECTURES[self.arch]["layers"])]
        self.check_against_pytorch(
            "pp2_1f1b",
            [{"op": "pipeline", "schedule": "1f1b", "devices": [0, 1], "num_microbatches": 2}],
            stages)

    def test_bf16_one_rank_tracks_autocast(self):
        losses, _, summary = self.train("bf16", precision="bf16")
        self.assertIn("precision bf16:", summary)
        autocast = harness.train_like_piper(float32_layer_norms(copy.deepcopy(self.initial)),
                                            self.arrays,
                                            make_optimizer, STEPS, GLOBAL_BATCH, autocast=True)
        errors = [abs(got - want) / abs(want) for got, want in zip(losses, autocast)]
        RESULTS[(self.arch, "bf16")] = (max(errors), None)
        print(f"[{self.arch} bf16] losses {losses[0]:.6f} -> {losses[-1]:.6f}; worst loss "
              f"error to autocast {max(errors):.2e}")
        self.assertEqual(len(losses), STEPS)
        for step, error in enumerate(errors):
            self.assertLessEqual(error, AUTOCAST_RTOL, f"[{self.arch} bf16] step {step}: piper "
                                 f"{losses[step]!r}, autocast {autocast[step]!r}")


def tearDownModule():
    print("architecture x strategy -> worst loss error, worst weight error")
    for (arch, strategy), (loss, weight) in sorted(RESULTS.items()):
        weight = "-" if weight is None else f"{weight:.1e}"
        print(f"  {arch:8s} {strategy:14s} {loss:.1e} {weight}")


def check_tensor_parallel_two(self):
    """Megatron's tensor parallelism over 2 devices (the architectures with a plan above)."""
    self.check_against_pytorch(
        "tp2", [{"op": "shard", "devices": [0, 1],
                 "params": ARCHITECTURES[self.arch]["tensor_parallel"]}])


def check_vocab_parallel_two(self):
    """The same with the embedding, the head and the loss split along the vocabulary."""
    params = dict(ARCHITECTURES[self.arch]["tensor_parallel"], **VOCAB_PARALLEL[self.arch])
    self.check_against_pytorch("tp2_vocab", [{"op": "shard", "devices": [0, 1],
                                              "params": params}])
    # The loss ran blockwise: no cross-entropy kernel reads the logits whole.
    plan = os.path.join(self.tmp.name, "tp2_vocab", "plans", "rank0.plan")
    dump = json.loads(harness.run_ok([Tools.dump, "--json", plan]).stdout)
    kernels = {i["kernel"]["op_type"] for stream in dump["streams"]
               for i in stream.get("instructions", []) if "kernel" in i}
    self.assertNotIn("SoftmaxCrossEntropyLoss", kernels, f"[{self.arch} tp2_vocab]")


for _arch, _info in ARCHITECTURES.items():
    _name = f"{_arch.capitalize()}MatchesPyTorch"
    _methods = {"arch": _arch}
    if "tensor_parallel" in _info:
        _methods["test_tensor_parallel_two"] = check_tensor_parallel_two
    if _arch in VOCAB_PARALLEL:
        _methods["test_vocab_parallel_two"] = check_vocab_parallel_two
    globals()[_name] = type(_name, (HuggingFaceCases, unittest.TestCase), _methods)


if __name__ == "__main__":
    harness.main()
