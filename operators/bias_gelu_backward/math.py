"""Bias + GELU backward's math, written once against ``ops`` (``accuracy.derived``).

Forward: y = gelu(x + b) with the exact (erf) GELU, b [1, N] broadcast over the M rows.
Backward: dx = dy * gelu'(h) with h = x + b and gelu'(h) = Phi(h) + h phi(h); db = sum over M of dx.

Legitimate choices, as rounding points: ``h`` (a forward that saves its pre-activation in BF16:
PyTorch's BF16 autograd computes x + b in BF16) and ``dx_sum`` (db summed from dx as stored in
BF16, or from the FP32 values). Everything else is FP32 math in any accurate form, and db any
FP32 summation order within tiles of up to 8192 rows. Nothing here is an allowance: the gate's
is derived from this function (``accuracy.propagation``).
"""
from __future__ import annotations

import math as _math

SQRT_HALF = _math.sqrt(0.5)
INV_SQRT_2PI = 1 / _math.sqrt(2 * _math.pi)

POINTS = {"h": "x + b stored in BF16 before GELU' (a forward that saves its pre-activation)",
          "dx_sum": "db summed from dx as stored in BF16 or as computed in FP32"}


def gelu_grad(ops, h):
    """Phi(h) + h phi(h): the exact GELU's derivative."""
    cdf = 0.5 * (1 + ops.erf(h * SQRT_HALF))
    pdf = ops.exp(h * h * -0.5) * INV_SQRT_2PI
    return cdf + h * pdf


def backward(ops, t):
    """``t``: x, b, dy by name. Returns the row outputs and the reductions' operands."""
    h = ops.store("h", t["x"] + t["b"])
    dx = t["dy"] * gelu_grad(ops, h)
    return {"dx": dx}, {"db": (None, ops.store("dx_sum", dx))}
