"""Small shape arithmetic shared by shape functions, the interpreter and cost models."""
from __future__ import annotations

from math import ceil

Padding = str | tuple[int, int, int, int]


def window_pads(size: int, kernel: int, stride: int, pad: str | tuple[int, int]) -> tuple[int, int]:
    """Padding (before, after) of one spatial axis.

    SAME gives `ceil(size / stride)` outputs with the odd extra pixel of padding after, as
    TensorFlow and ONNX's SAME_UPPER do (TASO's output size is the same, but it pads
    ceil(total/2) on both sides); VALID pads nothing.
    """
    if pad == "valid":
        return 0, 0
    if pad == "same":
        out = ceil(size / stride)
        total = max((out - 1) * stride + kernel - size, 0)
        return total // 2, total - total // 2
    return int(pad[0]), int(pad[1])


def window_out(size: int, kernel: int, stride: int, pad: str | tuple[int, int]) -> int:
    """Output length of a sliding window (conv or pool) along one axis."""
    before, after = window_pads(size, kernel, stride, pad)
    return (size + before + after - kernel) // stride + 1


def spatial_pads(hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                 pad: Padding) -> tuple[tuple[int, int], tuple[int, int]]:
    """((top, bottom), (left, right)) for a 2-D window; explicit pads are [top, left, bottom, right]."""
    if isinstance(pad, str):
        return (window_pads(hw[0], kernel[0], stride[0], pad),
                window_pads(hw[1], kernel[1], stride[1], pad))
    return (pad[0], pad[2]), (pad[1], pad[3])


def spatial_out(hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                pad: Padding) -> tuple[int, int]:
    return padded_out(hw, spatial_pads(hw, kernel, stride, pad), kernel, stride)


def padded_out(hw: tuple[int, int], pads: tuple[tuple[int, int], tuple[int, int]],
               kernel: tuple[int, int], stride: tuple[int, int]) -> tuple[int, int]:
    """Output (height, width) of a 2-D window over `hw` padded by ((top, bottom), (left, right))."""
    (t, b), (l, r) = pads
    return ((hw[0] + t + b - kernel[0]) // stride[0] + 1,
            (hw[1] + l + r - kernel[1]) // stride[1] + 1)


def normalize_axis(axis: int, rank: int) -> int:
    """Map a possibly negative axis into [0, rank); raises ValueError when out of range."""
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis % rank
