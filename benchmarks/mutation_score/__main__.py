"""The gate's mutation score: how many single-point edits of a plain correct kernel it catches.

An AST mutator edits ``benchmarks/mutation_score/target.py`` at one point each: arithmetic
swapped (+ -, * /), constants moved (0 -> 1, 1 -> 0 or 2), casts dropped, values staged through FP16 or rounded to BF16
(``.float()``, ``.to(bfloat16)``), products as BF16 GEMMs, a transpose dropped, same-shape tensors swapped (dy/g/fc,
dg/dfc, the weights, the returned outputs), reductions changed (sum -> mean), slice bounds moved,
an operand dropped or two swapped, a value negated or squared, and the sigmoid replaced by other forms (``0.5 (1 + tanh(g/2))``, ``exp(g) / (1 + exp(g))``).
Each mutant runs through the case matrix's own evaluation (``cases.evaluate.evaluate_case``, in
process, no dual verdict) at the quick profile's cases of the small shape (K=96, N=200; M below
100000), range cases included. A mutant is

* **killed by the contract** when it raises or returns the wrong names, dtypes or shapes;
* **killed by the gate** when any output fails at any case;
* **equivalent** when its outputs are bit-identical to the unmutated kernel's at every case
  (nothing to catch), or when the edit is one of the operator's declared legitimate choices
  (``LEGITIMATE``, each with its reason);
* **survived** otherwise: listed with the edit and its largest difference from the unmutated
  kernel in BF16 ULPs, for a person to triage (a legitimate path, or a real miss).

The score is killed / (all - equivalent).

    python -m benchmarks.mutation_score                     # markdown summary and survivors
    python -m benchmarks.mutation_score --json out.json --limit 50
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cases.evaluate import evaluate_case          # noqa: E402
from cases.matrix import LARGE_M, quick_cases     # noqa: E402
from cases.spec import make_inputs                # noqa: E402
from kernels.registry import Backend              # noqa: E402
from operators.swiglu_backward import OPERATOR as SWIGLU   # noqa: E402

TARGET = Path(__file__).with_name("target.py")
SMALL_SHAPE = (96, 200)
BATCH = 40          # mutants evaluated together in one golden pass (memory: 7 outputs each)

# same-shape names the kernel's author could confuse
SWAPS = [("dyf", "gf", "fcf"), ("dy", "g", "fc"), ("w_g", "w_fc"), ("dg", "dfc"), ("dgf", "dfcf"),
         ("s", "silu", "dsilu"), ("db_g", "db_fc"), ("dw_g", "dw_fc")]
# FP32 values of the kernel a store could round to BF16 (some such stores are legitimate: they
# survive as equivalent or are triaged by hand)
FLOAT_INTERMEDIATES = ("dyf", "gf", "fcf", "s", "silu", "dsilu", "dgf", "dfcf", "xf")
BINOP_SWAPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div, ast.Add], ast.Div: [ast.Mult]}


# Edits that are the operator's declared legitimate choices (operators/swiglu_backward/gate.py): a
# survivor here is not a miss.
LEGITIMATE = {
    "silu -> silu rounded to BF16": "silu(g) stored in BF16 before dfc = dy silu(g): PyTorch autograd's path",
}


@dataclass
class Mutant:
    index: int
    line: int
    edit: str
    source: str = field(repr=False, default="")
    verdict: str = ""            # contract, gate, equivalent, survived
    detail: str = ""


class _Mutator(ast.NodeTransformer):
    """Visits the kernel's nodes in order; each alternative at each node is one mutation point.
    With ``target`` set, applies that one and leaves the rest."""

    def __init__(self, target: int = -1):
        self.target, self.count, self.edits = target, 0, []

    def _offer(self, node, alternatives):
        """``alternatives``: (description, replacement node) pairs for ``node``."""
        for description, replacement in alternatives:
            self.edits.append((getattr(node, "lineno", 0), description))
            hit = self.count == self.target
            self.count += 1
            if hit:
                return ast.copy_location(replacement, node)
        return None

    def generic_visit(self, node):
        return super().generic_visit(node)

    def visit_BinOp(self, node):
        op = type(node.op).__name__
        alternatives = [(f"{op} -> {alt.__name__}", ast.BinOp(left=node.left, op=alt(), right=node.right))
                        for alt in BINOP_SWAPS.get(type(node.op), [])]
        if not isinstance(node.op, ast.MatMult):
            alternatives += [(f"{op}: right operand dropped ({ast.unparse(node.right)})", node.left),
                             (f"{op}: left operand dropped ({ast.unparse(node.left)})", node.right)]
        if isinstance(node.op, ast.MatMult):
            bf16 = ast.Attribute(ast.Name("torch", ast.Load()), "bfloat16", ast.Load())
            alternatives.append(("@ as a BF16 GEMM, rounded to BF16",
                                 _call(ast.BinOp(left=_call(node.left, "to", bf16), op=ast.MatMult(),
                                                 right=_call(node.right, "to", bf16)), "float")))
        if isinstance(node.op, (ast.Sub, ast.Div, ast.MatMult)):
            alternatives.append((f"{op}: operands swapped", ast.BinOp(left=node.right, op=node.op, right=node.left)))
        return self._offer(node, alternatives) or self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, bool):
            alternatives = [(f"{node.value} -> {not node.value}", ast.Constant(not node.value))]
        elif isinstance(node.value, (int, float)):
            alternatives = [(f"{node.value} -> {v}", ast.Constant(v))
                            for v in ({0: (1,), 1: (0, 2)}.get(node.value, (node.value * 2,)))]
        else:
            alternatives = []
        return self._offer(node, alternatives) or node

    def visit_Name(self, node):
        if not isinstance(node.ctx, ast.Load):
            return node
        group = next((g for g in SWAPS if node.id in g), ())
        alternatives = [(f"{node.id} -> {other}", ast.Name(other, ast.Load())) for other in group if other != node.id]
        alternatives.append((f"{node.id} -> {node.id} staged through FP16",
                             _call(_call(ast.Name(node.id, ast.Load()), "half"), "to",
                                   ast.Attribute(ast.Name("torch", ast.Load()), "bfloat16" if node.id in
                                                 ("dy", "g", "fc", "x", "w_g", "w_fc", "dg", "dfc") else "float32",
                                                 ast.Load())))
                            if node.id not in ("torch",) else ("", None))
        if node.id in FLOAT_INTERMEDIATES:
            alternatives.append((f"{node.id} -> {node.id} rounded to BF16",
                                 _call(_call(ast.Name(node.id, ast.Load()), "to",
                                             ast.Attribute(ast.Name("torch", ast.Load()), "bfloat16", ast.Load())),
                                       "float")))
        alternatives = [(d, r) for d, r in alternatives if r is not None]
        return self._offer(node, alternatives) or node

    def visit_Call(self, node):
        alternatives = []
        func = node.func
        if isinstance(func, ast.Attribute):
            receiver = func.value
            if func.attr in ("float", "t") and not node.args:
                alternatives.append((f".{func.attr}() dropped", receiver))
            if func.attr == "to":
                alternatives.append((".to(...) dropped", receiver))
                alternatives.append((".to(bfloat16) -> .half()", _call(receiver, "half")))
            if func.attr == "sum":
                alternatives.append(("sum -> mean", ast.Call(ast.Attribute(receiver, "mean", ast.Load()),
                                                             node.args, node.keywords)))
            if func.attr == "sigmoid" and isinstance(receiver, ast.Name) and receiver.id == "torch":
                arg = node.args[0]
                alternatives += [
                    ("sigmoid -> 0.5 (1 + tanh(g/2))", _parse(f"0.5 * (1 + torch.tanh(({ast.unparse(arg)}) / 2))")),
                    ("sigmoid -> exp(g) / (1 + exp(g))",
                     _parse(f"torch.exp({ast.unparse(arg)}) / (1 + torch.exp({ast.unparse(arg)}))")),
                    ("sigmoid(g) -> sigmoid(-g)", _parse(f"torch.sigmoid(-({ast.unparse(arg)}))")),
                ]
        return self._offer(node, alternatives) or self.generic_visit(node)

    def visit_Assign(self, node):
        name = ast.unparse(node.targets[0])
        negated = ast.Assign(targets=node.targets, value=ast.UnaryOp(ast.USub(), node.value))
        squared = ast.Assign(targets=node.targets, value=ast.BinOp(node.value, ast.Mult(), node.value))
        return self._offer(node, [(f"{name} negated", negated), (f"{name} squared", squared)]) or self.generic_visit(node)

    def visit_Slice(self, node):
        alternatives = [("slice [0:] -> [1:]", ast.Slice(ast.Constant(1), node.upper, node.step)),
                        ("slice [0:] -> [:-1]", ast.Slice(None, ast.Constant(-1), node.step))]
        return self._offer(node, alternatives) or node

    def visit_Dict(self, node):
        alternatives = []
        keys = [k.value for k in node.keys]
        for a, b in (("dg", "dfc"), ("db_g", "db_fc"), ("dw_g", "dw_fc")):
            i, j = keys.index(a), keys.index(b)
            values = list(node.values)
            values[i], values[j] = values[j], values[i]
            alternatives.append((f"returned {a} <-> {b}", ast.Dict(keys=node.keys, values=values)))
        return self._offer(node, alternatives) or self.generic_visit(node)


def _call(receiver, attr, *args):
    return ast.Call(ast.Attribute(receiver, attr, ast.Load()), list(args), [])


def _parse(expr: str):
    return ast.parse(expr, mode="eval").body


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    counter = _Mutator()
    counter.visit(copy.deepcopy(tree))
    out = []
    for i, (line, edit) in enumerate(counter.edits):
        mutated = _Mutator(i).visit(copy.deepcopy(tree))
        ast.fix_missing_locations(mutated)
        out.append(Mutant(i, line, edit, ast.unparse(mutated)))
    return out


def _compile(source: str):
    namespace: dict = {}
    exec(compile(source, str(TARGET), "exec"), namespace)
    return namespace["kernel"]


def _same_bits(a: dict, b: dict) -> bool:
    try:
        return all(a[k].shape == b[k].shape and a[k].dtype == b[k].dtype
                   and torch.equal(a[k].view(torch.int16), b[k].view(torch.int16)) for k in b)
    except Exception:   # noqa: BLE001 - a mutant's outputs may be anything
        return False


def _max_ulp(a: dict, b: dict) -> float:
    """The largest, over outputs, 99th percentile of |a - b| in BF16 ULPs of b (the maximum alone is
    dominated by elements of a cancelling sum near zero)."""
    worst = 0.0
    for k in b:
        try:
            diff = (a[k].double() - b[k].double()).abs()
            spacing = torch.where(b[k].double() == 0, torch.tensor(2.0 ** -133, dtype=torch.float64),
                                  2.0 ** (torch.floor(torch.log2(b[k].double().abs())) - 7))
            ulps = (diff / spacing).nan_to_num(float("inf")).flatten()
            worst = max(worst, float(torch.quantile(ulps[:1 << 24], 0.99)))
        except Exception:   # noqa: BLE001
            return float("inf")
    return worst


def cases():
    return [c for c in quick_cases(SWIGLU) if (c.k, c.n) == SMALL_SHAPE and c.m < LARGE_M]


def score(limit: int | None = None) -> dict:
    source = TARGET.read_text()
    original = _compile(source)
    population = mutants(source)[:limit]
    kernels = {}
    for m in population:
        try:
            kernels[m.index] = _compile(m.source)
        except Exception as exc:   # noqa: BLE001 - an edit that does not compile is the contract's
            m.verdict, m.detail = "contract", f"does not compile: {exc}"
    specs = cases()
    identical = {m.index: True for m in population}
    ulps = {m.index: 0.0 for m in population}
    start = time.perf_counter()
    for spec in specs:
        inputs = make_inputs(spec)
        reference = original(**inputs)
        live = [m for m in population if m.verdict == "" and m.index in kernels]
        for m in live:
            try:
                out = kernels[m.index](**inputs)
                identical[m.index] &= isinstance(out, dict) and _same_bits(out, reference)
                if isinstance(out, dict):
                    ulps[m.index] = max(ulps[m.index], _max_ulp(out, reference))
            except Exception:   # noqa: BLE001
                identical[m.index] = False
        for first in range(0, len(live), BATCH):
            batch = live[first:first + BATCH]
            backends = [Backend(f"mutant{m.index}", kernels[m.index]) for m in batch]
            outcome = evaluate_case(spec, backends, isolate=False, benchmark=None)
            for m, b in zip(batch, backends):
                run = outcome.runs[b.name]
                if outcome.error:
                    raise RuntimeError(outcome.error)
                if run.error:
                    m.verdict, m.detail = "contract", f"{spec.id}: {run.error.splitlines()[0][:160]}"
                elif b.name in outcome.verdicts:
                    failed = sorted(o for o, v in outcome.verdicts[b.name].items() if not v.passed)
                    if failed:
                        m.verdict, m.detail = "gate", f"{spec.id}: {', '.join(failed)}"
    for m in population:
        if m.verdict == "":
            if identical[m.index]:
                m.verdict, m.detail = "equivalent", "bit-identical at every case"
            elif m.edit in LEGITIMATE:
                m.verdict, m.detail = "equivalent", f"a legitimate choice: {LEGITIMATE[m.edit]}"
            else:
                m.verdict, m.detail = "survived", f"p99 {ulps[m.index]:.3g} BF16 ULP from the unmutated kernel"
    counts = {v: sum(m.verdict == v for m in population) for v in ("contract", "gate", "equivalent", "survived")}
    non_equivalent = len(population) - counts["equivalent"]
    killed = counts["contract"] + counts["gate"]
    return {"cases": [c.id for c in specs], "mutants": len(population), **counts,
            "score": killed / non_equivalent if non_equivalent else 1.0,
            "seconds": time.perf_counter() - start,
            "population": [{k: v for k, v in asdict(m).items() if k != "source"} for m in population]}


def markdown(result: dict) -> str:
    lines = [f"{result['mutants']} mutants of benchmarks/mutation_score/target.py over {len(result['cases'])} cases "
             f"({', '.join(result['cases'])}); {result['seconds']:.0f} s",
             "", "| killed by the contract | killed by the gate | equivalent | survived | score |", "|---|---|---|---|---|",
             f"| {result['contract']} | {result['gate']} | {result['equivalent']} | {result['survived']} | "
             f"{100 * result['score']:.1f}% |", "", "Survivors:", "", "| line | edit | difference |", "|---|---|---|"]
    lines += [f"| {m['line']} | {m['edit']} | {m['detail']} |" for m in result["population"] if m["verdict"] == "survived"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mutation_score", description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N mutants")
    parser.add_argument("--json", metavar="FILE", help="write every mutant's verdict as JSON")
    args = parser.parse_args(argv)
    result = score(args.limit)
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
