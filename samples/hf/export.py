#!/usr/bin/env python3
"""Exports tiny HuggingFace `transformers` models, loss included, as a user would.

    third_party/hf-venv/bin/python samples/hf/export.py llama -o /tmp/hf   # or: all

writes /tmp/hf/llama/model.onnx and its training data /tmp/hf/llama/data/{input_ids,labels}.npy.
The venv comes from tools/install-deps.sh (transformers 4.40.2 over the machine's torch 1.13).

Each model is built from a tiny config with random initialisation (nothing is downloaded; the
seed is fixed), eager attention, no KV cache and dropout 0, wrapped so that
`forward(input_ids, labels)` returns the model's own loss, and exported with
`torch.onnx.export(opset 17, training=TRAINING, do_constant_folding=False)` and a dynamic
batch axis. Weights the model ties (GPT-2's lm_head and wte) become one initializer, so the
names that lost theirs are recorded in the file's metadata_props under "piper.tied_weights"
(`record_tied_weights`: piper-export writes them into its state dict). The file is otherwise
used as written. The module is importable: tests call
`build(arch)` for the PyTorch reference and `export(arch, directory)` for the ONNX file.
"""
import argparse
import os

import numpy as np
import torch
import transformers

VOCAB = 64
SEQ = 16         # positions per row
HIDDEN = 32
LAYERS = 2
SEED = 0
SAMPLES = 32     # rows of training data; step s reads rows (s*G + i) mod SAMPLES
INPUTS = ["input_ids", "labels"]
MASK_TOKEN = 1   # BERT's [MASK] in these tiny vocabularies

_DECODER = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64,
                num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=SEQ, attention_dropout=0.0)
_MIXTRAL = dict(_DECODER, num_local_experts=4, num_experts_per_tok=2)

# Architecture name -> (model class, config class, config arguments).
ARCHITECTURES = {
    "gpt2": (transformers.GPT2LMHeadModel, transformers.GPT2Config,
             dict(vocab_size=VOCAB, n_positions=SEQ, n_embd=HIDDEN, n_layer=LAYERS, n_head=2,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig, _DECODER),
    # A window shorter than the rows, so that the sliding-window mask differs from causal.
    "mistral": (transformers.MistralForCausalLM, transformers.MistralConfig,
                dict(_DECODER, sliding_window=SEQ // 2)),
    "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config, _DECODER),
    "mixtral": (transformers.MixtralForCausalLM, transformers.MixtralConfig, _MIXTRAL),
    # The load-balancing loss in the model's loss (HF adds router_aux_loss_coef times it): a
    # product of means over every token of every layer, which replicas must take over the
    # whole batch (docs/strategy.md). The coefficient is 5x HF's default, so that the mean of
    # each replica's own term (DDP's objective) differs from the whole batch's by several
    # times the tests' tolerance.
    "mixtral_aux": (transformers.MixtralForCausalLM, transformers.MixtralConfig,
                    dict(_MIXTRAL, output_router_logits=True, router_aux_loss_coef=0.1)),
    "bert": (transformers.BertForMaskedLM, transformers.BertConfig,
             dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=SEQ,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
    # Rotary embeddings on 4 of each head's 8 dimensions, interleaved by repeat_interleave,
    # whose sizes the export computes with a constant Split.
    "codegen": (transformers.CodeGenForCausalLM, transformers.CodeGenConfig,
                dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=4, n_positions=SEQ,
                     n_ctx=SEQ, rotary_dim=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    # Position ids from the tokens in int32 (Cast, CumSum, Mul), as HF RoBERTa writes them;
    # padding token 0 as BERT's (never an input), so positions start at 1.
    "roberta": (transformers.RobertaForMaskedLM, transformers.RobertaConfig,
                dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                     num_attention_heads=2, intermediate_size=64, pad_token_id=0,
                     max_position_embeddings=SEQ + 1, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)),
    "t5": (transformers.T5ForConditionalGeneration, transformers.T5Config,
           dict(vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=64, num_layers=LAYERS,
                num_heads=2, dropout_rate=0.0, decoder_start_token_id=0)),
}


class WithLoss(torch.nn.Module):
    """The model's own loss as the one output: what Piper trains."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        return self.model(input_ids=input_ids, labels=labels).loss


def build(arch, sizes=None):
    """The wrapped model of `arch` with its seeded random initialisation; `sizes` overrides
    config arguments (the benchmark's larger Llama)."""
    model_class, config_class, arguments = ARCHITECTURES[arch]
    config = config_class(**dict(arguments, **(sizes or {})), use_cache=False,
                          attn_implementation="eager")
    torch.manual_seed(SEED)
    return WithLoss(model_class(config)).train()


def data(arch, vocab=VOCAB, seq=SEQ):
    """(input_ids, labels), [SAMPLES, SEQ] int64 each, with as many labelled tokens as real
    batches have: a different number in neighbouring rows. Causal LMs label every position with
    its own token (the model shifts them) but the last (r mod 5) of row r, which are -100 as HF
    labels padding; BERT and RoBERTa replace 1 + (r mod 5) random tokens of row r by
    MASK_TOKEN and label only those (-100 elsewhere); T5's labels are other tokens, all
    labelled. Token means over replicas and microbatches then differ from one process's unless
    they divide by the whole step's count, as Piper's do (docs/strategy.md). No input is token
    0, the padding index of BERT's and RoBERTa's embeddings, whose gradient PyTorch zeroes
    there and ONNX's Gather cannot express."""
    rng = np.random.default_rng(1234)
    input_ids = rng.integers(2, vocab, (SAMPLES, seq)).astype(np.int64)
    labels = input_ids.copy()
    uneven = np.arange(SAMPLES) % 5
    if arch in ("bert", "roberta"):
        labels[:] = -100
        for row in range(SAMPLES):
            masked = rng.permutation(seq)[:1 + uneven[row]]
            labels[row, masked] = input_ids[row, masked]
            input_ids[row, masked] = MASK_TOKEN
    elif arch == "t5":
        labels = rng.integers(2, vocab, (SAMPLES, seq)).astype(np.int64)
    else:
        for row in range(SAMPLES):
            labels[row, seq - uneven[row]:] = -100
    return input_ids, labels


def export(arch, directory, sizes=None, vocab=VOCAB, seq=SEQ):
    """Writes DIRECTORY/model.onnx and DIRECTORY/data/*.npy; returns (model path, model,
    (input_ids, labels)). The model is the one exported, before any training. With `sizes`,
    `vocab` and `seq` must agree with them."""
    os.makedirs(os.path.join(directory, "data"), exist_ok=True)
    model = build(arch, sizes)
    arrays = data(arch, vocab, seq)
    for name, array in zip(INPUTS, arrays):
        np.save(os.path.join(directory, "data", f"{name}.npy"), array)
    path = os.path.join(directory, "model.onnx")
    example = tuple(torch.from_numpy(a[:2]) for a in arrays)
    torch.onnx.export(model, example, path, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=INPUTS, output_names=["loss"],
                      dynamic_axes={name: {0: "batch"} for name in INPUTS})
    record_tied_weights(model, path)
    return path, model, arrays


TIED_WEIGHTS_KEY = "piper.tied_weights"


def record_tied_weights(model, path):
    """Records in PATH's metadata_props, under TIED_WEIGHTS_KEY, a JSON object from each name of
    model.state_dict() that has no initializer in the exported file to the initializer holding
    the same tensor (tied weights, which torch.onnx.export keeps once); returns it. Raises when
    a name has neither, since no state dict could then be rebuilt from the file."""
    import json
    import onnx

    onnx_model = onnx.load(path)
    initializers = {t.name for t in onnx_model.graph.initializer}
    state = model.state_dict(keep_vars=True)
    held = {(t.data_ptr(), tuple(t.shape)): name
            for name, t in state.items() if name in initializers}
    tied = {}
    for name, tensor in state.items():
        if name in initializers:
            continue
        target = held.get((tensor.data_ptr(), tuple(tensor.shape)))
        if target is None:
            raise ValueError(f"{path}: state_dict() name {name!r} has no initializer and "
                             "shares no tensor with one")
        tied[name] = target
    kept = [e for e in onnx_model.metadata_props if e.key != TIED_WEIGHTS_KEY]
    if not tied and len(kept) == len(onnx_model.metadata_props):
        return tied  # the file stays as torch.onnx.export wrote it
    del onnx_model.metadata_props[:]
    onnx_model.metadata_props.extend(kept)
    if tied:
        entry = onnx_model.metadata_props.add()
        entry.key, entry.value = TIED_WEIGHTS_KEY, json.dumps(tied, sort_keys=True)
    onnx.save(onnx_model, path)
    return tied


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("arch", choices=sorted(ARCHITECTURES) + ["all"])
    parser.add_argument("-o", "--output", required=True, help="directory; one folder per model")
    args = parser.parse_args()
    for arch in sorted(ARCHITECTURES) if args.arch == "all" else [args.arch]:
        path, _, _ = export(arch, os.path.join(args.output, arch))
        print(f"{arch}: {path}")


if __name__ == "__main__":
    main()
