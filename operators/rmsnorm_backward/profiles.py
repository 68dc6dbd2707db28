"""RMSNorm backward's scale profiles, M edges, shapes and acceptance case.

Each profile takes the case's seeded ``torch.Generator`` and (M, N) and returns x [M, N],
w [1, N] and dy [M, N] (``cases.spec.make_inputs`` rounds them to BF16). Never the global RNG.
"""
from __future__ import annotations

import torch

# The M axis. Why each M:
# 1, 2        - a single partial row; mean over the wrong axis is invisible at M = 1
# 1023..1025  - either side of the tiled loop's 1024-row tile (dw's cross-tile accumulation)
# 2049        - three tiles, a 1-row tail
# 4097        - five tiles, a 1-row tail
# 8192        - the acceptance case (8 tiles)
M_EDGES = (1, 2, 1023, 1024, 1025, 2049, 4097, 8192)
# N: a model's hidden size (1024) and a small one that is no multiple of a vector width (200)
SHAPES = ((1024,), (200,))
# A LLaMA-7B hidden size over 8192 tokens: (M, N, scale, seed)
ACCEPTANCE_CASE = (8192, 4096, "unit", 0)


def _randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def _unit(gen, m, n):
    """Order-one activations and gradients; w around 1 (some weights negative)."""
    return {"x": _randn(gen, m, n), "w": 1 + 0.5 * _randn(gen, 1, n), "dy": _randn(gen, m, n)}


def _small_rms(gen, m, n):
    """x ~ 2^-10: mean(x^2) ~ 1e-6 is eps itself, so where eps enters matters (outside the
    square root it is a 2x error)."""
    t = _unit(gen, m, n)
    t["x"] = t["x"] * 2.0 ** -10
    return t


def _cancellation(gen, m, n):
    """Rows in pairs with the same x and opposite dy, 1% apart (dw's column sums cancel to ~1% of
    their absolute sum), and dy ~ x / w plus 1% noise, so g = dy w lies almost along x and dx's
    projection g - xhat c cancels to ~1% of g."""
    half = (m + 1) // 2
    x = _randn(gen, half, n)
    w = 0.5 + torch.rand(1, n, generator=gen)
    d = x / w + 0.01 * _randn(gen, half, n)
    dy = torch.stack([d, -d * (1 + 0.01 * _randn(gen, half, n))], dim=1).reshape(2 * half, n)[:m]
    return {"x": x.repeat_interleave(2, dim=0)[:m].contiguous(), "w": w, "dy": dy.contiguous()}


def _tiny(gen, m, n):
    """dy near the bottom of the normal range (2^-124): dx and dw among the BF16 subnormals."""
    t = _unit(gen, m, n)
    t["dy"] = t["dy"] * 2.0 ** -124
    return t


def _outliers(gen, m, n):
    """0.1% of x and dy multiplied by 2^10: one element dominates its row's rms."""
    t = _unit(gen, m, n)
    for name in ("dy", "x"):
        mask = torch.rand(t[name].shape, generator=gen) < 1e-3
        t[name] = torch.where(mask, t[name] * 1024.0, t[name])
    return t


SCALES = {"unit": _unit, "small_rms": _small_rms, "cancellation": _cancellation, "tiny": _tiny,
          "outliers": _outliers}
