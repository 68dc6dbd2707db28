"""Single-point edits of one kernel function's AST: each alternative at each node is one mutant.

The edits are the slips a kernel's author makes: arithmetic swapped (+ -, * /), constants moved
(0 -> 1, 1 -> 0 or 2), casts dropped, values staged through FP16 or rounded to BF16
(``.float()``, ``.to(bfloat16)``), products as BF16 GEMMs, a transpose dropped, same-shape tensors
swapped, reductions changed (sum -> mean), slice bounds moved, an operand dropped or two swapped,
a value negated or squared, the sigmoid replaced by other forms (``0.5 (1 + tanh(g/2))``,
``exp(g) / (1 + exp(g))``). Which names may be swapped, rounded or staged is a ``MutationPlan``:
the operator's declaration gives one (``plan_for``); a benchmark may write its own.
"""
from __future__ import annotations

import ast
import copy
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

BINOP_SWAPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div, ast.Add], ast.Div: [ast.Mult]}


@dataclass(frozen=True)
class MutationPlan:
    """What the edits may touch, by name.

    ``swaps``: groups of same-shape names an author could confuse (each read is offered every other
    name of its group); ``float_intermediates``: FP32 values a store could round to BF16;
    ``bf16_names``: names staged through FP16 back to BF16 (every other name is staged back to
    FP32); ``returned_pairs``: keys of a returned dict literal whose values can be swapped;
    ``opaque``: names that are not values (modules, functions), never staged or rounded."""
    swaps: tuple[tuple[str, ...], ...] = ()
    float_intermediates: tuple[str, ...] = ()
    bf16_names: tuple[str, ...] = ()
    returned_pairs: tuple[tuple[str, str], ...] = ()
    opaque: tuple[str, ...] = ("torch",)


def plan_for(operator, function: ast.FunctionDef, namespace: Mapping[str, object] | None = None) -> MutationPlan:
    """The plan an operator's declaration gives for ``function``: its inputs and its outputs
    grouped by declared shape are the swaps; names the function assigns that are neither an input
    nor an output are its FP32 intermediates; inputs and outputs are BF16; the names it reads from
    its ``namespace`` (module globals, closure) are opaque."""
    inputs = {t.name: tuple(t.dims) for t in operator.inputs}
    outputs = {o.name: tuple(o.dims) for o in operator.outputs}
    groups = []
    for declared in (inputs, outputs):
        by_shape = defaultdict(list)
        for name, dims in declared.items():
            by_shape[dims].append(name)
        groups += [tuple(names) for names in by_shape.values() if len(names) > 1]
    assigned = []
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in assigned:
            assigned.append(node.id)
    intermediates = tuple(n for n in assigned if n not in inputs and n not in outputs)
    pairs = tuple((a, b) for g in groups if g[0] in outputs for i, a in enumerate(g) for b in g[i + 1:])
    # a name the function reads from its module or closure (a module, a helper, a schedule, a flag)
    # is not one of its tensors: staging it through FP16 only raises
    parameters = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
    opaque = ("torch", *(n for n in (namespace or {}) if n not in parameters and n not in assigned))
    return MutationPlan(swaps=tuple(groups), float_intermediates=intermediates,
                        bf16_names=tuple(inputs) + tuple(outputs), returned_pairs=pairs, opaque=opaque)


@dataclass(frozen=True)
class Edit:
    """One mutant before it is judged: where (the kernel file's line), what, and its source."""
    index: int
    line: int
    edit: str
    source: str        # the mutated function's definition


def _call(receiver, attr, *args):
    return ast.Call(ast.Attribute(receiver, attr, ast.Load()), list(args), [])


def _parse(expr: str):
    return ast.parse(expr, mode="eval").body


def _torch(attr: str):
    return ast.Attribute(ast.Name("torch", ast.Load()), attr, ast.Load())


class _Mutator(ast.NodeTransformer):
    """Visits the function's nodes in order; each alternative at each node is one mutation point.
    With ``target`` set, applies that one and leaves the rest."""

    def __init__(self, plan: MutationPlan, target: int = -1):
        self.plan, self.target, self.count, self.edits = plan, target, 0, []

    def _offer(self, node, alternatives):
        """``alternatives``: (description, replacement node) pairs for ``node``."""
        for description, replacement in alternatives:
            self.edits.append((getattr(node, "lineno", 0), description))
            hit = self.count == self.target
            self.count += 1
            if hit:
                return ast.copy_location(replacement, node)
        return None

    def visit_BinOp(self, node):
        op = type(node.op).__name__
        alternatives = [(f"{op} -> {alt.__name__}", ast.BinOp(left=node.left, op=alt(), right=node.right))
                        for alt in BINOP_SWAPS.get(type(node.op), [])]
        if not isinstance(node.op, ast.MatMult):
            alternatives += [(f"{op}: right operand dropped ({ast.unparse(node.right)})", node.left),
                             (f"{op}: left operand dropped ({ast.unparse(node.left)})", node.right)]
        if isinstance(node.op, ast.MatMult):
            alternatives.append(("@ as a BF16 GEMM, rounded to BF16",
                                 _call(ast.BinOp(left=_call(node.left, "to", _torch("bfloat16")), op=ast.MatMult(),
                                                 right=_call(node.right, "to", _torch("bfloat16"))), "float")))
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
        group = next((g for g in self.plan.swaps if node.id in g), ())
        alternatives = [(f"{node.id} -> {other}", ast.Name(other, ast.Load())) for other in group if other != node.id]
        if node.id not in self.plan.opaque:
            staged_to = "bfloat16" if node.id in self.plan.bf16_names else "float32"
            alternatives.append((f"{node.id} -> {node.id} staged through FP16",
                                 _call(_call(ast.Name(node.id, ast.Load()), "half"), "to", _torch(staged_to))))
        if node.id in self.plan.float_intermediates:
            alternatives.append((f"{node.id} -> {node.id} rounded to BF16",
                                 _call(_call(ast.Name(node.id, ast.Load()), "to", _torch("bfloat16")), "float")))
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
            if func.attr == "sigmoid" and isinstance(receiver, ast.Name) and receiver.id == "torch" and node.args:
                arg = ast.unparse(node.args[0])
                alternatives += [
                    ("sigmoid -> 0.5 (1 + tanh(g/2))", _parse(f"0.5 * (1 + torch.tanh(({arg}) / 2))")),
                    ("sigmoid -> exp(g) / (1 + exp(g))", _parse(f"torch.exp({arg}) / (1 + torch.exp({arg}))")),
                    ("sigmoid(g) -> sigmoid(-g)", _parse(f"torch.sigmoid(-({arg}))")),
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
        keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
        for a, b in self.plan.returned_pairs:
            if a in keys and b in keys:
                i, j = keys.index(a), keys.index(b)
                values = list(node.values)
                values[i], values[j] = values[j], values[i]
                alternatives.append((f"returned {a} <-> {b}", ast.Dict(keys=node.keys, values=values)))
        return self._offer(node, alternatives) or self.generic_visit(node)


def mutants(function: ast.FunctionDef, plan: MutationPlan) -> list[Edit]:
    """Every single-point edit of ``function`` (its line numbers those of its file), in visiting order.
    The decorators are left alone: an edit there changes how the kernel is built, not what it computes."""
    counter = _Mutator(plan)
    for statement in copy.deepcopy(function).body:
        counter.visit(statement)
    out = []
    for i, (line, edit) in enumerate(counter.edits):
        mutated = copy.deepcopy(function)
        mutator = _Mutator(plan, i)
        mutated.body = [mutator.visit(s) for s in mutated.body]
        ast.fix_missing_locations(mutated)
        out.append(Edit(i, line, edit, ast.unparse(mutated)))
    return out
