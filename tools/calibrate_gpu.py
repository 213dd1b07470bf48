"""Fit a GPU profile's constants to a measured cost table.

    python tools/calibrate_gpu.py [TABLE.json | NAME]   (default: the shipped h100-measured)

Starts from the datasheet H100 profile (`DATASHEET`: what `analytic.H100` was before a GPU
measured it), fits `calibrate.GPU_PARAMS` to every row of the table (`cost/calibrate.py`:
least squares on log(predicted / measured), a weak prior towards the start) with concats as
copies, as PyTorch runs them, and prints the fit's quality and the fitted constants as the
`DeviceProfile(...)` to paste into `eqsat_nb/cost/analytic.py`. tests/test_cost_h100_measured.py
checks that the shipped H100 profile is this fit of the shipped table.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eqsat_nb.cost.analytic import DeviceProfile  # noqa: E402
from eqsat_nb.cost.calibrate import GPU_PARAMS, FitQuality, fit_profile  # noqa: E402
from eqsat_nb.cost.table import resolve_table  # noqa: E402

# NVIDIA H100 SXM5 datasheet (FP32 67 TFLOP/s, HBM3 3.35 TB/s, 132 SMs; 4.2 T transcendentals/s
# from 132 SMs x 16 SFUs x 1.98 GHz) with the A100 profile's TASO-derived constants scaled by
# the launch ratio: the profile before the measurement, and the fit's start
DATASHEET = DeviceProfile("h100", matmul_flops=67e12, vector_flops=67e12, cache_bw=3.35e12,
                          dram_bw=3.35e12, cache_bytes=0, transcendental=4.2e12, pool=67e12,
                          transpose_eff=0.7, launch_us=3.0, sms=132, tile=32, split_view=True,
                          concat_in_place=True, group_us=1.33, depthwise_flops=2.1e12,
                          ew_launch_us=1.5)


def fit(table: str = "h100-measured") -> tuple[DeviceProfile, FitQuality, FitQuality]:
    """(fitted profile, quality of the datasheet start, quality after) on the table's rows."""
    start = replace(DATASHEET, concat_in_place=False)       # torch.cat copies
    return fit_profile(resolve_table(table).samples(), base=start, name="h100",
                       params=GPU_PARAMS)


def as_python(p: DeviceProfile) -> str:
    scale = ", ".join(f'"{k}": {v:.3g}' for k, v in sorted(p.op_scale.items()))
    floors = ", ".join(f'"{k}": {v:.3g}' for k, v in sorted(p.op_floor_us.items()))
    return (f'DeviceProfile("{p.name}", matmul_flops={p.matmul_flops:.3g}, '
            f"vector_flops={p.vector_flops:.3g}, cache_bw={p.cache_bw:.3g}, "
            f"dram_bw={p.dram_bw:.3g}, cache_bytes={p.cache_bytes:g}, "
            f"transcendental={p.transcendental:.3g}, pool={p.pool:.3g}, "
            f"transpose_eff={p.transpose_eff:.2g}, launch_us={p.launch_us:.2g}, sms={p.sms}, "
            f"tile={p.tile}, split_view={p.split_view}, concat_in_place={p.concat_in_place}, "
            f"group_us={p.group_us:.2g}, depthwise_flops={p.depthwise_flops:.3g}, "
            f"ew_launch_us={p.ew_launch_us:.2g}, op_scale={{{scale}}}, "
            f"op_floor_us={{{floors}}})")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    prof, before, after = fit(args[0] if args else "h100-measured")
    for label, q in (("datasheet", before), ("fitted", after)):
        print(f"{label:9s}: {q.samples} configurations, geometric-mean error "
              f"{q.gmean_ratio:.2f}x, worst {q.worst_ratio:.1f}x ({q.worst_op})")
    print(as_python(prof))
    return 0


if __name__ == "__main__":
    sys.exit(main())
