"""The framework's import graph, read from its source (nothing is imported): which of its own
modules each file imports, at module level or inside a function body.

Left out: imports under ``if TYPE_CHECKING:`` (annotations only) and under
``if __name__ == "__main__":`` (a script's entry point runs once the module is imported, so it
closes no circle at import time)."""
from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Bottom to top: a package may import the ones before it. ``cases`` renders the report at the end
# of a session (``cases.plugin`` -> ``reports``): the one import that runs upwards.
LAYERS = ("contract", "goldens", "runs", "accuracy", "kernels", "operators", "cases", "reports")


@dataclass(frozen=True)
class Edge:
    source: str        # importing module
    target: str        # imported module
    deferred: bool     # inside a function body
    line: int

    @property
    def packages(self) -> tuple[str, str]:
        return self.source.split(".")[0], self.target.split(".")[0]


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _resolve(name: str, known: dict) -> str | None:
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _skipped(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = ast.unparse(node.test)
    return "TYPE_CHECKING" in test or test.replace("'", '"') == '__name__ == "__main__"'


def edges(root: Path = ROOT) -> list[Edge]:
    known = modules(root)
    found = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]

        def visit(node: ast.AST, deferred: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if _skipped(child):
                    continue
                inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                targets = []
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                        base = ".".join(parts + ([base] if base else []))
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in child.names]
                for t in targets:
                    target = _resolve(t, known)
                    if target is not None and target != name:
                        found.append(Edge(name, target, deferred, child.lineno))
                visit(child, inner)

        visit(ast.parse(path.read_text()), False)
    return found


def circles(graph: list[Edge]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan)."""
    succ = defaultdict(set)
    for e in graph:
        succ[e.source].add(e.target)
    index, low, stack, on, out = {}, {}, [], set(), []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted({e.source for e in graph} | {e.target for e in graph}):
        if v not in index:
            connect(v)
    return out


def mutual_packages(graph: list[Edge]) -> list[tuple[str, str]]:
    pairs = {e.packages for e in graph if e.packages[0] != e.packages[1]}
    return sorted({tuple(sorted(p)) for p in pairs if (p[1], p[0]) in pairs})


def upward(graph: list[Edge]) -> list[Edge]:
    """Imports from a lower layer to a higher one."""
    rank = {p: i for i, p in enumerate(LAYERS)}
    return [e for e in graph if rank[e.packages[0]] < rank[e.packages[1]]]


def summary(root: Path = ROOT) -> dict:
    graph = edges(root)
    return {"modules": len(modules(root)), "imports": len(graph), "circles": circles(graph),
            "mutual_packages": mutual_packages(graph), "upward": [(e.source, e.target) for e in upward(graph)],
            "deferred": [(e.source, e.target) for e in graph if e.deferred]}


if __name__ == "__main__":
    import json
    s = summary()
    print(json.dumps({**s, "deferred": len(s["deferred"])}, indent=1))
