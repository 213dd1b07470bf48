"""Rules applied directly to a Graph, greedily: how imported models meet their fused operators.

ONNX import maps nodes one to one, so an idiom an exporter spells out (GELU as Div/Erf/Add/Mul/
Mul, LayerNorm below opset 17, LlamaRMSNorm, SiLU) arrives as its primitive ops. `raise_idioms`
applies the rules of rules/idioms/idioms.rules to such a graph: wherever a rule's source pattern
matches and every value inside the match (all but its root) is used only inside it, the matched
nodes are replaced by the rule's target, which takes the root's result name. Roots are tried from
the graph's end back, so the largest idiom wins (LayerNorm over the RMSNorm of x - mean(x) inside
it). So the imported graph holds the fused op under the ONNX name of the idiom's last node, the
splicing writer gives back the model's own nodes for it where the optimizer left it alone, and
nothing outside the match changes. For an imported model the search adds the idiom rules that can
still match (`idioms_for_search`): there they also raise idioms whose inner values have other uses,
and extraction takes the fused op, which costs less than its parts.

Matching follows the e-graph's rules (rules/pattern.py): every attribute is part of the pattern (a
literal must be equal, a variable binds the value, an expression is a check), a variable used twice
must be the same value, conditions must hold. One difference, on purpose: the two operands of
`ewadd` and `ewmul` match in either order (ONNX's Add and Mul commute exactly, and exporters write
both orders), so a rule file need not spell each order out.
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Any, Iterator, Sequence

from ..errors import TirError
from ..ir.graph import Graph, Node
from ..ir.ops import infer_types, normalize_attrs, op_def
from .pattern import Expr, Lit, PNode, Pattern, Rule, Var
from .verify import _Undefined, cond_holds, eval_expr

COMMUTATIVE = frozenset({"ewadd", "ewmul"})
IDIOMS = ("idioms", "idioms.rules")      # rules/idioms/idioms.rules


@lru_cache(maxsize=1)
def idiom_rules() -> tuple[Rule, ...]:
    """The shipped idiom rules (rules/idioms/idioms.rules)."""
    from ..resources import data_dir
    from .parse import load_rules
    return tuple(load_rules(data_dir("rules").joinpath(*IDIOMS)))


def _ops(p: Pattern, out: set[str]) -> set[str]:
    if isinstance(p, PNode):
        out.add(p.op)
        for o in p.operands:
            _ops(o, out)
    return out


def idioms_for_search(graph: Graph, rules: Sequence[Rule]) -> list[Rule]:
    """The idiom rules the search should add to `rules` for `graph`: those whose source ops the
    graph holds or one of `rules` creates (an idiom left decomposed at import because an inner
    value has another use). None for a graph without an idiom's primitives, so the search over
    such a graph, and over every .tir benchmark, is the default rule set's alone."""
    have = {n.op for n in graph.nodes}
    for r in rules:
        for _, _, targets in r.directions():
            for t in targets:
                _ops(t, have)
    return [r for r in idiom_rules() if _ops(r.lhs[0], set()) <= have]


def _same(a: Any, b: Any) -> bool:
    """Literal equality as the e-graph interns literals: the kind counts (True is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            float(a) == float(b)
    return a == b


class _Matcher:
    """One rule's source pattern against the graph, from a root value."""

    def __init__(self, producer: dict[str, tuple[int, Node]], types: dict[str, Any]) -> None:
        self.producer = producer
        self.types = types

    def match(self, p: Pattern, value: str, env: dict[str, Any],
              seen: dict[int, tuple[int, Node]], checks: list[tuple[Expr, Any]]
              ) -> Iterator[tuple[dict, dict, list]]:
        """Every way `p` matches `value`: (bindings, the matched nodes as id -> (position,
        node), deferred attribute checks)."""
        if isinstance(p, Var):
            bound = env.get(p.name)
            if bound is None:
                yield {**env, p.name: value}, seen, checks
            elif bound == value:
                yield env, seen, checks
            return
        got = self.producer.get(value)
        if got is None or p.op == "proj":
            return
        index, node = got
        if node.op != p.op or len(node.inputs) != len(p.operands) or node.results[0] != value:
            return
        attrs = node.attr
        env = dict(env)
        checks = list(checks)
        for name, ap in p.attrs:
            v = attrs[name]
            if isinstance(ap, Lit):
                if not _same(ap.value, v):
                    return
            elif isinstance(ap, Var):
                if ap.name in env and not _same(env[ap.name], v):
                    return
                env[ap.name] = v
            else:
                checks.append((ap, v))
        seen = {**seen, id(node): (index, node)}
        orders = [p.operands]
        if p.op in COMMUTATIVE and len(p.operands) == 2 and p.operands[0] != p.operands[1]:
            orders.append(p.operands[::-1])
        for operands in orders:
            yield from self._operands(list(operands), list(node.inputs), env, seen, checks)

    def _operands(self, pats: list[Pattern], values: list[str], env: dict, seen: dict,
                  checks: list) -> Iterator[tuple[dict, dict, list]]:
        if not pats:
            yield env, seen, checks
            return
        for env2, seen2, checks2 in self.match(pats[0], values[0], env, seen, checks):
            yield from self._operands(pats[1:], values[1:], env2, seen2, checks2)


def _shape_env(env: dict[str, Any], tensor_vars: set[str], types: dict[str, Any]) -> dict:
    """Bindings as the rule expressions read them: a tensor variable is its value's shape."""
    return {k: (types[v].shape if k in tensor_vars else v) for k, v in env.items()}


def _tensor_vars(p: Pattern, out: set[str]) -> set[str]:
    if isinstance(p, Var):
        out.add(p.name)
    elif isinstance(p, PNode):
        for o in p.operands:
            _tensor_vars(o, out)
    return out


class _Rewriter:
    def __init__(self, graph: Graph, rules: Sequence[Rule]) -> None:
        self.graph = graph
        self.slots: list[list[Node]] = [[n] for n in graph.nodes]   # what each position holds
        self.types = graph.types()
        self.names = set(self.types)
        self.producer: dict[str, tuple[int, Node]] = {}
        self.uses: Counter[str] = Counter(graph.outputs)
        for i, n in enumerate(graph.nodes):
            for r in n.results:
                self.producer[r] = (i, n)
            self.uses.update(n.inputs)
        self.by_root: dict[str, list[tuple[Rule, PNode, Pattern, set[str]]]] = {}
        for rule in rules:
            if rule.is_multi or not isinstance(rule.lhs[0], PNode):
                continue                       # one source pattern, rooted at an op
            src, tgt = rule.lhs[0], rule.rhs[0]
            self.by_root.setdefault(src.op, []).append((rule, src, tgt, _tensor_vars(src, set())))
        self.fired: Counter[str] = Counter()

    def run(self) -> Graph:
        """Roots from the last node back to the first, so that an idiom is raised whole before
        any smaller idiom inside it is tried (LayerNorm holds an RMSNorm of x - mean(x)); then
        again while anything fired (a rule may match a fused op made by another)."""
        if not self.by_root:
            return self.graph
        fired = True
        while fired:
            fired = False
            for i in reversed(range(len(self.slots))):
                node = self.slots[i][-1] if self.slots[i] else None
                while node is not None and node.op in self.by_root:
                    new = self.try_rules(i, node)
                    if new is None:
                        break
                    fired = True
                    node = new                 # the fused op may itself be a root
        nodes = tuple(n for slot in self.slots for n in slot)
        if len(nodes) == len(self.graph.nodes) and not self.fired:
            return self.graph
        return Graph(self.graph.name, self.graph.inputs, nodes, self.graph.outputs)

    def try_rules(self, i: int, node: Node) -> Node | None:
        m = _Matcher(self.producer, self.types)
        root = node.results[0]
        for rule, src, tgt, tvars in self.by_root[node.op]:
            for env, seen, checks in m.match(src, root, {}, {}, []):
                if not self._inside(seen, node):
                    continue
                shapes = _shape_env(env, tvars, self.types)
                try:
                    if not all(_same(eval_expr(e, shapes), v) for e, v in checks):
                        continue
                except (_Undefined, KeyError, IndexError, TypeError):
                    continue
                if not all(cond_holds(c, shapes) for c in rule.conds):
                    continue
                built = self._build(tgt, env, shapes, root, node)
                if built is None:
                    continue
                self._replace(i, node, seen, built)
                self.fired[rule.name] += 1
                return built[-1]
        return None

    def _inside(self, seen: dict[int, tuple[int, Node]], root: Node) -> bool:
        """Every value the match computes, but the root's, is read only by matched nodes."""
        inner = Counter(v for _, n in seen.values() for v in n.inputs)
        for _, n in seen.values():
            if n is root:
                continue
            for r in n.results:
                if self.uses[r] != inner[r]:
                    return False
        return True

    def _build(self, tgt: Pattern, env: dict[str, Any], shapes: dict[str, Any], root: str,
               old: Node) -> list[Node] | None:
        """The target's nodes (operands first), its root named `root`; None when the target
        cannot be built or does not have the root's type."""
        out: list[Node] = []

        def build(p: Pattern, name: str | None) -> str:
            if isinstance(p, Var):
                return env[p.name]
            if p.op == "proj":
                raise TirError("split results are not built at import")
            kids = [build(o, None) for o in p.operands]
            d = op_def(p.op)
            attrs = normalize_attrs(d, {k: eval_expr(a, shapes) for k, a in p.attrs})
            types = infer_types(p.op, [self.types[k] for k in kids], attrs)
            result = name or self._fresh(root)
            self.types[result] = types[0]
            out.append(Node(p.op, tuple(kids), attrs, (result,), tuple(types[:1]), old.loc))
            return result

        try:
            if isinstance(tgt, Var):
                return None                    # a bare variable: nothing to name the root
            build(tgt, root)
        except (TirError, _Undefined, KeyError, IndexError, TypeError):
            return None
        if out[-1].types != old.types:
            return None
        return out

    def _fresh(self, base: str) -> str:
        k = 0
        while f"{base}_{k}" in self.names:
            k += 1
        self.names.add(f"{base}_{k}")
        return f"{base}_{k}"

    def _replace(self, root: int, old: Node, seen: dict[int, tuple[int, Node]],
                 built: list[Node]) -> None:
        for index, n in seen.values():
            self.uses.subtract(n.inputs)
            self.slots[index] = [x for x in self.slots[index] if x is not n]
            if n is not old:
                for r in n.results:
                    self.producer.pop(r, None)
        for n in built:
            self.uses.update(n.inputs)
            self.producer[n.results[0]] = (root, n)
        self.slots[root] += built


def rewrite_graph(graph: Graph, rules: Sequence[Rule]) -> tuple[Graph, Counter[str]]:
    """`graph` with `rules` applied greedily (see the module doc) and how often each fired."""
    rw = _Rewriter(graph, rules)
    return rw.run(), rw.fired


def raise_idioms(graph: Graph) -> Graph:
    """`graph` with every idiom of rules/idioms/idioms.rules raised to its fused operator."""
    return rewrite_graph(graph, idiom_rules())[0]
