"""Wrong RMSNorm backward kernels, each with one bug of the kind fused kernels ship with.

Each is a correct FP32 kernel (``reference``: FP32 math from the BF16 inputs, each output
stored once) with one change; ``KILLS`` names the output the gate must fail it on and the cases
that expose it; ``UNCAUGHT`` the wrong kernels the gate is known not to catch, and why. None is
registered among the operator's backends.
"""
from __future__ import annotations

import torch

from goldens.rounding import round_to
from operators.rmsnorm_backward.math import EPS

BF16 = torch.bfloat16


def _finish(dx, dw):
    return {"dx": dx.to(BF16), "dw": dw.to(BF16)}


def _rstd(x):
    return torch.rsqrt(x.square().mean(-1, keepdim=True) + EPS)


def _rows(x, w, dy, r=None, dw_rows=None, project=True):
    x, w, dy = x.float(), w.float(), dy.float()
    r = _rstd(x) if r is None else r
    xhat = x * r
    g = dy * w
    c = (g * xhat).mean(-1, keepdim=True)
    dx = r * (g - xhat * c) if project else r * g
    terms = dy * xhat
    dw = (terms if dw_rows is None else terms[dw_rows]).sum(0, keepdim=True)
    return dx, dw


def reference(*, x, w, dy):
    """The correct kernel the others change."""
    return _finish(*_rows(x, w, dy))


def eps_outside_sqrt(*, x, w, dy):
    """1 / (sqrt(mean x^2) + eps): a 2x error where mean(x^2) ~ eps (small_rms), none at unit scale."""
    xf = x.float()
    return _finish(*_rows(x, w, dy, r=1 / (xf.square().mean(-1, keepdim=True).sqrt() + EPS)))


def mean_over_rows(*, x, w, dy):
    """mean(x^2) over M instead of N: one rstd per column (at M = 1, each element normalised by itself)."""
    xf = x.float()
    return _finish(*_rows(x, w, dy, r=torch.rsqrt(xf.square().mean(0, keepdim=True) + EPS)))


def rstd_sum_in_bf16(*, x, w, dy):
    """The sum of squares accumulated in a BF16 register, column by column: it stagnates once the
    running sum's spacing exceeds a square (N = 1024, unit scale: ~2x too small)."""
    xf = x.float()
    acc = torch.zeros(xf.shape[0], 1, dtype=BF16)
    for j in range(xf.shape[1]):
        acc = (acc.float() + xf[:, j:j + 1].square()).to(BF16)
    return _finish(*_rows(x, w, dy, r=torch.rsqrt(acc.float() / xf.shape[1] + EPS)))


def rstd_in_bf16(*, x, w, dy):
    """rstd kept in BF16: every element of a row off by the same relative error, at most 2^-9, with a
    random sign per row. Below the element-wise gate (rtol 2^-7) and averaging out in the fitted
    scale over rows; the localized tests' row windows see it (it was the gate's stated blind spot)."""
    return _finish(*_rows(x, w, dy, r=round_to(_rstd(x.float()), BF16)))


def projection_missing(*, x, w, dy):
    """dx = r g: the term along x (xhat c) left out."""
    return _finish(*_rows(x, w, dy, project=False))


def dw_last_tile_only(*, x, w, dy):
    """dw from the last 1024-row tile only (the accumulator reset per tile)."""
    m = x.shape[0]
    return _finish(*_rows(x, w, dy, dw_rows=slice(((m - 1) // 1024) * 1024, m)))


def dw_unnormalised(*, x, w, dy):
    """dw = sum dy x: rstd left out of the weight gradient."""
    dx, _ = _rows(x, w, dy)
    return _finish(dx, (dy.float() * x.float()).sum(0, keepdim=True))


def weight_left_out(*, x, w, dy):
    """g = dy: dx without the weight (identical only where w = 1)."""
    return _finish(*_rows(x, torch.ones_like(w), dy)[:1], _rows(x, w, dy)[1])


def rstd_cubed_once(*, x, w, dy):
    """The projection scaled by r instead of r^3 (a slip in the chain rule): dx = r g - r x c'."""
    xf, wf, dyf = x.float(), w.float(), dy.float()
    r = _rstd(xf)
    g = dyf * wf
    dx = r * g - r * xf * (g * xf).mean(-1, keepdim=True)
    return _finish(dx, _rows(x, w, dy)[1])


def round_toward_zero_stores(*, x, w, dy):
    """The FP32 results truncated to BF16 (round toward zero) instead of rounded to nearest."""
    dx, dw = _rows(x, w, dy)

    def truncate(t):
        return (t.contiguous().view(torch.int32) & ~0xFFFF).view(torch.float32).to(BF16)
    return {"dx": truncate(dx), "dw": truncate(dw)}


# mutant -> (the output the gate must fail it on, a case that exposes it: SIZES,SCALE)
KILLS = {
    "eps_outside_sqrt": ("dx", "1025,200,small_rms"),
    "mean_over_rows": ("dx", "1025,200,unit"),
    "rstd_sum_in_bf16": ("dx", "1025,1024,unit"),
    "projection_missing": ("dx", "1025,200,unit"),
    "dw_last_tile_only": ("dw", "2049,200,unit"),
    "dw_unnormalised": ("dw", "1025,200,unit"),
    "weight_left_out": ("dx", "1025,200,unit"),
    "rstd_cubed_once": ("dx", "1025,200,unit"),
    "round_toward_zero_stores": ("dx", "4097,1024,unit"),
    "rstd_in_bf16": ("dx", "1025,1024,unit"),      # by the localized tests (accuracy.localized): its row windows
}

# wrong kernels within the gate's detection floor (tests/operators/test_rmsnorm.py checks they still pass:
# a gate that learns to catch one moves it to KILLS)
UNCAUGHT: dict[str, str] = {}
