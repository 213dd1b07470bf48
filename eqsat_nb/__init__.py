"""eqsat-nb: a tensor-graph superoptimizer by equality saturation over Numba e-graphs."""
from __future__ import annotations

__version__ = "0.1.0"

from .jitcache import ensure_fresh_cache  # noqa: E402

ensure_fresh_cache()

from .errors import ShapeError, TirError  # noqa: E402
from .ir.builder import GraphBuilder  # noqa: E402
from .ir.graph import Graph, Node, TensorType  # noqa: E402
from .ir.parse import load, parse  # noqa: E402
from .ir.printer import print_graph  # noqa: E402

__all__ = ["Graph", "GraphBuilder", "Node", "ShapeError", "TensorType", "TirError", "load",
           "parse", "print_graph", "__version__"]
