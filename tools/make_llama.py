#!/usr/bin/env python
"""Make a Llama-configuration decoder as torch.onnx writes it, at any size, with random weights,
without holding it in memory: a 7-B model on a 24 GB machine.

    python tools/make_llama.py make OUT_DIR [--layers 32 --hidden 4096 ...]   # both stages
    python tools/make_llama.py export TEMPLATE_DIR [sizes]     # stage 1: needs torch
    python tools/make_llama.py stack TEMPLATE_DIR OUT.onnx --layers N   # stage 2: onnx + numpy

Defaults are the 7-B configuration with grouped-query attention: 32 layers, hidden 4096, 32 query
and 8 key-value heads, SwiGLU intermediate 11008, vocabulary 32000, RMSNorm, RoPE, fp16
(5.93 B parameters, 11.9 GB); `--small` is the test configuration (4 layers, hidden 64, 4/2
heads, intermediate 128, vocabulary 128, sequence 1024: long enough that, as at the 7-B
configuration's 128 tokens with its 128-wide heads, the exporter computes the RoPE tables and
the causal mask in the graph instead of folding them into constants).

Method.
1. Export (torch, transformers, onnxscript; `--torch-python` names an interpreter that has them
   when this one has not). transformers' LlamaForCausalLM is built from a config in code with the
   target sizes but 4 decoder layers (the template) and again with 3 (the probe), its weights
   random (seed 0; the RMSNorm weights drawn around 1, or the exporter would merge the identical
   all-ones vectors into one initializer, which no trained model has), converted to the element
   type, wrapped to return the logits, and exported with `torch.onnx.export(dynamo=True,
   opset_version=18)` on `input_ids` of the given batch and sequence, saved with external data
   as torch.onnx saves large models (the probe's data is deleted: only its names are read).
   template.json records the sizes and which initializer holds which parameter (found by value:
   the exporter stores the projections transposed, under names like `val_26`).
2. Stack (llama_stack.py, onnx and numpy only). The nodes split by the decoder layer their
   `pkg.torch.onnx.name_scopes` name. Every number in a name or in node metadata is a linear
   function of the layer and of the model's depth: the exporter's counters (`linear_7`,
   `val_167`, `layers.1`) advance the same amount per layer, and the names a late optimizer pass
   gives move with the depth. The template's middle layers 1 and 2 and the probe's layer 1 fix
   each middle-layer name, the template's and the probe's last layers each last-layer name (its
   outputs have one user fewer), and the template and the probe each name of the first layer
   (which creates the constants the others share) and of what comes before and after the layers.
   A layer reads the previous layer's outputs under the names that layer gave them. Nodes,
   value_info and initializers keep the exporter's order, middle layers repeated in place. Each
   parameter is written as fresh random values in the model's element type (normal, std 0.02;
   norms around 1; seeded by the parameter's name), in chunks of 16 M elements, straight into
   OUT.onnx.data at the offsets torch.onnx's saver gives (densely packed in initializer order;
   a tensor inline or external as the template's is); constants that are not parameters (RoPE
   tables, the causal mask, shapes) are copied from the template. No more than one chunk of
   weights is in memory at a time.

Measured on the 2-CPU, 24 GB development machine, shared with other jobs: the 7-B export stage
154-243 s, 5.8 GiB peak RSS; stacking its 32 layers 261 s (738 s under a load of 6), 272 MiB
peak RSS, model.onnx 4.4 MB + model.onnx.data 11 866 300 416 bytes (5.933 B parameters), which
`onnx.checker.check_model(path)` accepts; stacked to 5 layers it equals torch.onnx's own 5-layer
export at those sizes. The 1-B class (16 layers, hidden 2048, intermediate 5632, 32/4 heads,
fp32): export 127 s, 3.1 GiB; stacking 56 s, 252 MiB, 3.34 GB of data (0.836 B parameters);
onnxruntime runs it on 128 tokens.

Node metadata quotes this file's source lines (torch.onnx records stack traces): a template and
probe exported while the file changed disagree there, and the stacker refuses them (export
again).

Stacked to 2 to 6 layers, the small configuration's template gives torch.onnx's own export of
that depth in every node, name, attribute, node and graph metadata, value_info, initializer name,
type, shape, offset and length; so does its variant at sequence 16, where the exporter folds
the RoPE tables and the mask into constants (tests/test_make_llama.py checks 3, 4 and 5 layers
on committed exports).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

DTYPES = ("fp16", "bf16", "fp32")
SEVEN_B = dict(layers=32, hidden=4096, heads=32, kv_heads=8, intermediate=11008, vocab=32000,
               seq=128, batch=1)
SMALL = dict(layers=4, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=128, seq=1024,
             batch=1)


# ------------------------------------------------------------------ stage 1: export (torch)
def export_template(out_dir: Path, hidden: int, heads: int, kv_heads: int, intermediate: int,
                    vocab: int, dtype: str, seq: int, batch: int, seed: int = 0) -> Path:
    """The template and the probe of these sizes in out_dir (see llama_stack): template.onnx
    (+ .data, BASE_LAYERS layers), probe.onnx (one layer fewer, its graph only) and
    template.json. Needs torch and transformers."""
    from llama_stack import BASE_LAYERS

    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = dict(hidden=hidden, heads=heads, kv_heads=kv_heads, intermediate=intermediate,
                 vocab=vocab, dtype=dtype, seq=seq, batch=batch)
    probe = out_dir / "probe.onnx"
    export_llama(probe, layers=BASE_LAYERS - 1, seed=seed, **sizes)
    (out_dir / "probe.onnx.data").unlink()        # only its names are read
    path = out_dir / "template.onnx"
    model, versions = export_llama(path, layers=BASE_LAYERS, seed=seed, **sizes)
    meta = {"exporter": versions, "layers": BASE_LAYERS, **sizes,
            "parameters": _parameter_initializers(path, {f"model.{k}": v for k, v in
                                                         model.state_dict().items()})}
    (out_dir / "template.json").write_text(json.dumps(meta, indent=1) + "\n")
    return path


def export_llama(path: Path, hidden: int, heads: int, kv_heads: int, intermediate: int,
                 vocab: int, dtype: str, seq: int, batch: int, layers: int, seed: int = 0
                 ) -> tuple[object, str]:
    """Export a `layers`-layer Llama with these sizes and random weights to `path` (+ .data),
    as torch.onnx saves large models; (the torch model, the exporter's versions)."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, vocab_size=vocab, rms_norm_eps=1e-5,
                         max_position_embeddings=max(2048, seq), tie_word_embeddings=False)
    model = tf.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(1.0, 0.02)
    model = model.to({"fp16": torch.float16, "bf16": torch.bfloat16,
                      "fp32": torch.float32}[dtype])

    class Logits(torch.nn.Module):
        """The model called with its input ids, returning the logits only."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)[0]

    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        prog = torch.onnx.export(Logits().eval(), (ids,), dynamo=True, opset_version=18,
                                 input_names=["input_ids"], external_data=False)
    prog.save(str(path), external_data=True)
    return model, (f"torch.onnx.export(dynamo=True, opset_version=18), torch "
                   f"{torch.__version__}, transformers {tf.__version__}")


def _parameter_initializers(path: Path, state: dict) -> dict[str, str]:
    """initializer name -> the parameter it holds (as stored or transposed), matched by bytes
    and shape (the weights are random, so equal bytes are the same parameter)."""
    import hashlib

    import onnx
    import torch

    def key(data: bytes, shape) -> str:
        return hashlib.blake2b(data, digest_size=16).hexdigest() + str(list(shape))

    by_value = {}
    for name, t in state.items():
        t = t.detach().cpu().contiguous()
        by_value[key(t.view(torch.uint8).numpy().tobytes(), t.shape)] = name
        if t.ndim == 2:
            tt = t.T.contiguous()
            by_value[key(tt.view(torch.uint8).numpy().tobytes(), tt.shape)] = name
    m = onnx.load(str(path), load_external_data=False)
    found = {}
    for t in m.graph.initializer:
        ext = {e.key: e.value for e in t.external_data}
        if ext:
            with open(path.parent / ext["location"], "rb") as f:
                f.seek(int(ext.get("offset", 0)))
                data = f.read(int(ext["length"]))
        else:
            data = t.raw_data
        name = by_value.get(key(data, t.dims))
        if name is not None:
            found[t.name] = name
    missing = sorted(set(state) - set(found.values()))
    if missing:
        raise SystemExit(f"{path}: parameters not found among the initializers: {missing[:5]}")
    return found


# ------------------------------------------------------------------ the command
def _sizes(a: argparse.Namespace) -> dict:
    base = SMALL if a.small else SEVEN_B
    return {k: getattr(a, k, None) if getattr(a, k, None) is not None else v
            for k, v in base.items()}


def _add_sizes(p: argparse.ArgumentParser, layers: bool = True) -> None:
    p.add_argument("--small", action="store_true",
                   help="the test configuration's defaults (4 layers, hidden 64, 4/2 heads, "
                        "intermediate 128, vocabulary 128, sequence 1024)")
    if layers:
        p.add_argument("--layers", type=int, help="decoder layers (default 32)")
    p.add_argument("--hidden", type=int, help="hidden size (default 4096)")
    p.add_argument("--heads", type=int, help="query heads (default 32)")
    p.add_argument("--kv-heads", type=int, help="key-value heads (default 8)")
    p.add_argument("--intermediate", type=int, help="SwiGLU intermediate size (default 11008)")
    p.add_argument("--vocab", type=int, help="vocabulary (default 32000)")
    p.add_argument("--seq", type=int, help="sequence length of input_ids (default 128)")
    p.add_argument("--batch", type=int, help="batch size of input_ids (default 1)")
    p.add_argument("--dtype", choices=DTYPES, default="fp16",
                   help="element type of weights and activations (default fp16)")


def _export_args(s: dict, dtype: str) -> list[str]:
    keys = ("hidden", "heads", "kv_heads", "intermediate", "vocab", "seq", "batch")
    out = []
    for k in keys:
        out += [f"--{k.replace('_', '-')}", str(s[k])]
    return out + ["--dtype", dtype]


def _has_torch() -> bool:
    import importlib.util
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="stage 1 (torch): the template and the probe")
    e.add_argument("template_dir", type=Path)
    _add_sizes(e, layers=False)
    e.add_argument("--reference-layers", type=int, default=None, metavar="N",
                   help="instead, export an N-layer model to TEMPLATE_DIR/reference.onnx (its "
                        "graph only), to compare a stacked model with")
    s = sub.add_parser("stack", help="stage 2 (onnx, numpy): N layers from a template")
    s.add_argument("template_dir", type=Path)
    s.add_argument("out", type=Path, help="OUT.onnx (its weights go to OUT.onnx.data)")
    s.add_argument("--layers", type=int, required=True)
    s.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    m = sub.add_parser("make", help="both stages: OUT_DIR/model.onnx (+ .data)")
    m.add_argument("out_dir", type=Path)
    _add_sizes(m)
    m.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    m.add_argument("--torch-python", default=None,
                   help="a Python with torch and transformers for the export stage (default: "
                        "this one)")
    a = ap.parse_args(argv)
    if a.cmd != "stack":
        sz = _sizes(a)
        bad = [k for k, v in sz.items() if v < 1] + (
            ["hidden (not a multiple of heads)"] if sz["hidden"] % sz["heads"] else []) + (
            ["heads (not a multiple of kv-heads)"] if sz["heads"] % sz["kv_heads"] else [])
        if bad:
            ap.error(f"sizes {sz}: bad {', '.join(bad)}")
    try:
        return _run(a)
    except Exception as e:      # noqa: BLE001 - the stacker's refusals are messages, not bugs
        from llama_stack import StackError
        if isinstance(e, StackError):
            print(f"make_llama.py: error: {e}", file=sys.stderr)
            return 1
        raise


def _run(a: argparse.Namespace) -> int:
    if a.cmd == "export":
        s = {k: v for k, v in _sizes(a).items() if k != "layers"}
        t = time.perf_counter()
        if a.reference_layers:
            path = a.template_dir / "reference.onnx"
            a.template_dir.mkdir(parents=True, exist_ok=True)
            export_llama(path, dtype=a.dtype, layers=a.reference_layers, **s)
            (a.template_dir / "reference.onnx.data").unlink()
        else:
            path = export_template(a.template_dir, dtype=a.dtype, **s)
        print(f"{path} ({time.perf_counter() - t:.0f} s)", flush=True)
        return 0
    from llama_stack import stack
    if a.cmd == "stack":
        report = stack(a.template_dir, a.out, a.layers, seed=a.seed)
        print(report.describe(), flush=True)
        return 0
    s = _sizes(a)
    template_dir = a.out_dir / "template"
    t = time.perf_counter()
    cmd = [a.torch_python or sys.executable, str(Path(__file__).resolve()), "export",
           str(template_dir), *_export_args(s, a.dtype)]
    if a.torch_python is None and not _has_torch():
        raise SystemExit("the export stage needs torch and transformers: pass --torch-python "
                         "PYTHON (an interpreter that has them)")
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    export_s = time.perf_counter() - t
    report = stack(template_dir, a.out_dir / "model.onnx", s["layers"], seed=a.seed)
    print(f"export {export_s:.0f} s; " + report.describe(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
