"""Fit the analytic `cpu` profile to measured `ort` costs (`eqsat-nb profile --calibrate`).

The roofline's rates (conv/matmul and element-wise FLOP/s, in-cache and DRAM bandwidth,
transcendental and pooling rates, transpose efficiency, per-call floor) are fitted by
Levenberg-Marquardt least squares on log(predicted / measured) over every measured signature,
with the parameters in log space (so they stay positive). A weak prior (`PRIOR`) pulls each
parameter towards the starting profile and the search stays within `SPAN`x of it, so rates that
the samples do not constrain (say, DRAM bandwidth when every working set fits the cache) keep
their measured defaults instead of drifting. `cache_bytes` and per-op multipliers are
kept from the starting profile. Views (reshape, dropout) cost 0 analytically and are left out.
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


def usable(samples: Sequence[tuple[OpSignature, float]]) -> list[tuple[OpSignature, float]]:
    """The samples a roofline can be fitted to: positive times, non-view ops."""
    return [(s, us) for s, us in samples if us > 0 and math.isfinite(us) and s.op not in VIEWS]


def _profile(base: DeviceProfile, theta: np.ndarray, name: str) -> DeviceProfile:
    vals = dict(zip(PARAMS, np.exp(theta)))
    vals["transpose_eff"] = min(vals["transpose_eff"], 1.0)
    return replace(base, name=name, **{k: float(v) for k, v in vals.items()})


def _residuals(base: DeviceProfile, theta: np.ndarray, sigs: Sequence[OpSignature],
               log_meas: np.ndarray, theta0: np.ndarray) -> np.ndarray:
    m = AnalyticCostModel(_profile(base, theta, base.name))
    fit = np.array([math.log(m._cost(s)) for s in sigs]) - log_meas
    return np.concatenate([fit, PRIOR * (theta - theta0)])


def fit_profile(samples: Sequence[tuple[OpSignature, float]], base: DeviceProfile = CPU,
                name: str = "cpu-calibrated", iters: int = 60
                ) -> tuple[DeviceProfile, FitQuality, FitQuality]:
    """(fitted profile, quality before, quality after) for (signature, measured µs) samples."""
    data = usable(samples)
    if len(data) < len(PARAMS):
        raise ValueError(f"need at least {len(PARAMS)} measured non-view signatures to "
                         f"calibrate, got {len(data)}")
    sigs = [s for s, _ in data]
    log_meas = np.log([us for _, us in data])
    theta0 = np.log([getattr(base, p) for p in PARAMS])
    lo, hi = theta0 - math.log(SPAN), theta0 + math.log(SPAN)
    theta = theta0.copy()
    r = _residuals(base, theta, sigs, log_meas, theta0)
    lam, eps = 1e-2, 1e-4
    for _ in range(iters):
        jac = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            t = theta.copy()
            t[j] += eps
            jac[:, j] = (_residuals(base, t, sigs, log_meas, theta0) - r) / eps
        g = jac.T @ r
        h = jac.T @ jac
        improved = False
        for _ in range(10):
            step = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-9), -g)
            t = np.clip(theta + step, lo, hi)
            rt = _residuals(base, t, sigs, log_meas, theta0)
            if rt @ rt < r @ r:
                theta, r, lam, improved = t, rt, max(lam / 3, 1e-7), True
                break
            lam *= 4
        if not improved or np.abs(step).max() < 1e-6:
            break
    fitted = _profile(base, theta, name)
    before, after = quality(base, data), quality(fitted, data)
    if after.gmean_ratio > before.gmean_ratio:
        # least squares of the log ratios can raise their mean absolute value (the reported
        # geometric-mean ratio) on noisy samples: then the fit is no calibration at all
        return replace(base, name=name), before, before
    return fitted, before, after
