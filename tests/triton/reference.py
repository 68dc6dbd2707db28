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
              exp_ratio: bool = False, stored: tuple | None = None) -> dict[str, torch.Tensor]:
    """The seven outputs as FP32 tensors holding BF16 values.

    ``stored``: the kernel's own BF16 (dg, dfc), to be fed to dw and dx instead of the
    reference's. dg/dfc are checked on their own (<= 1 ULP); one ULP off there moves dw
    and dx by |x| or |w| times that ULP, which is the b kernel's difference, not the
    w or x kernel's, so each kernel is checked on its own inputs.
    """
    x, w_g, w_fc = (inputs[n].to(F32) for n in ("x", "w_g", "w_fc"))
    dg, dfc = elementwise(inputs["dy"], inputs["g"], inputs["fc"], exp_ratio)
    m = x.shape[0]
    dg_s, dfc_s = _r(dg), _r(dfc)
    if stored is not None:
        dg_in, dfc_in = (t.to(F32) for t in stored)
    else:
        dg_in, dfc_in = dg_s, dfc_s
    db_g = _tiled_sum([dg[i:i + tile_m_b].sum(0, keepdim=True) for i in range(0, m, tile_m_b)], acc_bf16)
    db_fc = _tiled_sum([dfc[i:i + tile_m_b].sum(0, keepdim=True) for i in range(0, m, tile_m_b)], acc_bf16)
    dw_g = _tiled_sum([x[i:i + tile_m_w].t() @ dg_in[i:i + tile_m_w] for i in range(0, m, tile_m_w)], acc_bf16)
    dw_fc = _tiled_sum([x[i:i + tile_m_w].t() @ dfc_in[i:i + tile_m_w] for i in range(0, m, tile_m_w)], acc_bf16)
    dx = _r(dg_in @ w_g.t() + dfc_in @ w_fc.t())
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


# --- how far a correct kernel may sit from ``reference`` -------------------------------------
#
# Kernel and reference compute the same FP32 sums in different orders. Two orders of
# an L-term FP32 sum each sit within gamma_L * sum|terms| of the exact sum (Higham,
# gamma_L = L u / (1 - L u), u = 2^-24), so they differ by at most 2 gamma_L sum|terms|.
# A BF16 rounding after that can flip to the neighbouring value: one more spacing at
# the larger magnitude. For random data that is ~1e-5 of a BF16 ULP on almost every
# element; only where the sum cancels (|sum| << sum|terms|) is it several ULPs of the
# tiny result (measured: dx up to 154 ULPs on an element of ~1e-3 of its terms' size).

U32 = 2.0 ** -24


def gamma(length: int) -> float:
    return length * U32 / (1 - length * U32)


def spacing(v: torch.Tensor) -> torch.Tensor:
    """Gap between BF16 neighbours at |v| (float64); subnormal spacing 2^-133 below 2^-126."""
    mag = v.double().abs().clamp(min=2.0 ** -126)
    return torch.exp2(torch.floor(torch.log2(mag)) - 7)


def _flip(value: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """order bound plus one BF16 spacing at the largest magnitude either side can reach."""
    return order + spacing(value.double().abs() * (1 + 2.0 ** -8) + order)


def tolerance(inputs: dict, ref: dict, *, tile_m_b: int, tile_m_w: int, acc_bf16: bool,
              exp_ratio: bool = False, stored: tuple | None = None) -> dict[str, torch.Tensor]:
    """Per-element absolute tolerance (float64) of each reduction output against ``reference``.

    dg and dfc are not here: same formula, same order, so they are held to 1 BF16 ULP
    (only exp differs: numpy's or CUDA's ex2.approx vs torch's, a few FP32 ULPs).
    """
    x, w_g, w_fc = (inputs[n].double().abs() for n in ("x", "w_g", "w_fc"))
    dg, dfc = elementwise(inputs["dy"], inputs["g"], inputs["fc"], exp_ratio)
    m, n = dg.shape
    dg_b, dfc_b = (_r(dg), _r(dfc)) if stored is None else (t.to(F32) for t in stored)
    dg_s, dfc_s = dg_b.double().abs(), dfc_b.double().abs()
    dg_a, dfc_a = dg.double().abs(), dfc.double().abs()
    tol = {}

    def chain(terms_abs, values, tile):
        """terms_abs(i, j) -> sum|terms| of tile [i, j); values(i, j) -> FP32 partial."""
        if not acc_bf16:
            total_abs = sum(terms_abs(i, min(i + tile, m)) for i in range(0, m, tile))
            order = 2 * gamma(m) * total_abs
            total = sum(values(i, min(i + tile, m)) for i in range(0, m, tile))
            return _flip(total, order)
        err, acc = None, None
        for i in range(0, m, tile):
            j = min(i + tile, m)
            part = values(i, j).double()
            d_p = _flip(part, 2 * gamma(j - i) * terms_abs(i, j))
            acc = part if acc is None else acc + part
            err = d_p if err is None else err + d_p
            err = _flip(acc, err)
        return err

    for name, a_abs, a in (("db_g", dg_a, dg), ("db_fc", dfc_a, dfc)):
        tol[name] = chain(lambda i, j, a_abs=a_abs: a_abs[i:j].sum(0, keepdim=True),
                          lambda i, j, a=a: a[i:j].sum(0, keepdim=True), tile_m_b)
    for name, d_abs, d in (("dw_g", dg_s, dg_b), ("dw_fc", dfc_s, dfc_b)):
        xf = inputs["x"].to(F32)
        tol[name] = chain(lambda i, j, d_abs=d_abs: x[i:j].t() @ d_abs[i:j],
                          lambda i, j, d=d: xf[i:j].t() @ d[i:j], tile_m_w)
    s_dx = dg_s @ w_g.t() + dfc_s @ w_fc.t()
    dx = dg_b @ inputs["w_g"].to(F32).t() + dfc_b @ inputs["w_fc"].to(F32).t()
    tol["dx"] = _flip(dx, 2 * gamma(2 * n) * s_dx)
    return tol
