"""The one way the rest of the program gets a cost model: `make_cost_model(backend, device, db)`.

Backends:
- `analytic` (default): roofline with a device profile, instant. device: `cpu` (default, the
  built-in profile measured on this project's CPU), `a100`, `cpu-calibrated` (the profile
  `eqsat-nb profile --calibrate` fitted on this machine), or a profile `.json` file; or a
  measured cost table (cost/table.py): a shipped one by name (`h100-measured`) or a table file.
  A GPU with a shipped table (`MEASURED`: `h100`, `h200`) is priced by that measurement, the
  configurations it lacks by the `h100` roofline fitted to it; `h100-roofline` is that
  roofline alone. The extraction exploits any error a roofline has, so only measured prices
  give speed-ups a measurement confirms (docs/gpu-costs.md).
- `ort`: one-node onnxruntime timings on the CPU. device: None or `cpu`.
- `trt`: single-layer TensorRT engines on an NVIDIA GPU. device: CUDA device index (`0`,
  `cuda:0`; default 0).
- `torch`: PyTorch (cuDNN) timings; device `cuda[:N]` (CUDA events) or `cpu` (perf_counter);
  default: the GPU when there is one, else the CPU.

Measuring backends keep their results in the SQLite cost cache (`db`, else $EQSAT_NB_COST_DB,
else the user cache directory). When TensorRT, PyTorch or a GPU is missing, a warning on stderr
says exactly what to install and the factory falls back: `trt` -> `torch` on the GPU (when
PyTorch sees one) -> `ort`; `torch` -> `ort`. The model it returns records what was asked for
and why it fell back (`requested`, `fallback_reason`).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from ..errors import TirError
from ..precision import PRECISIONS
from .db import CostCache
from .model import CostModel

BACKENDS: tuple[str, ...] = ("analytic", "ort", "trt", "torch")

TRT_INSTALL = ("to use it, run on a machine with an NVIDIA GPU and driver and `pip install "
               "eqsat-nb[trt]` (TensorRT and cuda-python); the tensorrt packages on PyPI are "
               "stubs that download the real wheel from NVIDIA's own package index at install "
               "time, so that index must be reachable (pass it to pip with --extra-index-url)")
TORCH_INSTALL = ("to use it, `pip install eqsat-nb[torch]` (a PyTorch build with CUDA support "
                 "for GPU timings)")


def _warn(msg: str) -> None:
    print(f"eqsat-nb: warning: {msg}", file=sys.stderr)


def _progress_printer(model) -> Callable[[str, float], None]:
    def report(op: str, us: float) -> None:
        print(f"  measured {model.measurements}: {op} {us:.1f} us", file=sys.stderr)
    return report


def make_cost_model(backend: str = "analytic", device: str | None = None,
                    db: str | Path | None = None, progress: bool = False,
                    precision: str | None = None) -> CostModel:
    """The cost model for `backend` on `device` (see the module doc); TirError for a bad name.
    `progress`: print one stderr line per configuration a measuring backend times.
    `precision` (analytic backend): price as the model runs in it (fp32, tf32, fp16, bf16);
    None: each tensor in its own type at the fp32 GEMM rate."""
    if backend not in BACKENDS:
        raise TirError(f"unknown cost backend '{backend}' (choose from {', '.join(BACKENDS)})")
    requested = backend
    reason: str | None = None
    if backend == "analytic":
        model = _analytic(device, precision)
    else:
        cache = CostCache(db)
        model = None
        if backend == "trt":
            from . import trt
            index = _cuda_index(device)
            why = trt.unavailable(index)
            if why is None:
                model = trt.TrtCostModel(cache, device=index)
            else:
                reason = f"trt backend unavailable ({why}); {TRT_INSTALL}"
                from . import torch_backend
                if torch_backend.unavailable(f"cuda:{index}") is None:
                    _warn(reason + "; falling back to the torch backend on the GPU")
                    model = torch_backend.TorchCostModel(cache, device=f"cuda:{index}")
        elif backend == "torch":
            from . import torch_backend
            why = torch_backend.unavailable(device)
            if why is None:
                model = torch_backend.TorchCostModel(cache, device=device)
            else:
                reason = f"torch backend unavailable ({why}); {TORCH_INSTALL}"
        if model is None:            # ort, asked for or fallen back to
            if reason is not None:
                _warn(reason + "; falling back to the ort backend (CPU onnxruntime timings)")
            elif backend == "ort" and device not in (None, "cpu"):
                raise TirError(f"the ort backend measures on the CPU only (got --device {device})")
            from .ort import OrtCostModel
            model = OrtCostModel(cache)
        if progress:
            model.on_measure = _progress_printer(model)
    model.requested = requested            # type: ignore[attr-defined]
    model.fallback_reason = reason         # type: ignore[attr-defined]
    return model


#: GPU names priced by their shipped measured table (cost/tables/)
MEASURED = {"h100": "h100-measured", "h200": "h200-measured"}
ROOFLINE = "-roofline"


def _analytic(device: str | None, precision: str | None = None) -> CostModel:
    from .analytic import AnalyticCostModel, profile
    from .table import TableCostModel, is_table_name, resolve_table, shipped_tables
    if precision is not None and precision not in PRECISIONS:
        raise TirError(f"unknown precision '{precision}' (choose from {', '.join(PRECISIONS)})")
    if device in MEASURED and MEASURED[device] in shipped_tables():
        name = measured_table(device, precision)
        if name in shipped_tables():
            return TableCostModel(name)
        base = resolve_table(MEASURED[device]).base_profile
        model = AnalyticCostModel(profile(base), precision)
        model.note = (f"no {precision} measurements of the {device} are shipped: priced by "
                      f"the {base} roofline at {precision} rates")
        return model
    if device and device.endswith(ROOFLINE) and device[:-len(ROOFLINE)] in MEASURED:
        device = device[:-len(ROOFLINE)]
    if device and is_table_name(device):         # measured costs (cost/table.py)
        model = TableCostModel(device)
        if precision not in (None, model.precision):
            raise TirError(f"the cost table {device} was measured in {model.precision}, not "
                           f"{precision}; pass --precision {model.precision} or a table of "
                           f"{precision}")
        return model
    try:
        return AnalyticCostModel(profile(device or "cpu"), precision)
    except ValueError as e:
        raise TirError(str(e)) from None


def measured_table(device: str, precision: str | None) -> str:
    """The name of `device`'s shipped table for `precision`: `h100-measured` for fp32 (and no
    precision given), `h100-measured-fp16` etc. for the others."""
    base = MEASURED[device]
    return base if precision in (None, "fp32") else f"{base}-{precision}"


def _cuda_index(device: str | None) -> int:
    if device is None or device in ("cuda", "gpu"):
        return 0
    text = device[5:] if device.startswith("cuda:") else device
    if not text.isdigit():
        raise TirError(f"bad GPU device '{device}' (use an index such as 0 or cuda:0)")
    return int(text)
