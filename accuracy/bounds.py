"""Rounding-model error bounds per element (Higham, Accuracy and Stability of
Numerical Algorithms, 2nd ed., sections 3.1 and 3.5).

gamma_k(u) = k u / (1 - k u) bounds the relative error of k chained roundings.
A sum or dot product of length k computed in a dtype with unit roundoff u has
|computed - exact| <= gamma_k(u) * sum |terms|. The bounds below are for
|kernel - exact| (the FP64 golden), given the kernel's rounding plan and
schedule; the reduction length is always an argument, stated by the caller.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:                   # goldens.schedule imports the operator, whose gate imports this module
    from goldens.schedule import TiledSchedule

UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24,
                 torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def unit_roundoff(dtype: torch.dtype | None) -> float:
    return 0.0 if dtype is None else UNIT_ROUNDOFF[dtype]


def gamma(k: int, u: float) -> float:
    """k u / (1 - k u); infinite once k u >= 1 (the model then bounds nothing)."""
    ku = k * u
    return float("inf") if ku >= 1 else ku / (1 - ku)


def accumulator_roundoff(sched: TiledSchedule, kernel: str) -> float:
    """Unit roundoff of the b ("b") or w ("w") kernel's cross-tile accumulation: 0 when it
    accumulates in the math dtype itself (no cast of the partials)."""
    acc = sched.accumulator(kernel)
    return 0.0 if acc == sched.plan.math else unit_roundoff(acc)


def accumulation_bound(partials_abs: torch.Tensor, tiles: int, u_acc: float, u_math: float) -> torch.Tensor:
    """|tiled - global sum| after ``tiles`` tiles (Higham's recursive summation):
    [u_acc + gamma_{T-1}(u_acc)(1 + u_acc) + gamma_T(u_math)] * sum_t |partial_t|."""
    rel = u_acc + gamma(tiles - 1, u_acc) * (1 + u_acc) + gamma(tiles, u_math)
    return rel * partials_abs


def reduction_bound(abs_terms: torch.Tensor, exact: torch.Tensor, *, length: int, sched: TiledSchedule,
                    kernel: str, inputs_stored: str | None, output: str,
                    elementwise_ops: int = 0) -> torch.Tensor:
    """A sum of ``length`` terms (rows of M for db/dw) done as the schedule does it:
    per-tile partials in the math dtype, cast to the accumulator and added across
    n_tiles tiles, then stored.

    bound = [gamma_len(u_math) + u_in + gamma_ops(u_math) + u_acc + gamma_{T-1}(u_acc)] * sum|terms|
            + u_store * |exact|
    u_in is the rounding of stored inputs (SwiGLU's dg/dfc stored in BF16 before the w kernel
    reads them); ops = ``elementwise_ops``, the math-dtype roundings of each term before it is
    summed (the operator's element-wise math); u_acc the cast of each partial; T the number of
    tiles. ``kernel``: the kernel whose tiles and accumulator cut the sum; ``output``: the
    rounding plan's point of its store.
    """
    plan = sched.plan
    u_math = unit_roundoff(plan.math)
    u_acc = accumulator_roundoff(sched, kernel)
    n_tiles = sched.n_tiles(length, kernel)
    u_in = unit_roundoff(plan.rounding(inputs_stored)) if inputs_stored else 0.0
    relative = (gamma(length, u_math) + u_in + gamma(elementwise_ops, u_math)
                + (u_acc if n_tiles > 1 else 0.0) + gamma(max(n_tiles - 1, 0), u_acc))
    return relative * abs_terms + unit_roundoff(plan.rounding(output)) * exact.abs()
