"""A toy operator declared entirely in this folder: y = a * b * s element-wise and z = sum over M
of a * b. Nothing outside this folder names it; ``--operator tests.operators.toy`` runs its
matrix with the framework's own code (``tests/operators/test_toy_operator.py``).

Inputs a, b [M, N], s [1, N]; outputs y [M, N] (rows) and z [1, N] (a sum over M, tiled by the
kernel "z"). Its one legitimate internal choice: a * b stored in BF16 before it is scaled and
summed (PyTorch's BF16 ops do that).
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from accuracy.allowance import MIN_NORMAL, U_BF16, U_FP32, Allowance
from accuracy.bounds import gamma, reduction_bound, unit_roundoff
from accuracy.term_sums import ReductionTermSums
from accuracy.ulp import bf16_spacing
from goldens.rounding import round_to
from goldens.schedule_data import Schedules
from contract.operator import ChunkGolden, Operator, OutputDecl, TensorDecl

_THIS = sys.modules[__name__]

# --- schedules: one rounding point inside (the product), two output stores, one tiled kernel
SCHEDULES = Schedules(points=("product", "y", "z"), kernels=("z",), outputs=("y", "z"))
TILED = SCHEDULES.schedule("tiled", z=(1024, torch.bfloat16))
SCHEDULES.set_default(TILED)
TORCH_BF16 = SCHEDULES.schedule("torch-bf16", SCHEDULES.BF16_FAITHFUL.with_store(product=torch.bfloat16))


# --- the golden: one chunk of rows under one plan
@dataclass
class RowTerms:
    abs: torch.Tensor


def term_sums(inputs: Mapping[str, torch.Tensor]) -> ReductionTermSums:
    return ReductionTermSums()


def chunk(rows, weights, plan, *, want_rows, terms=None, raw=None, block=1024, start=0) -> ChunkGolden:
    p = round_to(rows["a"] * rows["b"], plan.rounding("product"))
    out = {"y": round_to(p * weights["s"], plan.rounding("y"))} if want_rows else {}
    row_terms = None
    if terms is not None:     # FP64: the product's one legitimate rounding, spacing^2 / 12 per term
        row_terms = RowTerms(out["y"].abs()) if want_rows else None
        terms.add_rows("z", p.abs(), bf16_spacing(p.abs() * (1 + 2.0 ** -7)).square() / 12, block)
    return ChunkGolden(out, {"z": (None, p)}, row_terms)


# --- the gate: y's allowance (the product's rounding and two FP32 ones), z's is the framework's
LEGITIMATE_CHOICES = ("a * b stored in BF16 before it is scaled and summed",)
OWN_SOURCE: dict = {}
UPSTREAM = ""


def row_allowance(output, exact, rows, terms, sizes) -> Allowance:
    r = exact.double().abs()
    allow = (U_BF16 + gamma(2, U_FP32)) * r + U_BF16 * MIN_NORMAL
    return Allowance(allow, None, (U_BF16 ** 2 / 3) * (r * r + MIN_NORMAL ** 2))


def bound(output, exact, abs_terms, sched, sizes) -> torch.Tensor:
    plan = sched.plan
    if output == "y":
        return ((gamma(2, unit_roundoff(plan.math)) + unit_roundoff(plan.rounding("product"))) * exact.abs()
                + unit_roundoff(plan.rounding("y")) * exact.abs())
    return reduction_bound(abs_terms, exact, length=sizes["M"], sched=sched, kernel="z", inputs_stored="product",
                           output="z", elementwise_ops=1)


def own(rows, weights, kernel) -> ChunkGolden:
    return ChunkGolden({}, {})


# --- scale profiles and the matrix's axes
def _unit(gen, m, n):
    return {"a": torch.randn(m, n, generator=gen), "b": torch.randn(m, n, generator=gen),
            "s": 1 + torch.rand(1, n, generator=gen)}


def _tiny(gen, m, n):
    t = _unit(gen, m, n)
    t["a"] = t["a"] * 2.0 ** -120
    return t


OPERATOR = Operator(
    name="toy",
    dims=("M", "N"),
    inputs=(TensorDecl("a", ("M", "N")), TensorDecl("b", ("M", "N")), TensorDecl("s", (1, "N"))),
    outputs=(OutputDecl("y", ("M", "N")), OutputDecl("z", (1, "N"), "sum_over_m", "z")),
    sizes_from={"M": ("a", 0), "N": ("a", 1)},
    golden=_THIS,
    gate=_THIS,
    schedules=SCHEDULES,
    scales={"unit": _unit, "tiny": _tiny},
    m_edges=(1, 3, 1024, 1500),
    shapes=((8,), (33,)),
    acceptance_case=(1500, 33, "unit", 0),
    title="toy scaled product",
    backends={"torch-eager": "tests.operators.toy.backends:torch_bf16",
              "tiled-emulation": "tests.operators.toy.backends:tiled"},
    default_backends=("torch-eager",),
)
