#!/usr/bin/env python
"""Export the transformers of docs/transformers.md with random weights (no hub).

Needs torch, transformers, timm and onnxscript (not eqsat-nb dependencies; CI never runs this):

    python tools/export_transformers.py OUT_DIR [NAME ...] [--dtype fp32|fp16|bf16]

Each model is built from a config in code with random weights (seed 0), batch 1, static shapes
(sequence 128, images 224x224), and written to OUT_DIR/NAME.onnx (the Llama with its weights in
OUT_DIR/NAME.onnx.data: ONNX external data, as protobuf caps a file at 2 GB). NAMES lists them.
`--dtype fp16` / `bf16` converts the model first (`model.half()`, `.to(torch.bfloat16)`), as
half-precision deployments export it: weights, activations and float inputs and outputs in that
type (files OUT_DIR/NAME_fp16.onnx, NAME_bf16.onnx).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _torchvision_tolerant() -> None:
    """timm and transformers import torchvision; a torchvision wheel built for another torch
    build (the CUDA one beside a CPU torch) cannot load
    its C ops and fails registering their fake kernels. Those ops are never used here."""
    import torch.library as lib

    if getattr(lib.register_fake, "tolerant", False):
        return
    orig = lib.register_fake

    def register_fake(op, func=None, /, *args, **kwargs):
        def deco(f):
            try:
                return orig(op, *args, **kwargs)(f)
            except RuntimeError:
                return f
        return deco(func) if func is not None else deco

    register_fake.tolerant = True
    lib.register_fake = register_fake


def _first_output(model):
    """The model called with its input by keyword, returning its first output tensor: what the
    TorchScript tracer can trace (transformers 5's decorated forward takes keyword-only extras
    the tracer would fill positionally)."""
    import torch

    class First(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x):
            out = self.model(x)
            return out[0] if isinstance(out, (tuple, list)) else (
                out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits)

    return First().eval()


def _text(model_cls, config, vocab: int, seq: int = 128):
    import torch
    model = _first_output(model_cls(config).eval())
    ids = torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(1))
    return model, (ids,), ["input_ids"]


def _image(model, size: int = 224, name: str = "pixel_values"):
    import torch
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    return model.eval(), (x,), [name]


def build(name: str):
    _torchvision_tolerant()
    import torch
    import transformers as tf
    torch.manual_seed(0)
    if name in ("bert_ts", "bert_dynamo"):
        return _text(tf.BertModel, tf.BertConfig(), 30522)
    if name == "distilbert_ts":
        return _text(tf.DistilBertModel, tf.DistilBertConfig(), 30522)
    if name == "gpt2_ts":
        return _text(tf.GPT2Model, tf.GPT2Config(), 50257)
    if name == "vit_base_ts":
        return _image(_first_output(tf.ViTModel(tf.ViTConfig(), add_pooling_layer=False)))
    if name == "timm_vit_s_ts":
        import timm
        return _image(timm.create_model("vit_small_patch16_224", pretrained=False), name="x")
    if name == "llama_small_dynamo":    # GQA, SwiGLU, RMSNorm, 4 layers (TorchScript's exporter
        # cannot write GQA attention: "scaled_dot_product_attention ... enable_gqa")
        cfg = tf.LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                             num_attention_heads=8, num_key_value_heads=2, vocab_size=32000,
                             max_position_embeddings=2048, tie_word_embeddings=False)
        return _text(tf.LlamaForCausalLM, cfg, 32000)
    if name == "llama1b_dynamo":
        cfg = tf.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                             num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                             max_position_embeddings=2048, tie_word_embeddings=False)
        return _text(tf.LlamaForCausalLM, cfg, 32000)
    raise SystemExit(f"unknown model {name!r} (known: {', '.join(NAMES)})")


# name → (exporter, opset)
NAMES = {"bert_ts": ("torchscript", 17), "bert_dynamo": ("dynamo", 18),
         "distilbert_ts": ("torchscript", 17), "gpt2_ts": ("torchscript", 17),
         "vit_base_ts": ("torchscript", 17), "timm_vit_s_ts": ("torchscript", 17),
         "llama_small_dynamo": ("dynamo", 18),
         "llama1b_dynamo": ("dynamo", 18)}
DTYPES = ("fp32", "fp16", "bf16")


def export(name: str, out_dir: Path, dtype: str = "fp32") -> Path:
    import torch
    exporter, opset = NAMES[name]
    model, args, input_names = build(name)
    if dtype != "fp32":
        model = model.to({"fp16": torch.float16, "bf16": torch.bfloat16}[dtype])
        args = tuple(a.to(model_dtype(model)) if a.is_floating_point() else a for a in args)
    path = out_dir / (f"{name}.onnx" if dtype == "fp32" else f"{name}_{dtype}.onnx")
    t = time.perf_counter()
    with torch.no_grad():
        if exporter == "dynamo":
            prog = torch.onnx.export(model, args, dynamo=True, opset_version=opset,
                                     input_names=input_names, external_data=False)
            big = sum(p.numel() * p.element_size() for p in model.parameters()) > 1_500_000_000
            prog.save(str(path), external_data=big)
        else:
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset,
                              input_names=input_names, do_constant_folding=True)
    print(f"{name} ({dtype}): {exporter} opset {opset} -> {path} ({time.perf_counter() - t:.0f} s)",
          flush=True)
    return path


def model_dtype(model):
    """The floating-point type of a module's parameters."""
    return next(p.dtype for p in model.parameters() if p.is_floating_point())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("names", nargs="*", default=list(NAMES))
    ap.add_argument("--dtype", choices=DTYPES, default="fp32",
                    help="the precision the model is exported in (default fp32)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    for n in a.names:
        export(n, a.out, a.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
