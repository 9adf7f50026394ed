"""The model of `cpu_gpt.py --model hf-llama`: HuggingFace's LlamaForCausalLM as
samples/hf/export.py builds and exports it (random weights from a fixed seed, eager attention,
its own loss, torch.onnx.export in training mode), at the benchmark's sizes. Needs the venv
tools/install-deps.sh creates (third_party/hf-venv)."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORT_PY = os.path.join(os.path.dirname(HERE), "samples", "hf", "export.py")
VENV_PYTHON = os.path.join(os.path.dirname(HERE), "third_party", "hf-venv", "bin", "python")


def export_module():
    spec = importlib.util.spec_from_file_location("piper_hf_export", EXPORT_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sizes(args):
    """Llama's shape at --d, --layers, --heads, --seq, --vocab: 2 query heads per key/value
    head, an MLP of 8/3 d rounded up to 16 (Llama's 11008 for d 4096)."""
    return dict(vocab_size=args.vocab, hidden_size=args.d,
                intermediate_size=-(-8 * args.d // 3 // 16) * 16, num_hidden_layers=args.layers,
                num_attention_heads=args.heads, num_key_value_heads=max(1, args.heads // 2),
                max_position_embeddings=args.seq)


def export(args, work):
    """Writes WORK/model.onnx and WORK/data/{input_ids,labels}.npy; returns the parameter
    count."""
    _, model, _ = export_module().export("llama", work, sizes(args), args.vocab, args.seq)
    return sum(p.numel() for p in model.parameters())


def load(args, work):
    """The exported model with the file's weights, and its data (input_ids, labels)."""
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper

    model = export_module().build("llama", sizes(args))
    saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(
        os.path.join(work, "model.onnx")).graph.initializer}
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.from_numpy(saved[name]))
    data = [np.load(os.path.join(work, "data", f"{name}.npy"))
            for name in ("input_ids", "labels")]
    return model, data
