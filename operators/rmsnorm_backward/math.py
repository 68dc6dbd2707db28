"""RMSNorm's math, in whatever dtype its inputs are in (FP64 for the reference, FP32 for a kernel).

Forward: y = x * r * w with r = rsqrt(mean_n x^2 + eps) per row, xhat = x r.
Backward, with g = dy * w and c = mean_n (g * xhat) per row:

    dx = r * (g - xhat * c)          (the projection xhat * c removes the part along x)
    dw = sum over M of dy * xhat

Every rounding a plan names is applied where the plan says (``operators.rmsnorm_backward.schedule``).
"""
from __future__ import annotations

import torch

from goldens.rounding import round_to

EPS = 1e-6     # the eps every backend of this operator is called with


def rstd(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """1 / sqrt(mean(x^2) + eps) per row, [rows, 1], in x's dtype."""
    return torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


def backward_rows(x: torch.Tensor, dy: torch.Tensor, w: torch.Tensor, plan, *, want_dx: bool = True):
    """(r, xhat, g, c, dx, dw_terms) of these rows under ``plan`` (``dx``, ``g``, ``c`` None
    without ``want_dx``); x, dy [rows, N] and w [1, N] in the plan's math dtype. dx is stored per
    the plan; dw_terms (dy * xhat, stored per the plan's ``dw_term``) are what dw sums over M."""
    r = round_to(rstd(x), plan.rounding("rstd"))
    xhat = round_to(x * r, plan.rounding("xhat"))
    g = c = dx = None
    if want_dx:
        g = round_to(dy * w, plan.rounding("g"))
        c = (g * xhat).sum(-1, keepdim=True) / x.shape[-1]
        dx = round_to(r * (g - xhat * c), plan.rounding("dx"))
    terms = round_to(dy * xhat, plan.rounding("dw_term"))
    return r, xhat, g, c, dx, terms
