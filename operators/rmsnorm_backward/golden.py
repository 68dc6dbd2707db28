"""RMSNorm backward's golden for one chunk of rows under one rounding plan, and the term sums
its allowance reads.

The framework streams M in chunks (``goldens.stream.GoldenPass``) and calls ``chunk`` per plan:
dx is a row output (its reduction over N stays inside the row); dw is a sum over M of
dy * xhat, returned as operands that the framework sums in canonical blocks and tiles.

With ``terms`` (the reference's pass), the chunk also keeps, from the FP64 values:

* dx's row terms (``RowTerms``): the per-element terms r |g| and r |xhat c| that one rounding
  each can move (g = dy w or xhat stored in BF16), and the row's sums over N through which the
  roundings of every g_j and xhat_j reach c: sum_j (g_j xhat_j)^2 and sum_j |g_j xhat_j|;
* dw's term sums (``accuracy.term_sums.ReductionTermSums``) per canonical block: sum |t|, and the
  variance of each term's legitimate roundings (xhat stored: spacing(xhat)^2 dy^2 / 12; the
  product stored: spacing(t)^2 / 12; an FP32 rstd recomputed: (u32 sqrt(N/3) t)^2).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from accuracy.term_sums import ReductionTermSums
from accuracy.ulp import bf16_spacing
from contract.operator import ChunkGolden
from operators.rmsnorm_backward.math import backward_rows

U_FP32 = 2.0 ** -24
# a kernel rounds its FP32 value, whose binade is at most that of |exact| (1 + 2^-7): the spacing
# is taken there (as SwiGLU's golden does)
STORE_BINADE_MARGIN = 1 + 2.0 ** -7


@dataclass
class RowTerms:
    """dx's term sums for a block of rows (float64): ``single`` = r (|g| + |xhat c|) [rows, N],
    ``scale`` = r |xhat| [rows, N], ``c_sq`` = sum_j (g_j xhat_j)^2 and ``c_abs`` = sum_j |g_j xhat_j|
    [rows, 1], ``xhat_l1`` = sum_j |xhat_j| [rows, 1], ``r`` [rows, 1]; ``abs`` = single + scale c_abs / N,
    the sum of |terms| of each element; ``shared`` = sum_m var(c_m) (r_m sum_n xhat_mn dx_mn)^2 for the
    fitted scale (one c_m moves a whole row), with var(c_m) = (u / N)^2 (2/3) c_sq."""
    single: torch.Tensor
    scale: torch.Tensor
    c_sq: torch.Tensor
    c_abs: torch.Tensor
    xhat_l1: torch.Tensor
    r: torch.Tensor
    abs: torch.Tensor
    shared: float
    shared_rows: torch.Tensor | None = None    # ``shared`` per row [rows]


def term_sums(inputs: Mapping[str, torch.Tensor]) -> ReductionTermSums:
    return ReductionTermSums()


def _row_terms(r, xhat, g, c, dx) -> RowTerms:
    n = xhat.shape[-1]
    gx = g * xhat
    single = r * (g.abs() + (xhat * c).abs())
    scale = r * xhat.abs()
    c_sq = gx.square().sum(-1, keepdim=True)
    c_abs = gx.abs().sum(-1, keepdim=True)
    var_c = (2.0 ** -8 / n) ** 2 * (2 / 3) * c_sq
    along = r * (xhat * dx).sum(-1, keepdim=True)
    shared_rows = (var_c * along.square()).double().reshape(-1)
    shared = float((var_c * along.square()).sum())
    return RowTerms(single, scale, c_sq, c_abs, xhat.abs().sum(-1, keepdim=True), r,
                    single + scale * c_abs / n, shared, shared_rows)


def _add_dw_terms(terms: ReductionTermSums, dy: torch.Tensor, xhat: torch.Tensor, t: torch.Tensor, block: int) -> None:
    n = xhat.shape[-1]
    order = U_FP32 * math.sqrt(n / 3)        # an FP32 rstd recomputed: a sum of n squares in another order
    var = (bf16_spacing(xhat.abs() * STORE_BINADE_MARGIN) * dy.abs()).square_()
    var += bf16_spacing(t.abs() * STORE_BINADE_MARGIN).square_()
    var /= 12
    var += (order * t).square_()
    terms.add_rows("dw", t.abs(), var, block)


def chunk(rows: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor], plan, *, want_rows: bool,
          terms: ReductionTermSums | None = None, raw: Mapping[str, torch.Tensor] | None = None,
          block: int = 1024, start: int = 0) -> ChunkGolden:
    """``rows``: x, dy of this chunk in the plan's math dtype; ``weights``: w [1, N] in it."""
    r, xhat, g, c, dx, t = backward_rows(rows["x"], rows["dy"], weights["w"], plan, want_dx=want_rows)
    out = {"dx": dx} if want_rows else {}
    row_terms = None
    if terms is not None:
        if want_rows:
            row_terms = _row_terms(r, xhat, g, c, dx)
        _add_dw_terms(terms, rows["dy"], xhat, t, block)
    return ChunkGolden(out, {"dw": (None, t)}, row_terms)
