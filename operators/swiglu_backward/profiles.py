"""SwiGLU backward's scale profiles: how each draws the inputs from the case's generator.

Each takes the case's seeded ``torch.Generator`` and (M, K, N) and returns the six inputs in
float32 or BF16; ``cases.spec.make_inputs`` rounds them to BF16 and checks them against the
contract. Never the global RNG: the same case gives the same bits on every machine.
"""
from __future__ import annotations

import math

import torch

# The matrix's M axis. Why each M:
# 1, 2       - a single partial row: tail tile with valid_m = 1, 2 and nothing else
# 1023..1025 - either side of the b/x kernels' tile_m = 1024 (ragged final tile of 1023 / 1 rows)
# 2047..2049 - either side of the w kernel's tile_m = 2048
# 3000       - 3 b-tiles (tail 952), 2 w-tiles (tail 952): tails in every kernel at once
# 4097       - 5 b-tiles, 3 w-tiles, with a 1-row tail in both
# 220000     - the article's case (215 b-tiles, 108 w-tiles, tail 1824 / 864 rows)
M_EDGES = (1, 2, 1023, 1024, 1025, 2047, 2048, 2049, 3000, 4097, 220000)
# (K, N): the article's, and a small odd pair with no dimension a multiple of the cube tiles (128, 256)
SHAPES = ((512, 1024), (96, 200))
# The case the article's acceptance criterion names: (M, K, N, scale, seed)
ACCEPTANCE_CASE = (220000, 512, 1024, "seed", 0)


def _randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def _seed_scale(gen, m, k, n):
    """The article's case: activations randn/sqrt(M), weights randn/sqrt(K). Each tensor is
    scaled in place and stored in BF16 as soon as it is drawn (the same bits as scaling a copy):
    at M=220000 one FP32 tensor (0.9 GB) is alive at a time instead of all four and a temporary
    (4 GB)."""
    a = 1 / math.sqrt(m)

    def draw(rows, cols, times=None, over=None):
        t = _randn(gen, rows, cols)
        return (t.mul_(times) if over is None else t.div_(over)).to(torch.bfloat16)

    return {"x": draw(m, k, a), "w_g": draw(k, n, over=math.sqrt(k)), "w_fc": draw(k, n, over=math.sqrt(k)),
            "dy": draw(m, n, a), "g": draw(m, n, a), "fc": draw(m, n, a)}


def _unit(gen, m, k, n):
    """Order-one activations: sigmoid(g) spans (0.1, 0.9), so the SiLU derivative is exercised
    (at the seed scale |g| ~ 2e-3 and sigmoid is 0.5 to three digits)."""
    return {"x": _randn(gen, m, k), "w_g": _randn(gen, k, n) / math.sqrt(k),
            "w_fc": _randn(gen, k, n) / math.sqrt(k), "dy": _randn(gen, m, n),
            "g": _randn(gen, m, n), "fc": _randn(gen, m, n)}


def _saturating(gen, m, k, n):
    """|g| up to ~240 (60 sigma): 14% of g above 88.7 overflow exp in FP32, where the
    article's sigmoid exp(g)/(1+exp(g)) becomes inf/inf = NaN; a stable sigmoid saturates to 1."""
    t = _unit(gen, m, k, n)
    t["g"] = t["g"] * 60
    # at least one element per tile-row block is beyond the overflow point, whatever the draw
    t["g"][::7, ::5] = 100.0
    return t


def _cancellation(gen, m, k, n):
    """Rows in pairs (2i, 2i+1) with the same x, g, fc and dy of opposite sign, 1% apart:
    db and dw are sums whose terms cancel to ~1% of their absolute sum."""
    t = _unit(gen, m, k, n)
    half = (m + 1) // 2
    for name in ("x", "g", "fc"):
        t[name] = t[name][:half].repeat_interleave(2, dim=0)[:m].contiguous()
    dy = t["dy"][:half]
    paired = torch.stack([dy, -dy * (1 + 0.01 * _randn(gen, half, n))], dim=1).reshape(2 * half, n)
    t["dy"] = paired[:m].contiguous()
    return t


def _tiny(gen, m, k, n):
    """dy near the bottom of the normal range (2^-124 ~ 4.7e-38): dg/dfc and db land among
    FP32/BF16 subnormals (below 2^-126 ~ 1.2e-38), where a flush-to-zero kernel differs."""
    t = _unit(gen, m, k, n)
    t["dy"] = t["dy"] * 2.0 ** -124
    return t


def _outliers(gen, m, k, n):
    """Unit scale plus 0.1% of dy and x entries multiplied by 2^10: a few huge terms dominate
    sums, stressing relative gates and per-tile accumulation."""
    t = _unit(gen, m, k, n)
    for name in ("dy", "x"):
        mask = torch.rand(t[name].shape, generator=gen) < 1e-3
        t[name] = torch.where(mask, t[name] * 1024.0, t[name])
    return t


def _below_fp16(gen, m, k, n):
    """Every input at the unit scale times 2^-20 (dy, g, fc, x ~ 1e-6; weights ~ 1e-7), inside BF16's
    normal range and below FP16's (6.1e-5): a kernel that stages any input through FP16 keeps at
    most 4 of its bits there. Measured (M=1025 and 2049, K=96, N=200): FP16-staged dy, g, fc, x or
    w_g each fail, PyTorch's backward and FP32/FP64 plain kernels pass; every output stays above
    BF16's smallest normal (dw ~ 2^-60)."""
    return {name: t * 2.0 ** -20 for name, t in _unit(gen, m, k, n).items()}


def _above_fp16(gen, m, k, n):
    """x, dy, fc times 2^17 and weights drawn at randn x 2^17 (not / sqrt(K)): about half of them
    beyond FP16's largest value 65504, so a kernel staging one through FP16 gets inf; g stays at the
    unit scale, where every sigmoid form is finite and its derivative is exercised. Outputs stay
    far inside FP32 and BF16 (dw ~ 2^56 at M=1025)."""
    t = _unit(gen, m, k, n)
    for name in ("x", "dy", "fc"):
        t[name] = t[name] * 2.0 ** 17
    for name in ("w_g", "w_fc"):
        t[name] = t[name] * (math.sqrt(k) * 2.0 ** 17)
    return t


def _g_above_fp16(gen, m, k, n):
    """g of either sign at 2^16 (1 + |randn|): every element beyond FP16's largest value 65504, so
    a kernel staging g through FP16 in g (1 - s) gets +-inf there and then inf * 0 = NaN in dg
    (staged in the sigmoid's argument alone it is harmless: sigmoid(+-inf) is the same 1 or 0).
    Every |g| is above 2^16, far past the point where sigmoid is exactly 0 or
    1 in FP32 (|g| > ~104): no element's value depends on whether the platform flushes subnormals,
    and every accurate sigmoid form gives the same s, the reference's. dg is dy fc where g > 0 and
    0 where g < 0; dfc dy g or 0 (~1e5). The article's exp(g) / (1 + exp(g)) is NaN at every
    positive g, as at the saturating profile."""
    t = _unit(gen, m, k, n)
    g = t["g"]
    t["g"] = torch.where(g < 0, -1.0, 1.0) * 2.0 ** 16 * (1 + g.abs())
    return t


def _sigmoid_tail(gen, m, k, n):
    """g uniform in [-16, -14], one-sided (nothing of order one beside it to lift the rms and the
    atol): sigmoid ~ 3e-7, where 0.5 (1 + tanh(g/2)) cancels to about one FP32 bit and is 10% off
    (measured: that form fails all seven outputs at M=1025 and 2049, the exp forms pass). Kept above
    g = -87, where exp(g) would leave FP32's normal range and the result would depend on whether
    the platform flushes subnormals."""
    t = _unit(gen, m, k, n)
    t["g"] = -16.0 + 2.0 * torch.rand(m, n, generator=gen)
    return t


SCALES = {"seed": _seed_scale, "unit": _unit, "saturating": _saturating,
          "cancellation": _cancellation, "tiny": _tiny, "outliers": _outliers,
          "below_fp16": _below_fp16, "above_fp16": _above_fp16, "g_above_fp16": _g_above_fp16,
          "sigmoid_tail": _sigmoid_tail}
# One case each in the quick matrix (``Operator.range_cases``), at tile edges of the small shape:
# 2049 (w tile + 1), 1025 (b/x tile + 1), 1024 (one whole b/x tile), 3000 (tails in every kernel)
RANGE_CASES = ((2049, 96, 200, "below_fp16", 0), (1025, 96, 200, "above_fp16", 0),
               (1024, 96, 200, "g_above_fp16", 0), (3000, 96, 200, "sigmoid_tail", 0))
