"""The renderers of the docs' results tables, by the name their marker gives
(`<!-- table: NAME (tools/doc_tables.py) -->`), each with the records it reads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Renderer:
    """A results table: its renderer and the records it reads (paths from the repository)."""

    render: Callable[[], list[str]]
    sources: tuple[str, ...]


from . import extraction, gpu, history, onnx_models, readme, transformers  # noqa: E402

REGISTRY: dict[str, Renderer] = {
    # README.md
    "gpu-h100-h200": Renderer(gpu.readme_h100_h200, (gpu.H100, gpu.H200)),
    "h100-precisions": Renderer(readme.h100_precisions, tuple(readme.BENCH_H100.values())
                                + tuple(readme.BENCH_TX_H100.values())),
    "a100-estimates": Renderer(readme.a100_estimates,
                               (readme.BENCH_A100, transformers.TRANSFORMERS)),
    "cpu-results": Renderer(readme.cpu_results,
                            (transformers.TRANSFORMERS, onnx_models.ONNX_MODELS)),
    # docs/gpu-costs.md
    "gpu-whole-graphs": Renderer(gpu.whole_graphs, (gpu.H100, gpu.H200)),
    "gpu-op-errors": Renderer(gpu.op_errors, (gpu.H100, gpu.H200, gpu.H100_TABLE,
                                              transformers.ANALYTIC, "tools/gpu_truth.py")),
    "a100-rule-effects": Renderer(history.rule_effects, (history.HISTORY, history.PUBLISHED)),
    "a100-floor-effects": Renderer(history.floor_effects, (history.HISTORY,)),
    # docs/performance.md
    "bench-a100-4us-floor": Renderer(history.bench_4us_floor,
                                     (history.HISTORY, history.PUBLISHED)),
    "mcts-compare": Renderer(history.mcts_compare, (history.MCTS, "tools/mcts_compare.py")),
    # docs/transformers.md
    "large-models": Renderer(transformers.large_models, (transformers.LARGE,
                                                         "tools/run_table.py")),
    "merged-projections": Renderer(transformers.projections, (transformers.ANALYTIC,)),
    "transformers-full-size": Renderer(transformers.full_size,
                                       (transformers.TRANSFORMERS, "tools/transformer_table.py")),
    "transformers-small": Renderer(transformers.small,
                                   (transformers.TRANSFORMERS, "tools/transformer_table.py")),
    # docs/onnx.md
    "onnx-zoo": Renderer(onnx_models.zoo, (onnx_models.ONNX_MODELS,)),
    "onnx-user-models": Renderer(onnx_models.user_models, (onnx_models.ONNX_MODELS,)),
    # docs/extraction.md
    "extraction-reference": Renderer(extraction.reference_egraphs,
                                     (extraction.EXTRACTION, extraction.REFERENCE,
                                      "tools/extract_egraphs.py")),
    "extraction-tensat-schedule": Renderer(extraction.tensat_schedule,
                                           (extraction.EXTRACTION, extraction.REFERENCE)),
}
