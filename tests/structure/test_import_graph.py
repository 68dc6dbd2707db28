"""The framework's shape, measured from its source: no import circle between files, no two
top-level packages importing each other, one import running up the layers (the end-of-session
report), the contracts importing nothing of the framework, few imports hidden in function
bodies, and no framework module that reads an operator when it is imported."""
from __future__ import annotations

import subprocess
import sys

from tests.structure import import_graph as G

# Optional third-party toolchains: a module that imports one is imported only when its backend runs.
OPTIONAL = ("pypto", "triton", "ray")
MAX_DEFERRED = 10


def _imports_optional(module: str) -> bool:
    text = G.modules()[module].read_text()
    return any(f"\nimport {d}" in text or f"\nfrom {d}" in text for d in OPTIONAL)


def test_no_import_circle_between_files():
    assert G.circles(G.edges()) == []


def test_no_two_packages_import_each_other():
    assert G.mutual_packages(G.edges()) == []


def test_one_import_runs_up_the_layers():
    assert [(e.source, e.target) for e in G.upward(G.edges())] == [("cases.plugin", "reports")]


def test_the_contracts_import_nothing_of_the_framework():
    assert [e for e in G.edges() if e.packages[0] == "contract" and e.packages[1] != "contract"] == []


def test_few_imports_of_the_framework_hide_in_function_bodies():
    deferred = [e for e in G.edges() if e.deferred and not _imports_optional(e.target)]
    listed = "\n".join(f"{e.source}:{e.line} -> {e.target}" for e in deferred)
    assert len({(e.source, e.line) for e in deferred}) <= MAX_DEFERRED, listed


FRAMEWORK = ("contract", "goldens", "runs", "accuracy", "kernels", "cases", "reports")


def test_no_framework_module_reads_an_operator_when_imported():
    """Every framework module imports with the operator registry refusing every look-up, and holds
    no operator declaration among its globals afterwards: whatever it needs of an operator it is handed."""
    modules = sorted(m for m in G.modules() if m.split(".")[0] in FRAMEWORK and not m.endswith("__main__"))
    code = f"""
import importlib, sys
import operators
from contract.operator import Operator

def refuse(name=operators.DEFAULT):
    raise AssertionError(f"operators.get({{name!r}}) while importing")

operators.get = refuse
bad = []
for name in {modules!r}:
    try:
        module = importlib.import_module(name)
    except AssertionError as exc:
        bad.append(f"{{name}}: {{exc}}")
        continue
    held = [k for k, v in vars(module).items() if isinstance(v, Operator)]
    if held:
        bad.append(f"{{name}} holds {{held}}")
print("\\n".join(bad))
sys.exit(1 if bad else 0)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=G.ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
