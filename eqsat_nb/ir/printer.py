"""Graph → text, in the canonical form: attributes in schema order, defaults left out, result
types always written. `print_graph(parse(t))` is stable and `parse(print_graph(g)) == g`."""
from __future__ import annotations


from .graph import Graph, Node
from .literal import format_literal
from .ops import REQUIRED, op_def


format_value = format_literal


def format_attrs(node: Node) -> str:
    """`{k = v, ...}` for the attributes that differ from their defaults ('' when none)."""
    opdef = op_def(node.op)
    parts = []
    for name, value in node.attrs:
        spec = opdef.attr_spec(name)
        if spec.default is not REQUIRED and spec.default == value:
            continue
        parts.append(f"{name} = {format_value(value)}")
    return " {" + ", ".join(parts) + "}" if parts else ""


def format_node(node: Node) -> str:
    results = ", ".join(node.results)
    if node.op == "weight":
        return f"{results} = weight @{node.attr['name']} : {node.types[0]}"
    types = ", ".join(str(t) for t in node.types)
    return f"{results} = {node.op}({', '.join(node.inputs)}){format_attrs(node)} : {types}"


def print_graph(graph: Graph) -> str:
    args = ", ".join(f"{name}: {ty}" for name, ty in graph.inputs)
    outs = graph.output_types()
    ret = str(outs[0]) if len(outs) == 1 else "(" + ", ".join(map(str, outs)) + ")"
    lines = [f"func @{graph.name}({args}) -> {ret} {{"]
    lines += [f"  {format_node(n)}" for n in graph.nodes]
    lines.append(f"  return {', '.join(graph.outputs)}")
    lines.append("}")
    return "\n".join(lines) + "\n"
