"""The shipped example models (`ir_examples/`): the benchmark set, and model arguments as files.

`eqsat-nb bench` runs the benchmark set by default and `tools/gpu_truth.py` measures the GPU
profiles on it; both take a model as a file path or as the name of a shipped example.
"""
from __future__ import annotations

from pathlib import Path

from .errors import TirError
from .resources import data_dir

# TENSAT's and the MCTS paper's models, then the transformers (ir_examples/, tools/gen_models.py)
BENCHMARK_MODELS = ("bert", "inceptionv3", "mobilenetv2", "nasneta", "nasrnn", "resnet50",
                    "resnext50", "squeezenet", "vgg19", "transformer_transducer", "vit_base",
                    "vit_large", "vit_huge")


def resolve_models(names: list[str]) -> list[Path]:
    """Paths for model files or shipped example names (the benchmark set when `names` is
    empty); a TirError naming the examples for a name that is neither."""
    if not names:
        names = list(BENCHMARK_MODELS)
    out = []
    for name in names:
        p = Path(name)
        if not p.exists():
            p = data_dir("ir_examples") / f"{name}.tir"
        if not p.exists():
            known = ", ".join(BENCHMARK_MODELS)
            raise TirError(f"no such model file or shipped example {name!r} (examples: {known})")
        out.append(p)
    return out
