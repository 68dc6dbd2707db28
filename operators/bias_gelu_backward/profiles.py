"""Bias + GELU backward's scale profiles, M edges, shapes and acceptance case.

Each profile takes the case's seeded ``torch.Generator`` and (M, N) and returns x [M, N],
b [1, N] and dy [M, N] (``cases.spec.make_inputs`` rounds them to BF16). Never the global RNG.
"""
from __future__ import annotations

import torch

# The M axis: 1 and 2 (a partial row), either side of a 1024-row tile (db's cross-tile
# accumulation), 4097 (five tiles, a one-row tail)
M_EDGES = (1, 2, 1023, 1024, 1025, 4097)
# N: an MLP's width and a small one that is no multiple of a vector width
SHAPES = ((1024,), (200,))
# a GPT-2-small MLP (N = 3072) over 4096 tokens: (M, N, scale, seed)
ACCEPTANCE_CASE = (4096, 3072, "unit", 0)


def _randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def _unit(gen, m, n):
    """Order-one pre-activations and gradients."""
    return {"x": _randn(gen, m, n), "b": 0.5 * _randn(gen, 1, n), "dy": _randn(gen, m, n)}


def _near_zero_slope(gen, m, n):
    """h = x + b near -0.7518, where GELU' crosses zero: the derivative cancels, and the rounding
    of a stored h moves dx by GELU'' / GELU' of its spacing, not by its relative size."""
    return {"x": -0.75 + 0.05 * _randn(gen, m, n), "b": 0.01 * _randn(gen, 1, n), "dy": _randn(gen, m, n)}


def _saturating(gen, m, n):
    """|h| ~ 8: GELU' is 1 or 0 to FP32's precision; phi(h) ~ 1e-14 in the far tail."""
    return {"x": 8 * _randn(gen, m, n), "b": _randn(gen, 1, n), "dy": _randn(gen, m, n)}


def _cancellation(gen, m, n):
    """Rows in pairs with the same x and opposite dy, 1% apart: db's column sums cancel."""
    half = (m + 1) // 2
    x = _randn(gen, half, n)
    d = _randn(gen, half, n)
    dy = torch.stack([d, -d * (1 + 0.01 * _randn(gen, half, n))], dim=1).reshape(2 * half, n)[:m]
    return {"x": x.repeat_interleave(2, dim=0)[:m].contiguous(), "b": 0.5 * _randn(gen, 1, n), "dy": dy.contiguous()}


def _tiny(gen, m, n):
    """dy near the bottom of the normal range (2^-124): dx and db among the BF16 subnormals."""
    t = _unit(gen, m, n)
    t["dy"] = t["dy"] * 2.0 ** -124
    return t


SCALES = {"unit": _unit, "near_zero_slope": _near_zero_slope, "saturating": _saturating,
          "cancellation": _cancellation, "tiny": _tiny}
