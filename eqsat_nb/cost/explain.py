"""Why an extraction won: the cost differences between the original and the optimized graph.

Both graphs are read back into the final e-graph (every node of either is there, hash-consed):
a node is the same in both when it is the same e-node (operator, attributes and operand
e-classes). The nodes only the original has and those only the optimized graph has are grouped
into connected changes through the e-classes they compute and read (a merged matmul, its split
and the three matmuls it replaced are one change, since each replaced matmul's class is now read
through the split). Each change is priced node by node with the cost model (the same prices
`graph_cost` sums, so the changes add up to the whole difference) and named by the profile rules
that priced its nodes, e.g.

    merged 3 matmul into 1 (+ split): 64.3 -> 47.6 us [matmul: 3 x 2 GEMM waves -> 5 GEMM
    waves; split: a view, 0 us]

Identical changes (same operators removed and added, same rules) are reported once with a count.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..ir.graph import Graph
from ..ir.ops import OPS
from .model import CostModel, OpSignature, graph_node_signatures


@dataclass
class Change:
    """One connected rewrite (or `count` identical ones): what went, what came, what it cost."""

    removed: Counter                  # op -> nodes of the original that cost something
    added: Counter                    # op -> nodes of the optimized graph that cost something
    before_us: float                  # cost of the removed nodes (all `count` changes)
    after_us: float                   # cost of the added nodes
    rules_before: Counter = field(default_factory=Counter)   # profile rule -> removed nodes
    rules_after: Counter = field(default_factory=Counter)    # profile rule -> added nodes
    count: int = 1

    @property
    def saved_us(self) -> float:
        return self.before_us - self.after_us

    def summary(self) -> str:
        """e.g. 'merged 3 matmul into 1 (+ split), 5 times: 321.5 -> 269.5 us [split: a view,
        0 us]' (the costs are those of all `count` changes together)."""
        times = f", {self.count} times" if self.count > 1 else ""
        text = f"{_describe(self.removed, self.added)}{times}: {self.before_us:.1f} -> " \
               f"{self.after_us:.1f} us"
        rules = self.rules()
        return text + (f" [{'; '.join(rules)}]" if rules else "")

    def rules(self) -> list[str]:
        """The profile rules behind the change, one per operator: 'split: a view, 0 us',
        'matmul: 3 x 2 GEMM waves -> 5 GEMM waves', 'conv2d: 32 groups x 1.77 us -> 4 ...'."""
        def by_op(c: Counter) -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            for rule, n in sorted(c.items()):
                op, _, what = rule.partition(": ")
                n //= self.count          # identical changes share their rule counts
                out.setdefault(op, []).append(what if n == 1 else f"{n} x {what}")
            return out
        old, new = by_op(self.rules_before), by_op(self.rules_after)
        lines = []
        for op in list(new) + [o for o in old if o not in new]:
            if old.get(op) == new.get(op):
                continue            # priced the same way on both sides: not what decided it
            if op in old and op in new:
                lines.append(f"{op}: {' + '.join(old[op])} -> {' + '.join(new[op])}")
            elif op in new:
                lines.append(f"{op}: {' + '.join(new[op])}")
            else:
                lines.append(f"{op}: {' + '.join(old[op])} -> none")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "count": self.count,
                "removed": dict(sorted(self.removed.items())),
                "added": dict(sorted(self.added.items())),
                "before_us": self.before_us, "after_us": self.after_us,
                "rules": self.rules()}


def explain_changes(eg, original: Graph, optimized: Graph, model: CostModel) -> list[Change]:
    """The changes from `original` to `optimized` (both extracted from `eg`), largest saving
    first; [] when a node of either graph is not in `eg` (nothing to compare against)."""
    a = _graph_nodes(eg, original, model)
    b = _graph_nodes(eg, optimized, model)
    if a is None or b is None:
        return []
    keys_a, keys_b = Counter(n.key for n in a), Counter(n.key for n in b)
    removed = _only(a, keys_a - keys_b)
    added = _only(b, keys_b - keys_a)
    changed_nodes = removed + added
    if not changed_nodes:
        return []
    explain = getattr(model, "explain", None)
    if explain is not None:         # only the changed nodes' rules are reported
        for n in changed_nodes:
            n.rule = explain(n.sig) if n.sig is not None else ""
    changed = {c for n in changed_nodes for c in n.outs}
    parent = {c: c for c in changed}

    def find(c: int) -> int:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for n in changed_nodes:
        root = find(n.outs[0])
        for c in list(n.outs[1:]) + [x for x in n.ins if x in changed and not n.const_ins.get(x)]:
            parent[find(c)] = root

    groups: dict[int, list[tuple[bool, _GNode]]] = {}
    for n in removed:
        groups.setdefault(find(n.outs[0]), []).append((False, n))
    for n in added:
        groups.setdefault(find(n.outs[0]), []).append((True, n))

    merged: dict[tuple, Change] = {}
    for members in groups.values():
        gone, came, r_gone, r_came = Counter(), Counter(), Counter(), Counter()
        before = after = 0.0
        for is_new, n in members:
            if n.sig is None:
                continue
            cost = model.cost(n.sig)
            if cost <= 0 and not n.rule:
                continue
            (came if is_new else gone)[_label(n.sig)] += 1
            if is_new:
                after += cost
            else:
                before += cost
            if n.rule:
                (r_came if is_new else r_gone)[n.rule] += 1
        if not gone and not came:
            continue
        one = Change(gone, came, before, after, r_gone, r_came)
        key = (tuple(sorted(gone.items())), tuple(sorted(came.items())), tuple(one.rules()))
        if key in merged:
            ch = merged[key]
            ch.before_us += before
            ch.after_us += after
            ch.count += 1
            for mine, theirs in ((ch.rules_before, r_gone), (ch.rules_after, r_came)):
                mine.update(theirs)
        else:
            merged[key] = one
    return sorted(merged.values(), key=lambda c: (-abs(c.saved_us), c.summary()))


# ------------------------------------------------------------------ internals
@dataclass
class _GNode:
    key: tuple                  # the e-node: (op, payload, canonical children)
    outs: tuple[int, ...]       # e-classes it defines (a split: its tuple and result classes)
    ins: tuple[int, ...]        # operand e-classes
    const_ins: dict[int, bool]  # operand class -> weight-only
    sig: OpSignature | None     # None: free or weight-only (costs nothing)
    rule: str = ""              # the profile rule that priced it (changed nodes only)


def _only(nodes: list[_GNode], keys: Counter) -> list[_GNode]:
    left = Counter(keys)
    out = []
    for n in nodes:
        if left[n.key] > 0:
            left[n.key] -= 1
            out.append(n)
    return out


def _graph_nodes(eg, graph: Graph, model: CostModel) -> list[_GNode] | None:
    """Every node of `graph` as its e-node in `eg` (None when one is missing)."""
    from ..egraph.convert import opaque_key
    from ..egraph.store import EOP_IDS

    value: dict[str, int] = {}
    lits: dict[tuple[str, Any], int] = {}

    def lit(v: Any) -> int:
        k = (type(v).__name__, v)
        if k not in lits:
            lits[k] = eg.lookup_literal(v)
        return lits[k]

    def node_key(op: str, children: list[int], payload: int = -1) -> tuple[tuple, int]:
        canon = [eg.find(c) if c >= 0 else c for c in children]
        return (EOP_IDS[op], payload, tuple(canon)), eg.lookup(op, canon, payload)

    for name, ty in graph.inputs:
        _, c = node_key("input", [lit(name[1:]), lit(ty.shape), lit(ty.dtype)])
        if c < 0:
            return None
        value[name] = c
    sigs = dict(graph_node_signatures(graph))
    out: list[_GNode] = []
    for k, node in enumerate(graph.nodes):
        ins = [value[v] for v in node.inputs]
        if node.op == "opaque":
            children, payload = ins, eg.lits.literal(opaque_key(node))
        else:
            children, payload = [lit(v) for _, v in node.attrs] + ins, -1
        if any(c < 0 for c in children):
            return None
        key, c = node_key(node.op, children, payload)
        if c < 0:
            return None
        multi = len(node.results) > 1 or (node.op != "opaque" and OPS[node.op].multi_result)
        if multi:
            outs = [c]
            for i, r in enumerate(node.results):
                pc = eg.lookup("proj", [lit(i), c])
                if pc < 0:
                    return None
                value[r] = pc
                outs.append(pc)
        else:
            value[node.results[0]] = c
            outs = [c]
        out.append(_GNode(key, tuple(outs), tuple(ins),
                          {x: eg.is_const(x) for x in ins}, sigs.get(k)))
    return out


def _label(sig: OpSignature) -> str:
    """An operator as a change names it: grouped convs with their groups."""
    if sig.op == "conv2d" and len(sig.inputs) > 1:
        c, cg = sig.inputs[0].shape[1], sig.inputs[1].shape[1]
        if cg and c != cg:
            return "depthwise conv2d" if cg == 1 else f"conv2d/{c // cg}g"
    return sig.op


def _plural(n: int, op: str) -> str:
    return op if n == 1 else f"{n} {op}"


def _describe(gone: Counter, came: Counter) -> str:
    """'merged 3 matmul into 1 (+ split)', 'merged groups: conv2d/32g -> conv2d/4g',
    'folded relu into conv2d', 'rewrote 2 matmul', 'removed relu'."""
    common = [op for op in gone if op in came and came[op] < gone[op]]
    if common:
        op = max(common, key=lambda o: gone[o])
        extra = came - Counter({op: came[op]})
        left = gone - Counter({op: gone[op]})
        parts = ["+ " + ", ".join(_plural(n, o) for o, n in sorted(extra.items()))
                 ] if extra else []
        if left:
            parts.append(", ".join(_plural(n, o) for o, n in sorted(left.items())) + " gone")
        return f"merged {gone[op]} {op} into {came[op]}" + (f" ({'; '.join(parts)})" if parts else "")

    def side(c: Counter) -> str:
        return " + ".join(_plural(n, o) for o, n in sorted(c.items())) or "(nothing)"
    if not came:
        return f"removed {side(gone)}"
    if came == gone:            # the same operators on other operands, e.g. reassociated
        return f"rewrote {side(gone)}"
    if not came - gone:         # fewer of the same operators, e.g. a relu fused into its conv
        return f"folded {side(gone - came)} into {side(came)}"
    convs = all(o.endswith("g") and o.startswith("conv2d/") or o == "depthwise conv2d"
                for o in list(gone) + list(came))
    return ("merged groups: " if convs else "") + f"{side(gone)} -> {side(came)}"
