"""RMSNorm backward's legitimate internal choices, and the allowance each earns in the gate.

With u = 2^-8 (BF16 unit roundoff) and u32 = 2^-24, a correct kernel may:

* compute in FP32 from the BF16 inputs, with rstd saved by the forward or recomputed in the
  backward (both FP32: a sum of N squares in some order, relative sigma u32 sqrt(N/3), which
  moves dx by up to three times that of its terms: r g and r^3 x sum(g x) / N);
* store xhat = x r in BF16 (a forward that saves its normalised output) and g = dy w in BF16
  (autograd's grad of the weight multiply in BF16): one rounding each, <= u |value|;
* store dy * xhat in BF16 before summing it into dw;
* sum dw over M in any FP32 order within tiles of up to 8192 rows (``accuracy.allowance``).

dx[m, n] = r (g_n - xhat_n c) with c = sum_j g_j xhat_j / N. The roundings of g_n and xhat_n
move the element by at most u r (|g_n| + |xhat_n c|): two terms, taken at their worst case.
The roundings of every g_j, xhat_j reach c: independent, each uniform in +-u |value|, they give
c a standard deviation (u / N) sqrt(2/3 sum_j (g_j xhat_j)^2), times r |xhat_n| in dx, taken at the
case's tail constant and capped by its worst case 2 u sum_j |g_j xhat_j| / N. FP32 math adds
u32 sqrt(2N/3) sum|terms| at the same tail constant, plus 12 roundings of the element itself.

Not legitimate (``operators.rmsnorm_backward.mutants``): eps outside the square root, the mean
over the wrong axis, rstd or its sum of squares in BF16, the projection term missing, dw over one
tile, and the framework's list (BF16 math, flushing subnormals, rounding toward zero).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from accuracy.allowance import MIN_NORMAL, U_BF16, U_FP32, Allowance, tail_sigmas
from accuracy.bounds import gamma, reduction_bound, unit_roundoff
from contract.operator import ChunkGolden

LEGITIMATE_CHOICES = (
    "FP32 math, rstd saved by the forward or recomputed in FP32",
    "xhat = x rstd stored in BF16",
    "g = dy w stored in BF16",
    "dy xhat stored in BF16 before dw sums it",
    "any FP32 summation order within tiles of up to 8192 rows",
)
ELEMENTWISE_OPS = 12
OWN_SOURCE: dict = {}          # no output is recomputed from another: dx and dw both come from the inputs
UPSTREAM = ""
OWN_READS: dict = {}


def dx(rows, n: int, elements: int) -> Allowance:
    """dx over one block of rows from its term sums (``golden.RowTerms``)."""
    sigmas = tail_sigmas(elements)
    sigma_c = rows.scale * (U_BF16 / n) * torch.sqrt((2 / 3) * rows.c_sq)
    worst_c = rows.scale * (2 * U_BF16 / n) * rows.c_abs
    rstd = 3 * (U_FP32 * math.sqrt(n / 3) * sigmas + gamma(4, U_FP32)) * rows.single
    order = (sigmas * U_FP32 * math.sqrt(2 * n / 3) + gamma(ELEMENTWISE_OPS, U_FP32)) * rows.abs
    # among the subnormals a rounding is half of 2^-133, not relative: g_n's and, through c, every g_j's
    floor = U_BF16 * MIN_NORMAL * (rows.r + rows.scale * rows.xhat_l1 / n)
    allow = U_BF16 * rows.single + torch.minimum(sigmas * sigma_c, worst_c) + rstd + order + floor
    noise = (U_BF16 ** 2 / 3) * rows.single.square() + ((order + rstd) / sigmas).square()
    return Allowance(allow, None, noise, shared_total=rows.shared, direction=True,
                     shared_rows=rows.shared_rows, element_var=noise + sigma_c.square())


def row_allowance(output: str, exact: torch.Tensor, rows, terms, sizes: Mapping[str, int]) -> Allowance:
    return dx(rows, sizes["N"], sizes["M"] * sizes["N"])


def bound(output: str, exact: torch.Tensor, abs_terms: torch.Tensor | None, sched,
          sizes: Mapping[str, int]) -> torch.Tensor:
    """The rounding-model bound of ``sched``'s dtype path on |kernel - exact| (diagnosis)."""
    plan, n = sched.plan, sizes["N"]
    u_math = unit_roundoff(plan.math)
    u_r = gamma(n + 4, u_math) + unit_roundoff(plan.rounding("rstd"))
    if output == "dx":
        relative = (gamma(n + ELEMENTWISE_OPS, u_math) + 3 * u_r + unit_roundoff(plan.rounding("g"))
                    + 2 * unit_roundoff(plan.rounding("xhat")))
        return relative * abs_terms + unit_roundoff(plan.rounding("dx")) * exact.abs()
    return (reduction_bound(abs_terms, exact, length=sizes["M"], sched=sched, kernel="w", inputs_stored="xhat",
                            output="dw", elementwise_ops=ELEMENTWISE_OPS)
            + (u_r + unit_roundoff(plan.rounding("dw_term"))) * abs_terms)


def own(rows: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor],
        kernel: Mapping[str, torch.Tensor]) -> ChunkGolden:
    """Nothing to recompute: no output of this operator feeds another."""
    return ChunkGolden({}, {})
