#!/usr/bin/env python3
"""Generate the benchmark models as `.tir` files (`ir_examples/<name>.tir`).

    python tools/gen_models.py [--out ir_examples] [--taso-dir DIR] [--only NAME ...]

Every model is a function returning a Graph, with size parameters whose defaults are the published
sizes, so tests can build scaled-down variants of the same recipe. The recipes are those of
`shared/reference/MODELS.md`; the op mix of each default build equals its table.

Sources of truth:
  * recipe (built here): resnet50, resnext50, nasrnn, bert, nasneta, vit_base/large/huge,
    transformer_transducer, and the tiny test models;
  * TASO `.model` file (read with eqsat_nb.ir.taso_model): inceptionv3 (`inceptionv3.model`),
    squeezenet (`squeezenet.model`), vgg19 (`vgg.model`), mobilenetv2 (`mobilenetv2.model`).
    `--taso-dir` locates them (default: ../shared/reference/taso_models beside the repository).

Notes and deviations:
  * BERT returns its 9 outputs (the 8 per-layer attention outputs, then the last layer's `next`)
    from `return`; TENSAT joins them with 8 `noop`s instead. MODELS.md's 113 compute ops exclude
    those noops (48 + 32 + 32 + 1 = 113, which is also bts.model's count), so ours is 113 too.
  * NasNet-A follows TASO's nasnet_a.py: every round of 5 normal cells starts with prev = cur =
    the round's input, so `fit` always finds equal spatial sizes and its strided 3x3 branch is
    never taken (nasnet_a.model has no such conv either). Equal to nasnet_a.model up to names.
  * ViT: batch 1 is folded away, tokens are rows of a [T, d] matrix (our matmul has no implicit
    batch broadcasting). Patch embedding = conv p x p / p VALID, reshape [d, n*n], transpose,
    + conv bias; a class-token weight [1, d] is concatenated in front (axis 0) and a learned
    position embedding [T, d] added. Pre-norm layers x + MHA(LN(x)), x + MLP(LN(x)) with
    separate q/k/v projections, biases added as ewadd(y, broadcast(b)), attention per head as
    softmax(scale(q·kᵀ, 1/sqrt(d_h)))·v through reshape/transpose and batched matmul, MLP =
    matmul -> GELU -> matmul. Final LN; no classifier head. Output [T, d].
  * Transformer-Transducer: inputs are the already-embedded audio frames [128, 512] and label
    embeddings [32, 512] (no audio front end, no embedding lookup: the IR has no gather).
    Encoder layers are the ViT layer with a ReLU FFN; no relative position encoding and no
    attention masks (both only change constants). Each encoder ends with a LN. Joint network:
    linear(512) on each side, reshape to [F,1,J] / [1,U,J], broadcast both to [F,U,J], ewadd,
    tanh, reshape [F*U, J], linear to the 4096-word vocabulary, reshape [F, U, V].
"""
from __future__ import annotations

import argparse
import sys
from math import sqrt
from pathlib import Path
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

from eqsat_nb.ir.builder import GraphBuilder  # noqa: E402
from eqsat_nb.ir.graph import Graph  # noqa: E402
from eqsat_nb.ir.printer import print_graph  # noqa: E402
from eqsat_nb.ir.taso_model import load_taso_model  # noqa: E402

DEFAULT_TASO_DIR = REPO.parent / "shared" / "reference" / "taso_models"


class Net:
    """GraphBuilder plus layer helpers that declare their own weights, so recipes read like the
    spec. Weights are declared right before their first use."""

    def __init__(self, name: str) -> None:
        self.b = GraphBuilder(name)

    def input(self, shape: Sequence[int], name: str) -> str:
        return self.b.input(shape, name=name)

    def weight(self, shape: Sequence[int], name: str) -> str:
        return self.b.weight(shape, name)

    def op(self, op: str, *args: str, **attrs) -> str:
        return self.b.op(op, *args, **attrs)

    def shape(self, value: str) -> tuple[int, ...]:
        return self.b.shape(value)

    def conv(self, x: str, oc: int, k: int | tuple[int, int], name: str, stride: int = 1,
             pad: str = "same", act: str = "none", groups: int = 1) -> str:
        kh, kw = (k, k) if isinstance(k, int) else k
        w = self.weight((oc, self.shape(x)[1] // groups, kh, kw), name)
        return self.op("conv2d", x, w, stride=[stride, stride], pad=pad, act=act)

    def pool(self, kind: str, x: str, k: int, stride: int, pad: str = "same") -> str:
        return self.op(kind, x, kernel=[k, k], stride=[stride, stride], pad=pad)

    def build(self, *outputs: str) -> Graph:
        return self.b.build(*outputs)


# ------------------------------------------------------------------------------ CNN recipes

def _bottleneck(net: Net, x: str, mid: int, out: int, stride: int, groups: int,
                name: str) -> str:
    """ResNet/ResNeXt block of TASO's examples: 1x1 RELU, 3x3 (grouped, strided) RELU, 1x1;
    projection 1x1 with RELU (a TASO quirk, kept) when the shape changes; relu(shortcut + t)."""
    t = net.conv(x, mid, 1, f"{name}_conv1_w", act="relu")
    t = net.conv(t, mid, 3, f"{name}_conv2_w", stride=stride, act="relu", groups=groups)
    t = net.conv(t, out, 1, f"{name}_conv3_w")
    if stride > 1 or net.shape(x)[1] != out:
        x = net.conv(x, out, 1, f"{name}_proj_w", stride=stride, act="relu")
    return net.op("relu", net.op("ewadd", x, t))


def _stages(net: Net, x: str, width: int, blocks: Sequence[int], expansion: int,
            groups: int) -> str:
    for s, n in enumerate(blocks):
        oc = width * 2 ** s
        for i in range(n):
            stride = 2 if s > 0 and i == 0 else 1
            x = _bottleneck(net, x, oc, expansion * oc, stride, groups, f"s{s + 1}b{i + 1}")
    return x


def resnet50(hw: int = 56, width: int = 64, blocks: Sequence[int] = (3, 4, 6, 3)) -> Graph:
    """ResNet-50 without stem and head: input [1, width, hw, hw] -> [1, 32*width, hw/8, hw/8]."""
    net = Net("resnet50")
    x = net.input((1, width, hw, hw), "input")
    return net.build(_stages(net, x, width, blocks, expansion=4, groups=1))


def resnext50(hw: int = 224, stem: int = 64, width: int = 128, groups: int = 32,
              blocks: Sequence[int] = (3, 4, 6, 3)) -> Graph:
    """ResNeXt-50 (32 groups), stem conv 7x7/2 + maxpool 3x3/2, no head."""
    net = Net("resnext50")
    x = net.input((1, 3, hw, hw), "input")
    x = net.conv(x, stem, 7, "stem_conv_w", stride=2, act="relu")
    x = net.pool("poolmax", x, 3, 2)
    return net.build(_stages(net, x, width, blocks, expansion=2, groups=groups))


# ------------------------------------------------------------------------------ NasNet-A

def _squeeze(net: Net, x: str, oc: int, name: str) -> str:
    return net.conv(x, oc, 1, name, act="relu")


def _fit(net: Net, cur: str, x: str, name: str) -> str:
    oc = net.shape(cur)[1]
    if net.shape(x)[2] == net.shape(cur)[2]:
        return _squeeze(net, x, oc, name)
    return net.conv(x, oc, 3, name, stride=2, act="relu")


def _sep(net: Net, x: str, oc: int, k: int, stride: int, name: str) -> str:
    """'Separable' conv of TASO's NasNet: k x k with weight [oc, C/oc, k, k], then 1x1."""
    assert net.shape(x)[1] % oc == 0, (net.shape(x), oc)
    t = net.conv(x, oc, k, f"{name}_dw", stride=stride, groups=oc)
    return net.conv(t, oc, 1, f"{name}_pw")


def _normal_cell(net: Net, prev: str, cur: str, oc: int, name: str) -> str:
    cur = _squeeze(net, cur, oc, f"{name}_squeeze_w")
    prev = _fit(net, cur, prev, f"{name}_fit_w")
    sep3 = lambda x, tag: _sep(net, x, oc, 3, 1, f"{name}_{tag}")  # noqa: E731
    avg3 = lambda x: net.pool("poolavg", x, 3, 1)  # noqa: E731
    ts = [sep3(cur, "b0_sep3"), cur,
          sep3(prev, "b1_sep3a"), sep3(cur, "b1_sep3b"),
          avg3(cur), prev,
          avg3(prev), avg3(prev),
          sep3(prev, "b4_sep3a"), sep3(prev, "b4_sep3b")]
    outs = [net.op("ewadd", ts[2 * i], ts[2 * i + 1]) for i in range(5)]
    return net.op("concat", *outs, axis=1)


def _reduction_cell(net: Net, prev: str, cur: str, oc: int, name: str) -> str:
    cur = _squeeze(net, cur, oc, f"{name}_squeeze_w")
    prev = _fit(net, cur, prev, f"{name}_fit_w")
    sep = lambda x, k, s, tag: _sep(net, x, oc, k, s, f"{name}_{tag}")  # noqa: E731
    add = lambda a, b: net.op("ewadd", a, b)  # noqa: E731
    o0 = add(sep(prev, 7, 2, "b0_sep7"), sep(cur, 5, 2, "b0_sep5"))
    o1 = add(net.pool("poolmax", cur, 3, 2), sep(prev, 7, 2, "b1_sep7"))
    o2 = add(net.pool("poolavg", cur, 3, 2), sep(prev, 5, 2, "b2_sep5"))
    o3 = add(net.pool("poolmax", cur, 3, 2), sep(o0, 3, 1, "b3_sep3"))
    o4 = add(net.pool("poolavg", o0, 3, 1), o1)
    return net.op("concat", o0, o1, o2, o3, o4, axis=1)


def nasneta(hw: int = 224, stem: int = 64, oc: int = 128, normal: int = 5,
            rounds: int = 3) -> Graph:
    """NasNet-A as in TASO's nasnet_a.py: stem, then `rounds` x {`normal` normal cells, oc *= 2,
    one reduction cell}; each round starts with prev = cur = its input."""
    net = Net("nasneta")
    x = net.input((1, 3, hw, hw), "input")
    x = net.conv(x, stem, 7, "stem_conv_w", stride=2, act="relu")
    x = net.pool("poolmax", x, 3, 2)
    for r in range(rounds):
        prev = cur = x
        for j in range(normal):
            prev, cur = cur, _normal_cell(net, prev, cur, oc, f"r{r + 1}n{j + 1}")
        oc *= 2
        x = _reduction_cell(net, prev, cur, oc, f"r{r + 1}red")
    return net.build(x)


# ------------------------------------------------------------------------------ RNN / BERT

def nasrnn(hidden: int = 512, steps: int = 5) -> Graph:
    """NasRNN of TASO's nasrnn.py: `steps` inputs [1, hidden]; the initial state is a weight."""
    net = Net("nasrnn")
    xs = [net.input((1, hidden), f"x{t}") for t in range(steps)]
    state = net.weight((1, hidden), "h0")
    for t, x in enumerate(xs):
        state = _nas_cell(net, state, x, hidden, f"c{t + 1}")
    return net.build(state)


def _nas_cell(net: Net, h: str, x: str, hidden: int, name: str) -> str:
    def combine(i: int) -> str:
        a = net.op("matmul", x, net.weight((hidden, hidden), f"{name}_t{i}_wx"))
        b = net.op("matmul", h, net.weight((hidden, hidden), f"{name}_t{i}_wh"))
        return net.op("ewadd", a, b)

    t = [combine(i) for i in range(8)]
    f = lambda op, v: net.op(op, v)  # noqa: E731
    m0 = net.op("ewadd", f("relu", t[0]), f("sigmoid", t[3]))
    m1 = net.op("ewadd", f("sigmoid", t[1]), f("tanh", t[2]))
    m2 = net.op("ewmul", f("sigmoid", t[4]), f("tanh", t[5]))
    m3 = net.op("ewmul", f("sigmoid", t[6]), f("relu", t[7]))
    m4 = net.op("ewadd", f("sigmoid", m1), f("tanh", m2))
    m5 = net.op("ewmul", f("tanh", m0), f("tanh", m3))
    m6 = net.op("ewmul", f("tanh", m4), f("tanh", m5))
    return f("tanh", m6)


def bert(seq: int = 64, hidden: int = 1024, heads: int = 16, layers: int = 8) -> Graph:
    """TASO's bert.py: per layer q, k, v projections, per-head q·k (not q·kᵀ) and ·v, no
    softmax; the next layer reads matmul(x, Wlin), so each attention output is a side output.
    q·k of [heads, seq, dh] operands needs seq == dh = hidden / heads (64 = 1024 / 16)."""
    dh = hidden // heads
    if seq != dh:
        raise ValueError(f"bert needs seq == hidden / heads for q·k, got {seq} and {dh}")
    net = Net("bert")
    x = net.op("relu", net.input((seq, hidden), "input"))
    side = []
    for i in range(layers):
        name = f"l{i + 1}"
        w = [net.weight((hidden, hidden), f"{name}_w{p}") for p in "qkv"]
        q, k, v = (net.op("matmul", x, wi) for wi in w)
        q, k, v = (net.op("reshape", t, shape=[seq, heads, dh]) for t in (q, k, v))
        q, k, v = (net.op("transpose", t, perm=[1, 0, 2]) for t in (q, k, v))
        out = net.op("matmul", net.op("matmul", q, k), v)
        out = net.op("reshape", net.op("transpose", out, perm=[1, 0, 2]), shape=[seq, hidden])
        side.append(out)
        x = net.op("matmul", x, net.weight((hidden, hidden), f"{name}_wlin"))
    return net.build(*side, x)


# ------------------------------------------------------------------------------ transformers

def _linear(net: Net, x: str, n_out: int, name: str) -> str:
    rows, d = net.shape(x)
    y = net.op("matmul", x, net.weight((d, n_out), f"{name}_w"))
    b = net.op("broadcast", net.weight((n_out,), f"{name}_b"), shape=[rows, n_out])
    return net.op("ewadd", y, b)


def _layernorm(net: Net, x: str, name: str) -> str:
    d = net.shape(x)[-1]
    return net.op("layernorm", x, net.weight((d,), f"{name}_g"), net.weight((d,), f"{name}_b"))


def _heads(net: Net, x: str, heads: int, perm: list[int]) -> str:
    t, d = net.shape(x)
    return net.op("transpose", net.op("reshape", x, shape=[t, heads, d // heads]), perm=perm)


def _attention(net: Net, x: str, heads: int, name: str) -> str:
    """softmax(q·kᵀ/sqrt(d_h))·v per head, then the output projection."""
    t, d = net.shape(x)
    q = _heads(net, _linear(net, x, d, f"{name}_q"), heads, [1, 0, 2])   # [H, T, dh]
    k = _heads(net, _linear(net, x, d, f"{name}_k"), heads, [1, 2, 0])   # [H, dh, T]
    v = _heads(net, _linear(net, x, d, f"{name}_v"), heads, [1, 0, 2])   # [H, T, dh]
    s = net.op("scale", net.op("matmul", q, k), value=1 / sqrt(d // heads))
    o = net.op("matmul", net.op("softmax", s, axis=-1), v)
    o = net.op("reshape", net.op("transpose", o, perm=[1, 0, 2]), shape=[t, d])
    return _linear(net, o, d, f"{name}_o")


def _encoder_layer(net: Net, x: str, heads: int, ffn: int, act: str, name: str) -> str:
    """Pre-norm transformer layer: x + MHA(LN(x)), x + FFN(LN(x))."""
    d = net.shape(x)[-1]
    x = net.op("ewadd", x, _attention(net, _layernorm(net, x, f"{name}_ln1"), heads,
                                      f"{name}_attn"))
    h = net.op(act, _linear(net, _layernorm(net, x, f"{name}_ln2"), ffn, f"{name}_fc1"))
    return net.op("ewadd", x, _linear(net, h, d, f"{name}_fc2"))


def vit(name: str = "vit", image: int = 224, patch: int = 16, dim: int = 768, layers: int = 12,
        heads: int = 12, mlp: int = 3072, channels: int = 3) -> Graph:
    """Vision Transformer; output [tokens, dim] after the final LN (see the module docstring)."""
    net = Net(name)
    n = image // patch
    x = net.input((1, channels, image, image), "input")
    x = net.conv(x, dim, patch, "patch_w", stride=patch, pad="valid")
    x = net.op("transpose", net.op("reshape", x, shape=[dim, n * n]), perm=[1, 0])
    x = net.op("ewadd", x, net.op("broadcast", net.weight((dim,), "patch_b"), shape=[n * n, dim]))
    x = net.op("concat", net.weight((1, dim), "cls_token"), x, axis=0)
    x = net.op("ewadd", x, net.weight((n * n + 1, dim), "pos_embed"))
    for i in range(layers):
        x = _encoder_layer(net, x, heads, mlp, "gelu", f"l{i + 1}")
    return net.build(_layernorm(net, x, "final_ln"))


def vit_base(**sizes) -> Graph:
    """ViT-B/16: 12 layers, d=768, 12 heads, MLP 3072."""
    return vit(**{"name": "vit_base", **sizes})


def vit_large(**sizes) -> Graph:
    """ViT-L/16: 24 layers, d=1024, 16 heads, MLP 4096."""
    return vit(**{"name": "vit_large", "dim": 1024, "layers": 24, "heads": 16, "mlp": 4096,
                  **sizes})


def vit_huge(**sizes) -> Graph:
    """ViT-H/14: 32 layers, d=1280, 16 heads, MLP 5120, 256 + 1 tokens."""
    return vit(**{"name": "vit_huge", "patch": 14, "dim": 1280, "layers": 32, "heads": 16,
                  "mlp": 5120, **sizes})


def transformer_transducer(frames: int = 128, tokens: int = 32, dim: int = 512, heads: int = 8,
                           ffn: int = 2048, audio_layers: int = 18, label_layers: int = 2,
                           joint: int = 512, vocab: int = 4096) -> Graph:
    """Transformer-Transducer (Zhang et al. 2020), our fixed instance; output [F, U, vocab]."""
    net = Net("transformer_transducer")
    enc = net.input((frames, dim), "audio")
    pred = net.input((tokens, dim), "labels")
    for i in range(audio_layers):
        enc = _encoder_layer(net, enc, heads, ffn, "relu", f"audio{i + 1}")
    enc = _layernorm(net, enc, "audio_ln")
    for i in range(label_layers):
        pred = _encoder_layer(net, pred, heads, ffn, "relu", f"label{i + 1}")
    pred = _layernorm(net, pred, "label_ln")
    a = net.op("reshape", _linear(net, enc, joint, "joint_audio"), shape=[frames, 1, joint])
    b = net.op("reshape", _linear(net, pred, joint, "joint_label"), shape=[1, tokens, joint])
    grid = [frames, tokens, joint]
    z = net.op("tanh", net.op("ewadd", net.op("broadcast", a, shape=grid),
                              net.op("broadcast", b, shape=grid)))
    z = _linear(net, net.op("reshape", z, shape=[frames * tokens, joint]), vocab, "joint_out")
    return net.build(net.op("reshape", z, shape=[frames, tokens, vocab]))


# ------------------------------------------------------------------------------ tiny models

def tiny_mlp(batch: int = 4, d_in: int = 16, hidden: int = 32, d_out: int = 8) -> Graph:
    """matmul+relu, split in two halves, a matmul per half, ewadd, tanh."""
    net = Net("tiny_mlp")
    x = net.input((batch, d_in), "input")
    h = net.op("matmul", x, net.weight((d_in, hidden), "fc1_w"), act="relu")
    a, b = net.op("split", h, axis=1, sizes=[hidden // 2, hidden - hidden // 2])
    ya = net.op("matmul", a, net.weight((hidden // 2, d_out), "fc2a_w"))
    yb = net.op("matmul", b, net.weight((hidden - hidden // 2, d_out), "fc2b_w"))
    return net.build(net.op("tanh", net.op("ewadd", ya, yb)))


def tiny_conv(hw: int = 8, c_in: int = 4, c: int = 8) -> Graph:
    """A residual block: conv3x3 relu, conv1x1, 1x1 projection, add, relu, maxpool."""
    net = Net("tiny_conv")
    x = net.input((1, c_in, hw, hw), "input")
    t = net.conv(x, c, 3, "conv1_w", act="relu")
    t = net.conv(t, c, 1, "conv2_w")
    s = net.conv(x, c, 1, "proj_w")
    y = net.op("relu", net.op("ewadd", t, s))
    return net.build(net.pool("poolmax", y, 2, 2, pad="valid"))


def tiny_branches(hw: int = 8, c: int = 8) -> Graph:
    """Inception-like: 1x1 and 3x3 convs of one input plus an avgpool, concat, split, add;
    the avgpool is also returned (two outputs)."""
    net = Net("tiny_branches")
    x = net.input((1, c, hw, hw), "input")
    b1 = net.conv(x, c // 2, 1, "b1_conv_w", act="relu")
    b2 = net.conv(x, c // 2, 3, "b2_conv_w", act="relu")
    b3 = net.pool("poolavg", x, 3, 1)
    cat = net.op("concat", b1, b2, b3, axis=1)
    lo, hi = net.op("split", cat, axis=1, sizes=[c, c])
    return net.build(net.op("sigmoid", net.op("ewadd", lo, hi)), b3)


# ------------------------------------------------------------------------------ TASO files

def _taso(file: str, name: str, taso_dir: str | Path | None) -> Graph:
    return load_taso_model(Path(taso_dir or DEFAULT_TASO_DIR) / file, name=name)


def inceptionv3(taso_dir: str | Path | None = None) -> Graph:
    """Inception-v3 from TASO's inceptionv3.model (every conv fused ReLU)."""
    return _taso("inceptionv3.model", "inceptionv3", taso_dir)


def squeezenet(taso_dir: str | Path | None = None) -> Graph:
    """SqueezeNet 1.1 from TASO's squeezenet.model."""
    return _taso("squeezenet.model", "squeezenet", taso_dir)


def vgg19(taso_dir: str | Path | None = None) -> Graph:
    """VGG-19 from TASO's vgg.model."""
    return _taso("vgg.model", "vgg19", taso_dir)


def mobilenetv2(taso_dir: str | Path | None = None) -> Graph:
    """MobileNet-v2 from TASO's mobilenetv2.model (ONNX-zoo mobilenetv2-7)."""
    return _taso("mobilenetv2.model", "mobilenetv2", taso_dir)


RECIPES: dict[str, Callable[..., Graph]] = {
    "resnet50": resnet50, "resnext50": resnext50, "nasrnn": nasrnn, "bert": bert,
    "nasneta": nasneta, "vit_base": vit_base, "vit_large": vit_large, "vit_huge": vit_huge,
    "transformer_transducer": transformer_transducer,
    "tiny_mlp": tiny_mlp, "tiny_conv": tiny_conv, "tiny_branches": tiny_branches,
}
TASO_FILE_MODELS: dict[str, Callable[..., Graph]] = {
    "inceptionv3": inceptionv3, "squeezenet": squeezenet, "vgg19": vgg19,
    "mobilenetv2": mobilenetv2,
}
MODELS: dict[str, Callable[..., Graph]] = {**RECIPES, **TASO_FILE_MODELS}


def build(name: str, taso_dir: str | Path | None = None) -> Graph:
    """The default (published-size) build of model `name`."""
    if name in TASO_FILE_MODELS:
        return TASO_FILE_MODELS[name](taso_dir)
    return RECIPES[name]()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "ir_examples"), help="output folder")
    p.add_argument("--taso-dir", default=str(DEFAULT_TASO_DIR),
                   help="folder with TASO's .model files")
    p.add_argument("--only", nargs="+", choices=sorted(MODELS), metavar="NAME",
                   help="generate only these models")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only or MODELS:
        graph = build(name, args.taso_dir)
        (out / f"{name}.tir").write_text(print_graph(graph))
        ops = sum(1 for _ in graph.compute_nodes())
        print(f"{out / f'{name}.tir'}: {ops} compute ops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
