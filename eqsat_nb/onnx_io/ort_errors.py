"""onnxruntime's error messages made readable and located: the node first, the C++ source
locations and status prefixes out. Used wherever onnxruntime's refusal is reported."""
from __future__ import annotations

import re

def ort_message(e: BaseException | str) -> str:
    """onnxruntime's message without its status prefix and C++ source location."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"/onnxruntime_src/\S+:\d+ .*?\) (?=[A-Z]|status)", "", text)
    text = re.sub(r"/onnxruntime_src/.*? was false\. ", "", text)    # ORT_ENFORCE's form
    text = re.sub(r"status\.IsOK\(\) was false\. |\b\w+\.(cc|h):\d+ ", "", text)
    text = re.sub(r"^Load model from .*? failed:", "", text)
    return " ".join(text.split())[:600]


def _untagged(text: str) -> str:
    """A message without its leading "[ShapeInferenceError]"-style tags."""
    return re.sub(r"^(\[\w+\]\s*)+", "", text.strip()).strip()


def _label(name: str, op: str, opset: int | None = None) -> str:
    """How errors name a node: "node 'conv0' (Conv, opset 17)", or "Conv node" unnamed."""
    where = f", opset {opset}" if opset else ""
    if name:
        return f"node '{name}' ({op}{where})"
    return f"{op} node (opset {opset})" if opset else f"{op} node"


_ORT_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)' Status Message: (.*)", re.S)
_ORT_LOAD = re.compile(r"Node \(([^)]*)\) Op \((\w+)\) (.*)", re.S)
_ORT_KERNEL = re.compile(r"(Could not find an implementation for (\w+)\(\d+\) node with name "
                         r"'([^']*)'.*)", re.S)


def ort_located(e: BaseException) -> str:
    """onnxruntime's message with the node it names first: "node 'n' (Op): what"."""
    text = ort_message(e)
    m = _ORT_NODE.search(text)
    if m:
        return f"{_label(m.group(2), m.group(1))}: {_untagged(m.group(3))}"
    m = _ORT_LOAD.search(text)
    if m:
        return f"{_label(m.group(1), m.group(2))}: {_untagged(m.group(3))}"
    m = _ORT_KERNEL.search(text)
    if m:
        return f"{_label(m.group(3), m.group(2))}: {m.group(1)} (no kernel for these types)"
    return text
