"""The package's import graph has no cycles.

The graph is read from the source with `ast`, so it sees every import, the ones at module level
and the ones inside functions alike: a lazy import still ties two modules together, and a cycle
through one is a cycle in the design even where Python happens to resolve it at run time.
An edge runs from the importing module to the module it names: `from .x import f` gives an edge to
the sibling `x`; `from . import x` to the submodule `x` when there is one, else to the package;
relative imports are resolved against the importing module's package. The parent packages that
Python runs on the way to a module (their `__init__.py`) are not edges: every module would
otherwise depend on every package above it. Imports of other distributions are left out, and so
are the few made by `importlib` (cli.py's command modules, build_kernels.py's kernel modules,
kernels.py's compiled module): each of those points downwards.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "eqsat_nb"

Graph = dict[str, set[str]]


def module_names(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under `package` (a package is named by its
    folder, not by its __init__.py)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name that a `from ... import` names, `node.module` resolved against the
    importing module's package for a relative import."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules in `known` that `source` (the text of `module`) imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            # `from pkg import mod` names the submodule; `from mod import name`, the module
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:       # `import a.b.c` of a package's attribute
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


def import_graph(package: Path) -> Graph:
    """Module -> the package's modules it imports."""
    files = module_names(package)
    known = set(files)
    return {m: imports_of(m, p.read_text(), p.name == "__init__.py", known)
            for m, p in files.items()}


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module, as the list
    of modules along it, first module repeated at the end; sorted, so a failure reads the same on
    every run. (Tarjan's algorithm, iterative: no recursion limit on a deep graph.)"""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        components.append(comp)
    return sorted(_cycle_in(graph, c) for c in components)


def _cycle_in(graph: Graph, component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first within it)."""
    start = min(component)
    came_from = {start: start}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return path[::-1] + [start]
                if w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_the_cycle_finder_names_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c", "x"}, "c": {"a"}, "x": set(), "y": {"z"}, "z": {"y"}}
    assert cycles(graph) == [["a", "b", "c", "a"], ["y", "z", "y"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []


def test_imports_are_read_at_every_level_and_resolved(tmp_path):
    """Relative imports resolve against the package; a function's lazy import is an edge; a
    `from pkg import submodule` names the submodule, `from pkg import name` the package."""
    pkg = tmp_path / "p"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .low import x\n")
    (pkg / "low.py").write_text("import os\nx = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from .. import x\n")
    (pkg / "sub" / "high.py").write_text(
        "from ..low import x\n"
        "def f():\n    from . import mid\n    import p.sub.mid.helper\n")
    (pkg / "sub" / "mid.py").write_text("def g():\n    from .high import f\n")
    graph = import_graph(pkg)
    assert graph == {"p": {"p.low"}, "p.low": set(), "p.sub": {"p"},
                     "p.sub.high": {"p.low", "p.sub.mid"}, "p.sub.mid": {"p.sub.high"}}
    assert cycles(graph) == [["p.sub.high", "p.sub.mid", "p.sub.high"]]


def folded(graph: Graph, depth: int = 2) -> Graph:
    """The graph with each module folded into its name's first `depth` parts: at depth 2, a
    subpackage of eqsat_nb (`eqsat_nb.onnx_io`) stands for all its modules."""
    out: Graph = {}
    for m, targets in graph.items():
        a = ".".join(m.split(".")[:depth])
        out.setdefault(a, set()).update(".".join(t.split(".")[:depth]) for t in targets)
        out[a].discard(a)
    return out


def test_folding_joins_a_subpackage_into_one_node():
    graph = {"p.a.x": {"p.a.y", "p.b"}, "p.a.y": set(), "p.b": {"p.a.y"}}
    assert folded(graph) == {"p.a": {"p.b"}, "p.b": {"p.a"}}
    assert cycles(folded(graph)) == [["p.a", "p.b", "p.a"]]


def test_the_package_imports_without_cycles():
    graph = import_graph(PACKAGE)
    assert len(graph) > 100 and sum(map(len, graph.values())) > 200    # the whole package read
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_subpackages_import_in_one_direction():
    """No cycle between eqsat_nb's subpackages and top-level modules either: the ONNX side
    (`onnx_io`), the commands above it and the CLI above those, with `runtime` and the file
    helpers below all of them, each import only downwards."""
    found = cycles(folded(import_graph(PACKAGE)))
    assert not found, "import cycles between subpackages:\n" + "\n".join(
        " -> ".join(c) for c in found)
