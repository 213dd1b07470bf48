"""The `analytic` backend: a roofline estimate per node, instant, the default.

    t = launch + max(compute, memory)

compute = FLOPs / peak (ops.flops(); a multiply-add counts 2), except transcendental element-wise
ops (tanh, sigmoid, gelu, softmax, and a fused sigmoid/tanh activation's epilogue) which go at
`transcendental` elements/s and pooling which goes at `pool` window-elements/s. memory = bytes
moved (every input and output once, element size from the dtype: 4 B for f32) over the bandwidth:
the first `cache_bytes` of a node's working set at `cache_bw`, the rest at `dram_bw` (on GPUs the
two are the HBM figure). Transposes move their bytes at `transpose_eff` x that bandwidth.

GPU profiles (`sms` > 0) also price the way a GEMM-shaped kernel (matmul, ungrouped conv as an
implicit GEMM) fills the device: its M x N output is cut into `tile` x `tile` blocks, one block per
streaming multiprocessor at a time, so the compute time is that of `waves = ceil(blocks / sms)`
full waves of full tiles, not FLOPs / peak (NVIDIA, "Matrix Multiplication Background User's
Guide": tile and wave quantization). A 197 x 768 x 768 matmul needs 168 of an A100's 2 x 108
block slots (2 waves); three of them take 6 waves, the merged 197 x 768 x 2304 one 5. This is part
of why the papers measured gains from merging matmuls and convs on GPUs at equal FLOPs.

Layout choices (documented; the CPU profile, measured with onnxruntime, keeps the copies):
- `reshape` costs 0: it is a view on every backend (same buffer, new shape).
- `dropout` costs 0: identity at inference (runtimes drop it).
- `transpose`, `slice`, `pad`, `broadcast` are real copies: launch + their bytes over bandwidth.
  `enlarge`/`merge` only ever touch weights in practice (then weight-only, cost 0); on a computed
  tensor they are copies. `proj` (reading one result of a split) costs 0; the split node pays.
- `split`: a copy on the CPU (onnxruntime's Split kernel copies). On the GPU profiles
  (`split_view`) a view that costs 0: TASO's `Split::map` points each output into the input's
  buffer and `measure_split_cost` records 0 (github.com/jiazhihao/TASO, src/core/split.cc), and
  every consumer in this IR reads a strided view in place (cuBLAS leading dimensions, cuDNN
  strided tensor descriptors).
- `concat`: a copy on the CPU. On the GPU profiles (`concat_in_place`) the producers write
  straight into the concatenated buffer and the concat costs 0 (TASO's rewrite-created concats
  have `needCopy = false`, src/core/substitution.cc, and measure at most 0.056 us, DESIGN.md
  section 10; TensorRT's builder log reports "After concat removal", NVIDIA developer forum
  thread "Layer fusion issue", 2021). An operand no producer can write there is copied, one
  strided-copy launch per operand plus its bytes read and written (TASO's `Concat::forward`
  launches `assign_with_stride` per copied input, src/cudnn/concat_kernel.cu): a weight-only
  operand (`const_inputs`), a graph input or a repeated operand (`bound_inputs`, model.py). A
  concat of weights only is folded like any weight-only expression (cost 0).
  Not seen per node: a producer that feeds two concats can write into one of them only; the
  extraction picks the consumers, so both are priced in place (TASO has the same blind spot).

Grouped convolutions on the GPU profiles (`group_us`, `depthwise_flops`); measured grouped-conv
cost is far from proportional to FLOPs:
- Depthwise (one input and one output channel per group): cuDNN's dedicated depthwise kernel,
  at `depthwise_flops` (a few % of the FP32 peak; fitted below) or the memory time if larger.
- Other grouped convs: cuDNN runs such groups one by one ("worst case all groups in the
  convolution will be run in streams", NVIDIA on cuDNN 7's group support, facebookarchive/caffe2
  pull request 1079), so a fixed `group_us` per group is paid on top of the GEMM waves of the
  batched per-group products (g x M x C_out/g x C_in/g*kh*kw). Merging groups (`*_merge_groups`,
  TASO's merge_gconv) trades FLOPs for fewer groups. A conv of many small groups can cost more
  than the dense conv of its shape (A100 profile: 232 us for TASO's 128 groups of 2 channels,
  149 us dense); merging groups pairwise reaches the dense form.
- A depthwise conv with a channel multiplier (one input channel but M > 1 output channels per
  group, e.g. 512 -> 1536 channels in 512 groups) is one of those, not the depthwise kernel:
  TASO measured such convs at 0.5-1.9 ms on its GPU (256 -> 512 channels, 3x3, 28x28: 0.48 ms;
  512 -> 1536, 3x3, 14x14: about 1.9 ms; from TASO's costs in
  TENSAT's NasNet-A e-graph, egraphs-good/extraction-gym data/tensat/nasneta.csv, where the
  conv costs cluster at 0.27-0.30, 0.47-0.50, 0.95-1.07 and 1.90-1.92 ms: about 1.9 us per
  group for 128 to 1024 groups, the per-group rule's figure). The A100 profile prices those two
  at 0.46 and 0.91 ms; the depthwise rule gave 16 and 13 us. Not modelled: the per-group cost
  grows with the work per group (the same 256 groups measured 1.07 ms with a 5x5 kernel, DESIGN.md
  section 12; priced as the 3x3 one).
Dense convs and matmuls keep the GEMM tile/wave model above.

Per-kernel floors (GPU profiles): `launch_us` for the GEMM-shaped library calls (matmul, conv2d),
`ew_launch_us` for every other kernel (element-wise, pooling, normalizations, transposes,
copies), which is lower: TASO measured relu and tanh on 512 elements at 0.27-0.48 of a
1 x 512 x 512 matmul (figures below); one floor for both priced them at 0.86 of it, 2-4x too
expensive relative to the GEMMs (DESIGN.md section 12). Both floors dwarf such kernels' memory
time (a 512-element relu moves 4 KiB: 3 ns at HBM bandwidth), so the floor is their price.

Why device profiles matter: on this machine's CPU (onnxruntime, one thread) merging matmuls or
convs measured 0.97-1.01x and enlarge+merge 1.47x slower: the per-call floor is small next to a
512x512 f32 matmul's 1 MiB of weights, and a merged matmul's working set leaves the L2 and streams
from DRAM at a third of the in-cache rate. On GPUs a small matmul finishes in well under a
microsecond of HBM time, so the few-microsecond launch dominates and fewer, bigger kernels win,
as TASO/TENSAT measured. The roofline with these profiles reproduces both without any rule about
merging.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import TirError
from ..ir.graph import TensorType
from ..ir.ops import flops, ops_priced_as
from .model import FREE_OPS, CostModel, OpSignature

ITEMSIZE = {"f16": 2, "f32": 4, "f64": 8, "i32": 4, "i64": 8, "bool": 1, "bf16": 2}
FLOAT_TYPES = ("f16", "f32", "f64", "bf16")
# each op's pricing class is its `OpDef.cost` (ir/ops/, one module per operator family)
TRANSCENDENTAL = ops_priced_as("transcendental")     # tanh, sigmoid, gelu, softmax, ...
POOLS = ops_priced_as("pool")
VIEWS = ops_priced_as("view")                        # reshape, dropout
MATRIX = ops_priced_as("matrix")                     # matmul, conv2d


@dataclass(frozen=True)
class DeviceProfile:
    """Rates of one target. Units: FLOP/s, bytes/s, elements/s, microseconds, bytes."""

    name: str
    matmul_flops: float          # conv / matmul peak
    vector_flops: float          # element-wise arithmetic peak
    cache_bw: float              # bytes/s while the node's working set fits in `cache_bytes`
    dram_bw: float               # bytes/s beyond it
    cache_bytes: float
    transcendental: float        # tanh/exp/sigmoid elements/s
    pool: float                  # pooling window elements/s
    transpose_eff: float         # fraction of bandwidth a transpose reaches
    launch_us: float             # per-kernel (per-call) floor
    op_scale: Mapping[str, float] = field(default_factory=dict)  # per-op multiplier on the roofline
    sms: int = 0                 # GPU streaming multiprocessors (0: no wave quantization)
    tile: int = 32               # GEMM output tile edge of the wave model
    split_view: bool = False     # split outputs are views (0 us), else copies
    concat_in_place: bool = False  # producers write into the concat's buffer (see module doc)
    group_us: float = 0.0        # per-group cost of a grouped conv (0: plain roofline)
    depthwise_flops: float = 0.0  # FLOP/s of the depthwise kernel (0: plain roofline)
    # per-kernel floor of the non-GEMM kernels (element-wise, pooling, copies; None: launch_us)
    ew_launch_us: float | None = None
    op_floor_us: Mapping[str, float] = field(default_factory=dict)  # per-op floor override
    # GEMM rate (matmul, dense conv) per precision other than fp32: tensor cores (None: fp32's)
    precision_flops: Mapping[str, float] = field(default_factory=dict)

    def gemm_flops(self, precision: str = "fp32") -> float:
        """The GEMM rate this profile prices a precision at: its tensor-core rate where it has
        one (`precision_flops`), else `matmul_flops`."""
        return self.precision_flops.get(precision, self.matmul_flops)

    def floor_us(self, op: str) -> float:
        """The per-kernel floor of `op`: its own (`op_floor_us`) where measured apart, else
        `launch_us` for the GEMM-shaped library calls (matmul, conv2d) and `ew_launch_us`
        (when set) for every other kernel."""
        if op in self.op_floor_us:
            return self.op_floor_us[op]
        if op in MATRIX or self.ew_launch_us is None:
            return self.launch_us
        return self.ew_launch_us

    def gemm_s(self, batch: int, m: int, n: int, k: int) -> float:
        """Compute seconds of `batch` M x N x K GEMMs under tile and wave quantization (GPUs),
        or at peak (sms == 0). A dimension shorter than the tile gets a tile of its own length
        (a 1-row product is not padded to 32 rows)."""
        if self.sms <= 0:
            return 2.0 * batch * m * n * k / self.matmul_flops
        tm, tn = min(self.tile, m), min(self.tile, n)
        blocks = batch * (-(-m // tm)) * (-(-n // tn))
        waves = -(-blocks // self.sms)
        return waves * self.sms * 2.0 * tm * tn * k / self.matmul_flops

    def waves(self, batch: int, m: int, n: int) -> int:
        """Waves of output tiles a batch of M x N GEMMs takes (GPUs; 0 with sms == 0)."""
        if self.sms <= 0:
            return 0
        tm, tn = min(self.tile, m), min(self.tile, n)
        return -(-(batch * (-(-m // tm)) * (-(-n // tn))) // self.sms)

    def memory_s(self, nbytes: float) -> float:
        fit = min(nbytes, self.cache_bytes)
        return fit / self.cache_bw + (nbytes - fit) / self.dram_bw


# CPU: measured here with onnxruntime 1.31 on one core, intra_op_num_threads=1 (DESIGN.md §7):
# convs/matmuls ~100-115 GFLOP/s (113 used), element-wise 90-110 GB/s in cache (100 used) and
# 31-34 GB/s from DRAM (32 used), a per-call floor of ~4.6 us, tanh/exp 2.5-4.5 G elements/s
# (3.5 used). cache_bytes = 1 MiB, the per-core L2 that lscpu reports on this AMD EPYC host.
# Pooling (10 G window-elements/s) and the transpose efficiency (0.5) are estimates, not measured.
CPU = DeviceProfile("cpu", matmul_flops=113e9, vector_flops=113e9, cache_bw=100e9, dram_bw=32e9,
                    cache_bytes=1 << 20, transcendental=3.5e9, pool=10e9, transpose_eff=0.5,
                    launch_us=4.6)

# NVIDIA A100 SXM4 40 GB, public datasheet ("NVIDIA A100 Tensor Core GPU", 2020): FP32 19.5
# TFLOP/s (TF32 tensor cores 156 TFLOP/s, not used: the IR is f32 and TF32 is opt-in), HBM2
# 1,555 GB/s (the 80 GB part: 2,039 GB/s). Transcendentals: 108 SMs x 16 SFU ops/clk x 1.41 GHz
# ~ 2.4 T/s (Ampere tuning guide / whitepaper SFU counts). Kernel launch overhead ~3-5 us
# (NVIDIA's CUDA Graphs posts measure a few us per launch); 4 us used. Pooling is bandwidth-bound;
# its rate is set to the FP32 rate. Transposes reach ~70 % of HBM bandwidth (estimate).
# 108 SMs (datasheet). 32 x 32 output tiles: the smallest of the tiles cuBLAS/cuDNN choose from
# (32 x 32 to 256 x 128), so the wave model errs towards the plain roofline.
# Split as a view and concat in place: TASO (github.com/jiazhihao/TASO) src/core/split.cc,
# src/core/substitution.cc (needCopy = false), DESIGN.md section 10; see the module doc.
# group_us = 1.77 us per group: Hartmann et al. 2024 (RESULTS.md, extraction accuracy, A100, TASO's
# cuDNN costs) estimate ResNeXt-50 at 1.26 ms and ResNet-50 at 0.29 ms; their dense convs are the
# same 8.0 GFLOP (our .tir files), so the 16 32-group 3x3 convs take about 0.97 ms, 60.6 us each,
# i.e. (60.6 - 4 launch) / 32 = 1.77 us per group (their 28.9 MFLOP of GEMM work is < 1 us here).
# depthwise_flops = 0.6 TFLOP/s: TASO's 256-channel 5x5/2 conv on 56x56 (10.0 MFLOP; DESIGN.md
# section 10) measured 57 us depthwise, 8.7x and 5.8x below its C/2- and C/4-group forms; this
# profile prices those forms at 232 and 119 us, which puts the depthwise kernel at 26.6 or 20.7
# us, 0.44 or 0.60 TFLOP/s after the launch. 0.60 is used: with it a depthwise conv of >= 32
# channels (every one in the benchmark models) costs less than the dense conv of its shape.
# ew_launch_us = 2.0 us, the floor of non-GEMM kernels: TASO's measured costs in TENSAT's NasRNN
# e-graph (egraphs-good/extraction-gym data/tensat/nasrnn.csv, in ms) put relu on 512 elements
# at 2.30-4.12 us and tanh at 4.09 us against 8.51 us for the original 1 x 512 x 512 matmul:
# 0.27-0.48 of it. This profile prices that matmul at 4.68 us (launch + 1 MiB of weights over
# HBM), so 1.3-2.2 us for those kernels; 2.0 is used (the top of the range: a tiny kernel's
# launch-to-finish time on a recent GPU is a couple of microseconds, never zero).
# Tensor-core GEMM rates, same datasheet: TF32 156 TFLOP/s, FP16 and BF16 312 TFLOP/s (dense).
A100 = DeviceProfile("a100", matmul_flops=19.5e12, vector_flops=19.5e12, cache_bw=1.555e12,
                     dram_bw=1.555e12, cache_bytes=0, transcendental=2.4e12, pool=19.5e12,
                     transpose_eff=0.7, launch_us=4.0, sms=108, tile=32, split_view=True,
                     concat_in_place=True, group_us=1.77, depthwise_flops=0.6e12,
                     ew_launch_us=2.0,
                     precision_flops={"tf32": 156e12, "fp16": 312e12, "bf16": 312e12})

# NVIDIA H100, measured: every constant below was fitted by `cost/calibrate.py`
# (GPU_PARAMS; tools/calibrate_gpu.py) to the shipped table `tables/h100-measured.json`: 1 229
# operator configurations of the 13 benchmark models' saturated e-graphs and torch.onnx's BERT,
# timed on an NVIDIA H100 80GB HBM3 (PyTorch 2.11, CUDA 13.0, cuDNN 9.19, TF32 off, each op a
# CUDA graph of 20 calls, median; tools/gpu_truth.py, docs/gpu-costs.md). Geometric-mean error per op
# 2.25x -> 1.42x over the 1 016 it prices above 0 (worst 408x -> 12x). What the fit says,
# against the datasheet profile it replaced (FP32 67 TFLOP/s, HBM3 3.35 TB/s, launch 3 us,
# A100-derived grouped-conv constants; tools/calibrate_gpu.py DATASHEET):
# - GEMMs reach about half the FP32 peak (35.9 TFLOP/s in the wave model); cuDNN's dense convs
#   a further 2.4x less (op_scale) above a floor of 8.3 us; matmul's floor is 3.8 us, every other
#   kernel's 1.7 us.
# - Element-wise traffic moves at 5.5 TB/s, above HBM's 3.35: these working sets (at most a few
#   MB) stay in the 50 MB L2. Transposes reach a third of that.
# - Grouped convs are one cuDNN kernel, not a kernel per group: the per-group cost fits to
#   0.013 us (the fit's lower bound), so ResNeXt's 32-group convs cost what their GEMM waves do;
#   the depthwise kernel runs at 12.5 TFLOP/s.
# - Layernorm, batchnorm and a global average pool cost 9x, 5x and 21x their roofline: PyTorch's
#   kernels for them, not bandwidth, set their time.
# - A concat is a copy (torch.cat; the producers do not write in place as TASO's runtime has
#   them): concat_in_place is off. A split stays a view.
# Not constrained by the sample (kept from the datasheet): transcendental 4.2 T/s, pool rate.
# Other precisions, not measured yet: the tensor-core peaks of the H100 SXM datasheet (dense
# TF32 494.7, FP16/BF16 989.4 TFLOP/s against FP32's 66.9) at the efficiency the fp32 fit found
# (35.9 of 66.9 TFLOP/s): 265 and 531 TFLOP/s; every other rate as in fp32, with 2-byte elements.
# Priced by this roofline, the graphs the extraction picks still look faster than measured on
# merge-heavy models (errors of +-40 % per op add up where the extraction can choose):
# `--device h100-measured` prices by the measurement itself (docs/gpu-costs.md).
H100 = DeviceProfile("h100", matmul_flops=35.9e12, vector_flops=115e12, cache_bw=5.54e12,
                     dram_bw=5.54e12, cache_bytes=0, transcendental=4.2e12, pool=67e12,
                     transpose_eff=0.32, launch_us=3.8, sms=132, tile=32, split_view=True,
                     concat_in_place=False, group_us=0.013, depthwise_flops=12.5e12,
                     ew_launch_us=1.7,
                     op_scale={"batchnorm": 4.89, "conv2d": 2.39, "layernorm": 9.12,
                               "poolavg": 20.8},
                     op_floor_us={"conv2d": 8.28},
                     precision_flops={p: 35.9e12 * peak / 66.9e12 for p, peak in
                                      (("tf32", 494.7e12), ("fp16", 989.4e12),
                                       ("bf16", 989.4e12))})

PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (CPU, A100, H100)}

#: The profile `eqsat-nb profile --calibrate` fits to this machine's `ort` costs. It is used only
#: when asked for by name (`--device cpu-calibrated`) or by path (`--device FILE.json`): `cpu`
#: stays the built-in profile, so extraction results never depend on a file in the user's home.
CALIBRATED = "cpu-calibrated"
PROFILE_ENV = "EQSAT_NB_CPU_PROFILE"
_FIELDS = ("matmul_flops", "vector_flops", "cache_bw", "dram_bw", "cache_bytes", "transcendental",
           "pool", "transpose_eff", "launch_us")
_OPTIONAL = {"sms": 0, "tile": 32}      # integer fields a profile file may leave out
_OPTIONAL_FLOAT = {"group_us": 0.0, "depthwise_flops": 0.0}
_OPTIONAL_BOOL = {"split_view": False, "concat_in_place": False}


def calibrated_path() -> Path:
    """Where the calibrated CPU profile lives: $EQSAT_NB_CPU_PROFILE, else
    `$XDG_CONFIG_HOME/eqsat-nb/cpu-calibrated.json` (`~/.config/...`)."""
    env = os.environ.get(PROFILE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "eqsat-nb" / f"{CALIBRATED}.json"


def profile_to_json(prof: DeviceProfile, extra: Mapping[str, Any] | None = None) -> str:
    """The profile as JSON (its rates, per-op multipliers, and `extra` notes such as the fit)."""
    doc: dict[str, Any] = {"name": prof.name, **{f: getattr(prof, f) for f in _FIELDS},
                           **{f: getattr(prof, f) for f in _OPTIONAL},
                           **{f: getattr(prof, f) for f in _OPTIONAL_FLOAT},
                           **{f: getattr(prof, f) for f in _OPTIONAL_BOOL},
                           "ew_launch_us": prof.ew_launch_us, "op_scale": dict(prof.op_scale),
                           "op_floor_us": dict(prof.op_floor_us),
                           "precision_flops": dict(prof.precision_flops)}
    if extra:
        doc["fit"] = dict(extra)
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def load_profile(path: str | os.PathLike) -> DeviceProfile:
    """A `DeviceProfile` from a JSON file written by `profile_to_json` (TirError if unusable)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise TirError(f"cannot read device profile: {e.strerror}", file=str(path)) from None
    except json.JSONDecodeError as e:
        raise TirError(f"device profile is not valid JSON: {e.msg}", file=str(path)) from None
    if not isinstance(doc, dict):
        raise TirError("device profile must be a JSON object", file=str(path))
    missing = [f for f in _FIELDS if f not in doc]
    if missing:
        raise TirError(f"device profile lacks {', '.join(missing)}", file=str(path))
    try:
        vals = {f: float(doc[f]) for f in _FIELDS}
        scale = {str(k): float(v) for k, v in dict(doc.get("op_scale") or {}).items()}
        floors = {str(k): float(v) for k, v in dict(doc.get("op_floor_us") or {}).items()}
        rates = {str(k): float(v) for k, v in dict(doc.get("precision_flops") or {}).items()}
        ints = {f: int(doc.get(f, d)) for f, d in _OPTIONAL.items()}
        extra = {f: float(doc.get(f, d)) for f, d in _OPTIONAL_FLOAT.items()}
        ew = doc.get("ew_launch_us")          # absent or null: the launch_us floor
        if ew is not None:
            extra["ew_launch_us"] = float(ew)
    except (TypeError, ValueError):
        raise TirError("device profile values must be numbers", file=str(path)) from None
    flags = {f: doc.get(f, d) for f, d in _OPTIONAL_BOOL.items()}
    if not all(isinstance(v, bool) for v in flags.values()):
        raise TirError(f"device profile's {', '.join(_OPTIONAL_BOOL)} must be true or false",
                       file=str(path))
    if not all(math.isfinite(v) and v >= 0 for v in extra.values()):
        raise TirError(f"device profile's {', '.join(_OPTIONAL_FLOAT)}, ew_launch_us must be "
                       "finite and >= 0", file=str(path))
    bad = [f for f, v in vals.items() if not math.isfinite(v) or v < 0
           or (v == 0 and f not in ("cache_bytes", "launch_us"))]
    if bad:
        raise TirError(f"device profile has non-positive or non-finite {', '.join(bad)}",
                       file=str(path))
    if ints["sms"] < 0 or ints["tile"] < 1:
        raise TirError("device profile needs sms >= 0 and tile >= 1", file=str(path))
    if not all(math.isfinite(v) and v >= 0 for v in [*scale.values(), *floors.values()]):
        raise TirError("device profile's op_scale and op_floor_us values must be finite and "
                       ">= 0", file=str(path))
    from ..precision import PRECISIONS
    if not all(k in PRECISIONS and math.isfinite(v) and v > 0 for k, v in rates.items()):
        raise TirError(f"device profile's precision_flops must map precisions "
                       f"({', '.join(PRECISIONS)}) to finite rates > 0", file=str(path))
    return DeviceProfile(str(doc.get("name", path.stem)), op_scale=scale, op_floor_us=floors,
                         precision_flops=rates,
                         **vals, **ints, **extra,
                         **flags)


def profile(name: str) -> DeviceProfile:
    """A built-in profile by name, `cpu-calibrated` (the fitted file), or a profile JSON path."""
    if name in PROFILES:
        return PROFILES[name]
    if name == CALIBRATED:
        path = calibrated_path()
        if not path.exists():
            raise TirError(f"no calibrated CPU profile at {path}; create it with `eqsat-nb "
                           "profile MODEL --cost ort --calibrate`")
        return load_profile(path)
    if name.endswith(".json"):
        return load_profile(name)
    raise ValueError(f"unknown device profile {name!r} (known: {', '.join(PROFILES)}, "
                     f"{CALIBRATED}, or a profile .json file)")


def _gemm_shape(op: str, sig: OpSignature) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a matmul or an ungrouped conv2d seen as an implicit GEMM; None for
    grouped convs and shapes the wave model does not cover."""
    if len(sig.inputs) < 2 or not sig.outputs:
        return None
    a, b = sig.inputs[0].shape, sig.inputs[1].shape
    out = sig.outputs[0].shape
    if op == "matmul":
        if len(a) < 2 or len(b) < 2 or len(out) < 2:
            return None
        if len(b) == 2:                 # one weight for every batch row: a single GEMM over
            return 1, math.prod(out[:-1]), out[-1], a[-1]   # the flattened rows (cuBLAS, MLAS)
        return math.prod(out[:-2]), out[-2], out[-1], a[-1]
    if len(a) != 4 or len(b) != 4 or len(out) != 4 or a[1] != b[1]:
        return None                     # NCHW x OIHW; grouped when a's C != the weight's I
    return 1, out[0] * out[2] * out[3], out[1], b[1] * b[2] * b[3]


def _conv_groups(sig: OpSignature) -> tuple[int, int, int, int, int] | None:
    """(groups, M, N per group, K per group, input channels per group) of a grouped conv2d (NCHW
    x OIHW, more than one group); None otherwise."""
    if sig.op != "conv2d" or len(sig.inputs) < 2 or not sig.outputs:
        return None
    a, b, out = sig.inputs[0].shape, sig.inputs[1].shape, sig.outputs[0].shape
    if len(a) != 4 or len(b) != 4 or len(out) != 4 or b[1] <= 0 or a[1] == b[1]:
        return None
    g = a[1] // b[1]
    return g, out[0] * out[2] * out[3], out[1] // g, b[1] * b[2] * b[3], b[1]


def _bytes(types, float_bytes: int | None = None) -> int:
    """Bytes of tensors of these types; floats at `float_bytes` each when given (the
    precision priced), else at their own type's size."""
    return sum(t.numel * (float_bytes if float_bytes and t.dtype in FLOAT_TYPES else
                          ITEMSIZE.get(t.dtype, 4)) for t in types)


class AnalyticCostModel(CostModel):
    """Roofline costs for one `DeviceProfile` (a profile object or its name) in one precision:
    `precision` None prices every tensor in its own type at the fp32 GEMM rate (a model's own
    types); a precision prices float tensors at that precision's bytes per element and GEMMs at
    its rate (`DeviceProfile.gemm_flops`): how the model runs when deployed in it."""

    name = "analytic"

    def __init__(self, prof: DeviceProfile | str = "cpu", precision: str | None = None) -> None:
        super().__init__()
        from ..precision import BYTES
        self.profile = profile(prof) if isinstance(prof, str) else prof
        self.launch_us = self.profile.launch_us
        self.precision = precision
        self._float_bytes = BYTES[precision] if precision else None
        self._gemm = self.profile.gemm_flops(precision or "fp32")

    def _cost(self, sig: OpSignature) -> float:
        return self.price(sig)[0]

    def explain(self, sig: OpSignature) -> str:
        """The profile rule that priced `sig` when it is one a GPU result can rest on (split as
        a view, concat in place or copied, per-group or depthwise conv pricing, GEMM waves);
        "" for the plain roofline. Used by the run report's "why" lines."""
        if sig.op in FREE_OPS:
            return ""
        return self.price(sig)[1]

    def price(self, sig: OpSignature) -> tuple[float, str]:
        """(microseconds, the rule that priced it, "" for the plain roofline)."""
        p = self.profile
        op = sig.op
        if op in VIEWS:
            return 0.0, ""
        if op == "split" and p.split_view:
            return 0.0, "split: a view, 0 us"
        if op == "concat" and p.concat_in_place:
            copied = sorted(set(sig.const_inputs) | set(sig.bound_inputs))
            if not copied:
                return 0.0, "concat: written in place, 0 us"
            nbytes = 2 * _bytes((sig.inputs[i] for i in copied), self._float_bytes)
            us = (len(copied) * p.floor_us(op)
                  + p.op_scale.get(op, 1.0) * p.memory_s(nbytes) * 1e6)
            return us, f"concat: copies {len(copied)} of {len(sig.inputs)} operands"
        mem = p.memory_s(_bytes(sig.inputs, self._float_bytes)
                         + _bytes(sig.outputs, self._float_bytes))
        outs: tuple[TensorType, ...] = sig.outputs
        numel_out = sum(t.numel for t in outs)
        rule = ""
        if op in MATRIX:
            act = sig.attr.get("act", "none")
            f = flops(op, list(sig.inputs), list(outs), sig.attrs)
            if act != "none":
                f -= numel_out          # the epilogue is priced below
            grouped = _conv_groups(sig) if p.sms > 0 else None
            gemm = _gemm_shape(op, sig) if p.sms > 0 else None
            if grouped and grouped[4] == 1 == grouped[2] and p.depthwise_flops > 0:
                compute = f / p.depthwise_flops
                rule = f"conv2d: depthwise kernel at {p.depthwise_flops / 1e12:g} TFLOP/s"
            elif grouped and p.group_us > 0:
                g, m, n, k, _ = grouped
                compute = g * p.group_us * 1e-6 + p.gemm_s(g, m, n, k)
                rule = f"conv2d: {g} groups x {p.group_us:g} us"
            elif gemm:
                compute = p.gemm_s(*gemm) * p.matmul_flops / self._gemm
                w = p.waves(*gemm[:3])
                rule = f"{op}: {w} GEMM wave{'s' if w != 1 else ''}"
            else:
                compute = f / self._gemm
            if act in ("tanh", "sigmoid"):
                compute += numel_out / p.transcendental
            elif act == "relu":
                compute += numel_out / p.vector_flops
        elif op in TRANSCENDENTAL:
            n = sum(t.numel for t in sig.inputs[:1])
            compute = n / p.transcendental
        elif op in POOLS:
            compute = flops(op, list(sig.inputs), list(outs), sig.attrs) / p.pool
        elif op == "transpose":
            compute = 0.0
            mem = mem / p.transpose_eff
        else:
            compute = flops(op, list(sig.inputs), list(outs), sig.attrs) / p.vector_flops
        return p.floor_us(op) + p.op_scale.get(op, 1.0) * max(compute, mem) * 1e6, rule
