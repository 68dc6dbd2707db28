"""SwiGLU backward's legitimate internal choices, and the allowance each earns in the gate.

The framework's gate (``accuracy.compare``) reads from here what only this operator knows: the
allowance of its row outputs, the rounding-model bound of a declared schedule (diagnosis),
and how a kernel's db, dw and dx are recomputed from its own stored dg, dfc. The reductions'
allowance is the framework's (``accuracy.allowance.reduction``), from the term sums this
operator's golden keeps (``operators.swiglu_backward.terms``).

Legitimate choices (``LEGITIMATE_CHOICES``) and their model, with u = 2^-8 (BF16 unit
roundoff) and u32 = 2^-24:

* math in FP32, either sigmoid form where it is finite: gamma_12(u32) relative (12 ops);
* one intermediate stored in BF16 before dg / dfc (PyTorch stores dy*fc and silu(g)):
  one more rounding, <= u |dg| (worst case; an element is not averaged);
* dg / dfc used stored (BF16) or unrounded by db, dw and dx: each term of a reduction
  carries up to two independent roundings (the intermediate and the store), each uniform
  in +-half the BF16 spacing of the value rounded: variance spacing^2 / 12 each, computed per
  term from the reference's values (``operators.swiglu_backward.terms.TermSums.rounding_variance``),
  adding in quadrature; the worst case 2 u sum|t| caps it (small M);
* dx's two products stored in BF16 before their sum (PyTorch's dx): half the spacing of each
  (worst case) in the element test, their uniform variance in the fitted scale's;
* any FP32 summation order within tiles of up to 8192 rows (``accuracy.allowance``); for dx
  (no running sums) max|S_j| <= sum|t|.

Not legitimate besides the framework's list: the article's sigmoid where it is NaN.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from accuracy.allowance import MIN_NORMAL, U_BF16, U_FP32, Allowance, tail_sigmas, term_roundings
from accuracy.bounds import gamma, reduction_bound, unit_roundoff
from contract.operator import ChunkGolden
from goldens.blocks import REDUCTION_BLOCK, row_product
from operators.swiglu_backward.terms import RowTerms, TermSums

# dg = (dy*fc) * s*(1 + g*(1-s)) with s = sigmoid(g): about 8 roundings in the math dtype,
# plus sigmoid's own (exp, add, divide): 12 covers both forms.
ELEMENTWISE_OPS = 12

LEGITIMATE_CHOICES = (
    "FP32 math, stable or exp-ratio sigmoid where finite",
    "dy*fc and silu(g) stored in BF16 before dg / dfc",
    "db, dw, dx from dg / dfc as computed (FP32) or as stored (BF16)",
    "dx's two products stored in BF16 before their sum",
    "any FP32 summation order within tiles of up to 8192 rows",
)

# What the own-upstream check recomputes each output from, for the gate's message
OWN_SOURCE = {"db_g": "sum of its own dg over M", "db_fc": "sum of its own dfc over M",
              "dw_g": "x^T times its own stored dg", "dw_fc": "x^T times its own stored dfc",
              "dx": "its own dg w_g^T + dfc w_fc^T"}
UPSTREAM = "dg/dfc"
# The upstream outputs each recompute reads: where one of them fails against the reference, the
# recompute carries its error, and a disagreement with it is no sign of a downstream error
OWN_READS = {"db_g": ("dg",), "db_fc": ("dfc",), "dw_g": ("dg",), "dw_fc": ("dfc",), "dx": ("dg", "dfc")}


def elementwise(reference: torch.Tensor) -> Allowance:
    """dg, dfc: one intermediate BF16 store plus FP32 math."""
    r = reference.double().abs()
    allow = (U_BF16 + gamma(ELEMENTWISE_OPS, U_FP32)) * r + U_BF16 * MIN_NORMAL
    return Allowance(allow, None, (U_BF16 ** 2 / 3) * (r * r + MIN_NORMAL ** 2))


def dx(rows: RowTerms, floor_l1: torch.Tensor, n: int, elements: int) -> Allowance:
    """dx: 2N terms dg w_g^T + dfc w_fc^T per element, optionally two stored products; ``elements``
    is dx's size (M x K), which sets the tail constant. The two products' roundings are taken at
    their worst case (half a spacing each): with only two of them a tail bound would exceed it."""
    sigmas = tail_sigmas(elements)
    worst = rows.abs + MIN_NORMAL * floor_l1
    order_sigma = U_FP32 * math.sqrt(2 * n / 3) * rows.abs
    extra = sigmas * order_sigma + rows.products
    return Allowance(term_roundings(rows.var, worst, 2, sigmas) + extra,
                     term_roundings(rows.var, worst, 1, sigmas) + extra,
                     order_sigma ** 2 + rows.products_var, shared_total=rows.shared, toward_zero=False,
                     shared_rows=rows.shared_rows, element_var=order_sigma ** 2 + rows.products_var + rows.var)


def row_allowance(output: str, exact: torch.Tensor, rows: RowTerms, terms: TermSums,
                  sizes: Mapping[str, int]) -> Allowance:
    """The allowance of a row output over one block of rows: ``exact`` its FP64 rows, ``rows`` the
    block's term sums, ``terms`` the case's."""
    if output == "dx":
        return dx(rows, terms.dx_floor_l1, sizes["N"], sizes["M"] * sizes["K"])
    return elementwise(exact)


def elementwise_bound(exact: torch.Tensor, sched, point: str) -> torch.Tensor:
    """dg / dfc: ELEMENTWISE_OPS roundings in the math dtype, then the store."""
    plan = sched.plan
    return (gamma(ELEMENTWISE_OPS, unit_roundoff(plan.math)) + unit_roundoff(plan.rounding(point))) * exact.abs()


def dx_bound(abs_terms: torch.Tensor, exact: torch.Tensor, *, length: int, sched) -> torch.Tensor:
    """dx = dg w_g^T + dfc w_fc^T: two dot products of length N (stored BF16 dg/dfc
    in, math-dtype accumulation), each optionally rounded, then their sum and the store.
    ``abs_terms`` = |dg| |w_g|^T + |dfc| |w_fc|^T."""
    plan = sched.plan
    u_math = unit_roundoff(plan.math)
    relative = (gamma(length, u_math) + unit_roundoff(plan.rounding("dg")) + gamma(ELEMENTWISE_OPS, u_math)
                + unit_roundoff(plan.rounding("dx_product")) + u_math)
    return relative * abs_terms + unit_roundoff(plan.rounding("dx")) * exact.abs()


def bound(output: str, exact: torch.Tensor, abs_terms: torch.Tensor | None, sched,
          sizes: Mapping[str, int]) -> torch.Tensor:
    """The rounding-model bound of ``sched``'s dtype path and tiles on |kernel - exact| (Higham;
    ``accuracy.bounds``): ``abs_terms`` is the output's sum |terms| (dx: the block's, db and dw:
    the case's)."""
    m = sizes["M"]
    if output in ("dg", "dfc"):
        return elementwise_bound(exact, sched, output)
    if output == "dx":
        return dx_bound(abs_terms, exact, length=sizes["N"], sched=sched)   # reduction over N, twice, then a sum
    if output in ("db_g", "db_fc"):
        return reduction_bound(abs_terms, exact, length=m, sched=sched, kernel="b",
                               inputs_stored=None, output="db", elementwise_ops=ELEMENTWISE_OPS)
    stored = "dg" if output == "dw_g" else "dfc"
    return reduction_bound(abs_terms, exact, length=m, sched=sched, kernel="w",
                           inputs_stored=stored, output="dw", elementwise_ops=ELEMENTWISE_OPS)


def own(rows: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor],
        kernel: Mapping[str, torch.Tensor]) -> ChunkGolden:
    """A kernel's db, dw and dx recomputed from its own stored dg, dfc over one chunk of rows, in
    FP32: ``rows`` the chunk's BF16 row inputs, ``weights`` w_g, w_fc in FP32, ``kernel`` the
    kernel's outputs over these rows. The reductions' operands are summed by the framework in
    canonical blocks, like the golden's."""
    dg, dfc = kernel["dg"].float(), kernel["dfc"].float()
    x = rows["x"].float()
    own_dx = row_product(dg, weights["w_g"].t(), REDUCTION_BLOCK) + row_product(dfc, weights["w_fc"].t(), REDUCTION_BLOCK)
    return ChunkGolden({"dx": own_dx}, {"db_g": (None, dg), "db_fc": (None, dfc),
                                        "dw_g": (x, dg), "dw_fc": (x, dfc)})
