"""An independent torch computation of the Triton kernels' math, for their tests.

Deliberately written without the project's goldens (``goldens/``), so a bug shared
by a golden and a kernel cannot hide: plain torch, FP32 math, a BF16 store where
the kernel stores, and the kernel's cross-tile accumulation:

* deterministic: per-tile FP32 partial (over the tile's valid rows), rounded to
  BF16, added in tile order into a BF16 running value (``acc = bf16(acc + p)``);
* atomic: the FP32 partials added in FP32 (tile order here; any order on a GPU),
  rounded to BF16 once.

What differs from the kernel, and so sets the tests' tolerances: the FP32
summation order inside a tile (torch's sum / matmul blocking vs the kernel's
block loop) and the exp implementation (torch vs numpy in the interpreter,
ex2.approx on CUDA). Both move an FP32 value by a few FP32 ULPs, i.e. by far
less than a BF16 ULP (2^16 FP32 ULPs), but can flip a BF16 rounding.
"""
from __future__ import annotations

import torch

BF16, F32 = torch.bfloat16, torch.float32


def _r(t: torch.Tensor) -> torch.Tensor:
    """Round FP32 to BF16 and back (the value a BF16 store leaves)."""
    return t.to(BF16).to(F32)


def elementwise(dy, g, fc, exp_ratio: bool = False):
    """dg, dfc in FP32, in the article's operation order (before the BF16 store)."""
    dy, g, fc = dy.to(F32), g.to(F32), fc.to(F32)
    if exp_ratio:
        e = torch.exp(g)
        s = e / (1 + e)
    else:
        s = 1 / (1 + torch.exp(-g))
    dg = (dy * fc) * (s * (1 + g * (1 - s)))
    dfc = dy * (g * s)
    return dg, dfc


def _tiled_sum(parts: list[torch.Tensor], acc_bf16: bool) -> torch.Tensor:
    if acc_bf16:
        acc = torch.zeros_like(parts[0])
        for p in parts:
            acc = _r(acc + _r(p))
        return acc
    acc = torch.zeros_like(parts[0])
    for p in parts:
        acc = acc + p
    return _r(acc)


def reference(inputs: dict, *, tile_m_b: int, tile_m_w: int, acc_bf16: bool,
              exp_ratio: bool = False) -> dict[str, torch.Tensor]:
    """The seven outputs as FP32 tensors holding BF16 values."""
    x, w_g, w_fc = (inputs[n].to(F32) for n in ("x", "w_g", "w_fc"))
    dg, dfc = elementwise(inputs["dy"], inputs["g"], inputs["fc"], exp_ratio)
    m = x.shape[0]
    dg_s, dfc_s = _r(dg), _r(dfc)
    db_g = _tiled_sum([dg[i:i + tile_m_b].sum(0, keepdim=True) for i in range(0, m, tile_m_b)], acc_bf16)
    db_fc = _tiled_sum([dfc[i:i + tile_m_b].sum(0, keepdim=True) for i in range(0, m, tile_m_b)], acc_bf16)
    dw_g = _tiled_sum([x[i:i + tile_m_w].t() @ dg_s[i:i + tile_m_w] for i in range(0, m, tile_m_w)], acc_bf16)
    dw_fc = _tiled_sum([x[i:i + tile_m_w].t() @ dfc_s[i:i + tile_m_w] for i in range(0, m, tile_m_w)], acc_bf16)
    dx = _r(dg_s @ w_g.t() + dfc_s @ w_fc.t())
    return {"dg": dg_s, "dfc": dfc_s, "db_g": db_g, "db_fc": db_fc, "dw_g": dw_g, "dw_fc": dw_fc, "dx": dx}


def bf16_ulps(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Distance in BF16 steps between two tensors of BF16 values (int64; NaN-aware:
    NaN vs NaN is 0, NaN vs a number is a huge distance). Counts the representable
    BF16 values between them, across binades and through zero."""
    def ordinal(t):
        i = t.to(BF16).view(torch.int16).to(torch.int64)
        return torch.where(i < 0, -(i & 0x7FFF), i)   # sign-magnitude -> monotone integers
    a, e = actual.to(F32), expected.to(F32)
    d = (ordinal(a) - ordinal(e)).abs()
    both_nan = torch.isnan(a) & torch.isnan(e)
    one_nan = torch.isnan(a) ^ torch.isnan(e)
    d = torch.where(both_nan, torch.zeros_like(d), d)
    return torch.where(one_nan, torch.full_like(d, 1 << 20), d)
