"""Products of the rounding model's non-negative matrices, bounded from above by one FP32 product.

The rounding model carries variances and worst cases through matmuls: (c^2 / 3) @ w^2 and
|c| @ |w| for each channel of each point (SwiGLU's dx: 20 products of [rows, N] x [N, K] a
block). They are bounds, not values a kernel computes, so they need to be upper bounds, not
exact: one FP32 product (2.3x an FP64 one's speed on the AVX-512 hosts measured, 10.3 ms
against 23.4 ms at [2048, 1024] x [1024, 512]) gives one, scaled so that FP32's range loses
nothing that matters and enlarged by its own rounding error's bound.

``upper_product(x, y)``, x [M, N] and y [N, K] non-negative FP64: each row of x and each column
of y is scaled by a power of two (exact) so that its largest element is in [1/2, 1), cast to
FP32 and multiplied; the result, scaled back, is enlarged by

* the cast and the accumulation: every term is at most (1 + u)^2 its FP32 one (u = 2^-24), and
  a sum of n non-negative FP32 terms in any order is at least 1 / (1 + gamma_n) their exact sum
  (Higham's gamma_n = n u / (1 - n u), ``accuracy.bounds.gamma``), so the exact one is at most
  (1 + gamma_n) (1 + u)^2 the computed one;
* the underflow: a scaled element below 2^-126 (a value 2^126 below its row's or column's
  largest) may cast to a subnormal or to 0, an absolute error of at most 2^-150, and a product
  or a partial sum among the subnormals one of at most 2^-150 more; n 2^-148 in all, scaled
  back (below 2^-138 times the row's largest x and the column's largest y at n = 1024).

So the result is never below the exact FP64 product: an allowance built on it may grow by
about (n + 2) u relative (6e-5 at n = 1024), never shrink. ``tests/core/test_products.py`` checks it
against FP64 products over 2^250 of dynamic range.

``ScaledFactor(x).times(y)``, signed: the same scaled FP32 product as an estimate, for sums that
are estimates themselves (a legitimate path's operand errors carried through a contraction, which
the fitted scale's bias reads: its relative error, about sqrt(n) u, is 1e-6 of a bias of 1e-4).
"""
from __future__ import annotations

import torch

from accuracy.bounds import UNIT_ROUNDOFF, gamma

U_FP32 = UNIT_ROUNDOFF[torch.float32]
ZERO_EXPONENT = -1000


def _scales(t: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per slice along ``dim`` (kept, size 1), the powers of two 2^-e and 2^e with the slice's
    largest element times 2^-e in [1/2, 1); 2^e = 2^-1000 for an all-zero slice, so that the
    underflow term its products get is below anything FP64 holds beside a value: 0."""
    return _powers(t.amax(dim, keepdim=True))


def _powers(top: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``_scales`` of slices whose largest elements are ``top``."""
    _, e = torch.frexp(top)
    e = torch.where(top > 0, e, torch.full_like(e, ZERO_EXPONENT)).double()
    return torch.exp2(-e), torch.exp2(e)


def _scaled_to_fp32(t: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``t`` (FP64, non-negative) with each slice along ``dim`` scaled into [0, 1) by a power of
    two (exact), in FP32, and the powers of two that undo it."""
    down, up = _scales(t, dim)
    return (t * down).float(), up


def _signed_to_fp32(t: torch.Tensor, dim: int, scratch: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``_scaled_to_fp32`` of a ``t`` of either sign, its slices' largest |element| from their
    extremes; scaled in place where ``t`` is ``scratch`` (nobody else reads it)."""
    low, high = torch.aminmax(t, dim=dim, keepdim=True)
    down, up = _powers(torch.maximum(high, -low))
    return (t.mul_(down) if scratch else t * down).float(), up


def upper_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """An upper bound on x @ y (non-negative FP64) from one FP32 product (see the module's docstring)."""
    n = x.shape[-1]
    xs, x_up = _scaled_to_fp32(x, 1)
    ys, y_up = _scaled_to_fp32(y, 0)
    out = (xs @ ys).double()
    out.add_(n * 2.0 ** -148).mul_(x_up * ((1 + gamma(n, U_FP32)) * (1 + U_FP32) ** 2)).mul_(y_up)
    return out


class ScaledFactor:
    """x (FP64, either sign) scaled per row into FP32 once, for several estimates x @ y from one
    FP32 product each (see the module's docstring; a piece's bias paths multiply one x^T by each
    path's operand errors)."""

    def __init__(self, x: torch.Tensor):
        self.scaled, self.up = _signed_to_fp32(x, 1)

    def times(self, y: torch.Tensor, scratch: bool = False) -> torch.Tensor:
        """x @ y in FP64, y (FP64) scaled per column (in place where it is ``scratch``)."""
        ys, y_up = _signed_to_fp32(y, 0, scratch)
        return (self.scaled @ ys).double().mul_(self.up).mul_(y_up)
