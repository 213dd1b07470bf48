"""Fit an analytic profile to measured costs: the `cpu` profile to `ort` costs
(`eqsat-nb profile --calibrate`), a GPU profile to a measured cost table (`GPU_PARAMS`,
tools/calibrate_gpu.py).

The roofline's rates (conv/matmul and element-wise FLOP/s, in-cache and DRAM bandwidth,
transcendental and pooling rates, transpose efficiency, per-call floor) are fitted by
Levenberg-Marquardt least squares on log(predicted / measured) over every measured signature,
with the parameters in log space (so they stay positive). A weak prior (`PRIOR`) pulls each
parameter towards the starting profile and the search stays within `SPAN`x of it, so rates that
the samples do not constrain (say, DRAM bandwidth when every working set fits the cache) keep
their measured defaults instead of drifting. `cache_bytes` and the per-op multipliers not named
in the parameters are kept from the starting profile; a parameter "op_scale:OP" fits OP's
multiplier, "op_floor:OP" its own per-kernel floor. On a profile without a cache (`cache_bytes`
0: the GPUs) `cache_bw` follows `dram_bw`. Ops the profile prices at 0 (views: reshape, dropout;
on the GPU profiles a split, a concat written in place) are left out: no rate changes a 0.
Quality is reported as the geometric mean of max(r, 1/r) over the samples (1.0 = exact) and the
worst such ratio, before and after the fit; a fit that makes the geometric mean worse is
discarded (the starting values are kept under the new name).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from .analytic import CPU, VIEWS, AnalyticCostModel, DeviceProfile
from .model import OpSignature

#: fitted fields, in parameter order
PARAMS = ("matmul_flops", "vector_flops", "cache_bw", "dram_bw", "transcendental", "pool",
          "transpose_eff", "launch_us")
#: a GPU profile's fitted fields: the launch floors and the grouped/depthwise conv constants too,
#: and separate multipliers for the kernels a GEMM roofline does not describe
GPU_PARAMS = ("matmul_flops", "vector_flops", "dram_bw", "transcendental", "pool",
              "transpose_eff", "launch_us", "ew_launch_us", "group_us", "depthwise_flops",
              "op_scale:conv2d", "op_floor:conv2d", "op_scale:layernorm", "op_scale:batchnorm",
              "op_scale:poolavg")
PRIOR = 0.1                 # residual weight per unit of log-deviation from the start profile
SPAN = 100.0                # parameters stay within [start / SPAN, start * SPAN]


@dataclass(frozen=True)
class FitQuality:
    """How well a profile predicts the samples."""

    samples: int
    gmean_ratio: float      # geometric mean of max(pred/meas, meas/pred)
    worst_ratio: float
    worst_op: str


def quality(prof: DeviceProfile, samples: Sequence[tuple[OpSignature, float]]) -> FitQuality:
    """Geometric-mean and worst ratio of `prof`'s predictions to the measured costs."""
    m = AnalyticCostModel(prof)
    logs = np.array([abs(math.log(m.cost(s) / us)) for s, us in samples])
    worst = int(np.argmax(logs))
    return FitQuality(len(samples), float(np.exp(logs.mean())), float(np.exp(logs[worst])),
                      samples[worst][0].op)


def usable(samples: Sequence[tuple[OpSignature, float]], base: DeviceProfile = CPU
           ) -> list[tuple[OpSignature, float]]:
    """The samples a roofline can be fitted to: positive times, ops `base` does not price at 0
    (views; on the GPU profiles a split, a concat written in place)."""
    m = AnalyticCostModel(base)
    return [(s, us) for s, us in samples if us > 0 and math.isfinite(us) and s.op not in VIEWS
            and m.cost(s) > 0]


def _start(base: DeviceProfile, name: str) -> float:
    if name.startswith("op_scale:"):
        return float(base.op_scale.get(name.split(":", 1)[1], 1.0))
    if name.startswith("op_floor:"):
        return base.floor_us(name.split(":", 1)[1])
    value = getattr(base, name)
    return float(base.launch_us if value is None else value)     # ew_launch_us unset


def _profile(base: DeviceProfile, theta: np.ndarray, name: str,
             params: Sequence[str] = PARAMS) -> DeviceProfile:
    vals = {k: float(v) for k, v in zip(params, np.exp(theta))}
    scale, floors = dict(base.op_scale), dict(base.op_floor_us)
    for k in [k for k in vals if k.startswith("op_")]:
        (scale if k.startswith("op_scale:") else floors)[k.split(":", 1)[1]] = vals.pop(k)
    if "transpose_eff" in vals:
        vals["transpose_eff"] = min(vals["transpose_eff"], 1.0)
    if base.cache_bytes == 0 and "dram_bw" in vals:
        vals["cache_bw"] = vals["dram_bw"]
    return replace(base, name=name, op_scale=scale, op_floor_us=floors, **vals)


def _residuals(base: DeviceProfile, theta: np.ndarray, sigs: Sequence[OpSignature],
               log_meas: np.ndarray, theta0: np.ndarray, params: Sequence[str]) -> np.ndarray:
    m = AnalyticCostModel(_profile(base, theta, base.name, params))
    fit = np.array([math.log(m._cost(s)) for s in sigs]) - log_meas
    return np.concatenate([fit, PRIOR * (theta - theta0)])


def fit_profile(samples: Sequence[tuple[OpSignature, float]], base: DeviceProfile = CPU,
                name: str = "cpu-calibrated", iters: int = 60,
                params: Sequence[str] = PARAMS) -> tuple[DeviceProfile, FitQuality, FitQuality]:
    """(fitted profile, quality before, quality after) for (signature, measured µs) samples;
    `params` names the fitted fields (GPU_PARAMS for a GPU profile)."""
    data = usable(samples, base)
    if len(data) < len(params):
        raise ValueError(f"need at least {len(params)} measured non-view signatures to "
                         f"calibrate, got {len(data)}")
    sigs = [s for s, _ in data]
    log_meas = np.log([us for _, us in data])
    theta0 = np.log([_start(base, p) for p in params])
    lo, hi = theta0 - math.log(SPAN), theta0 + math.log(SPAN)
    theta = theta0.copy()
    r = _residuals(base, theta, sigs, log_meas, theta0, params)
    lam, eps = 1e-2, 1e-4
    for _ in range(iters):
        jac = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            t = theta.copy()
            t[j] += eps
            jac[:, j] = (_residuals(base, t, sigs, log_meas, theta0, params) - r) / eps
        g = jac.T @ r
        h = jac.T @ jac
        improved = False
        for _ in range(10):
            step = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-9), -g)
            t = np.clip(theta + step, lo, hi)
            rt = _residuals(base, t, sigs, log_meas, theta0, params)
            if rt @ rt < r @ r:
                theta, r, lam, improved = t, rt, max(lam / 3, 1e-7), True
                break
            lam *= 4
        if not improved or np.abs(step).max() < 1e-6:
            break
    fitted = _profile(base, theta, name, params)
    before, after = quality(base, data), quality(fitted, data)
    if after.gmean_ratio > before.gmean_ratio:
        # least squares of the log ratios can raise their mean absolute value (the reported
        # geometric-mean ratio) on noisy samples: then the fit is no calibration at all
        return replace(base, name=name), before, before
    return fitted, before, after
