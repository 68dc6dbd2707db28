"""Localized aggregate tests: errors a whole-output test dilutes.

The whole-output fitted scale beta = sum e r / sum r^2 (e = kernel - FP64, r = FP64) moves only
in proportion to the wrong part's share of sum r^2: one wrong 1024-row tile of dx at M=220000 is
1/215 of it, and a wrong tile by 1/128 moved beta by 3.6e-5, inside its 1.04e-4 threshold. Three
tests look where such errors live:

* **Row windows**: the fitted scale of every window of a dyadic scan over the output's rows
  (sizes 1, 2, 4, ... rows, each size at strides of half its size, and the whole output). Every
  run of rows of length L lies inside a window of size 2^ceil(log2 L) or, at worst, covers half
  of one of size 2^floor(log2 L): a schedule's tile of any size and offset is within a factor 2
  of a scanned window. A row of a contraction like SwiGLU's dw (one input column) is a window
  of one row.
* **Column windows**: the same scan over columns (a few wrong columns of db or dw, a wrong
  column tile of dg), where the model's variance separates over columns (not for SwiGLU's dx,
  whose upstream roundings are shared along a row).
* **Excess variance**: sum e^2 against the model's sum of variances sum V (V = the kernel's own
  store, ULP^2/12, plus the variance of a correct kernel's error beyond it): random-sign errors
  of one rtol leave beta at 0 and every element inside the gate, but raise sum e^2 by 12 to 48
  times the store's share (an error of 2^-7 |r| against a store variance of 2^-16..2^-14 r^2 / 12).

False alarms. Each window's beta has the model's standard deviation sigma = sqrt(sum V r^2) /
sum r^2 and the output's legitimate rounding bias (the whole-output test's); the sums are
sub-Gaussian (``accuracy.allowance``), so P(|beta - bias| > c sigma) <= 2 exp(-c^2/2). A scan of
W windows shares the whole-output test's budget 2 exp(-7.5^2/2) = 1.3e-12 by the union bound:
c = sqrt(2 ln(2 W / 1.3e-12)) (one window: 7.5; the 8.8e5 windows of dx's rows at M=220000:
9.1). The excess-variance test takes the Laurent-Massart bound for a weighted chi-square,
P(sum V z^2 - sum V > 2 sqrt(t sum V^2) + 2 t max V) <= exp(-t), at t = 7.5^2/2 (the same
1.3e-12 up to a factor 2); where the model's errors are correlated along rows (or columns), V is
taken per row (column), whose totals bound the eigenvalues of each row's covariance.

Metrics only: nothing here raises; ``accuracy.gate`` reads ``result()``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from accuracy.ulp import bf16_spacing

# the whole-output aggregate tests' tail constant and the false-alarm bound it gives
BASE_SIGMAS = 7.5
FAMILY_BUDGET = 2 * math.exp(-BASE_SIGMAS ** 2 / 2)
VARIANCE_T = BASE_SIGMAS ** 2 / 2
# Rows per FP64 pass: 2^18 elements (2 MiB per temporary), as ``accuracy.metrics.SLICE_ELEMENTS``
SLICE_ELEMENTS = 1 << 18


def scan_windows(n: int, *values: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(starts, stops, sums) of the dyadic scan over ``n`` positions: sizes 1, 2, 4, ... below
    ``n`` at strides of half the size (1 for size 1), the last window of each size flush with the
    end, and the whole range; ``sums``: each of ``values`` summed over every window. The sums are
    built from aligned blocks by pairs, never as differences of prefix sums, which would lose a
    window of small values beside large ones (8 values of 1e-18 after 80: 0)."""
    starts, stops = [np.arange(n, dtype=np.int64)], [np.arange(1, n + 1, dtype=np.int64)]
    sums = [[np.asarray(v, dtype=np.float64).copy()] for v in values]
    blocks = [np.asarray(v, dtype=np.float64) for v in values]    # aligned blocks of the size below
    half = 1
    while 2 * half < n:
        full = n // half
        j = np.arange(full - 1, dtype=np.int64)
        s0 = j * half
        starts.append(s0)
        stops.append(s0 + 2 * half)
        for out, b in zip(sums, blocks):
            out.append(b[:full - 1] + b[1:full])
        size = 2 * half
        if s0.size == 0 or s0[-1] != n - size:
            starts.append(np.array([n - size], dtype=np.int64))
            stops.append(np.array([n], dtype=np.int64))
            for out, v in zip(sums, values):
                out.append(np.array([np.sum(v[n - size:])]))
        pairs = full // 2
        blocks = [b[:2 * pairs].reshape(pairs, 2).sum(1) for b in blocks]
        half = size
    if n > 1:
        starts.append(np.zeros(1, dtype=np.int64))
        stops.append(np.full(1, n, dtype=np.int64))
        for out, v in zip(sums, values):
            out.append(np.array([np.sum(v)]))
    return np.concatenate(starts), np.concatenate(stops), [np.concatenate(out) for out in sums]


def scan_sigmas(windows: int) -> float:
    """The tail constant of a scan of ``windows`` windows sharing the whole-output test's budget."""
    return math.sqrt(2 * math.log(2 * max(windows, 1) / FAMILY_BUDGET))


def _window_test(eb: np.ndarray, bb: np.ndarray, vbb: np.ndarray, bias: float, axis: str,
                 extra_vbb: float = 0.0, abs_var: float = 0.0) -> dict | None:
    """The scan over one axis: the worst window by |beta| / allowed, and whether any fails.
    ``extra_vbb``: variance not known per position, added whole to every window; ``abs_var``: an
    absolute variance every element may add (weighted by its r^2 like the rest)."""
    n = eb.shape[0]
    if n < 2:
        return None
    starts, stops, (s_eb, s_bb, s_vbb) = scan_windows(n, eb, bb, vbb)
    s_vbb = s_vbb + extra_vbb + abs_var * s_bb
    tested = s_bb > 0
    c = scan_sigmas(int(tested.sum()))
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = np.where(tested, s_eb / s_bb, 0.0)
        sigma = np.where(tested, np.sqrt(np.maximum(s_vbb, 0.0)) / s_bb, 0.0)
    allowed = c * sigma + bias
    ratio = np.where(tested, np.abs(beta) / allowed, 0.0)
    if not tested.any():
        return None
    i = int(np.argmax(ratio))
    return {"axis": axis, "windows": int(tested.sum()), "sigmas": c, "passed": bool(ratio[i] <= 1.0),
            "failing_windows": int((ratio > 1.0).sum()),
            "worst": {"start": int(starts[i]), "stop": int(stops[i]), "beta": float(beta[i]),
                      "sigma": float(sigma[i]), "allowed": float(allowed[i]), "ratio": float(ratio[i])}}


class LocalSums:
    """Per-row and per-column sums of e r, r^2 and V r^2, and the excess-variance sums, of one
    output against its FP64 values, accumulated row block by row block (any chunking gives the
    same per-row sums: a row is summed within one pass)."""

    def __init__(self, shape):
        shape = list(shape)
        self.rows, self.cols = (shape[0], shape[-1]) if len(shape) > 1 else (1, shape[0] if shape else 1)
        self.row = np.zeros((3, self.rows))          # eb, bb, vbb per row
        self.row_v = np.zeros(self.rows)             # sum V per row
        self.col = np.zeros((4, self.cols))          # eb, bb, vbb, sum V per column
        self.sum_ee = self.sum_v = self.sum_v2 = 0.0
        self.max_v = 0.0
        self.columns_separable = True                # the model's variance separates over columns
        self.correlated: str | None = None           # "rows" / "columns": V is correlated along them
        self.unsplit_shared = 0.0                    # shared variance not given per row: in every row window

    def add(self, actual: torch.Tensor, exact: torch.Tensor, row_offset: int = 0, *,
            noise_var: torch.Tensor | None = None, element_var: torch.Tensor | None = None,
            shared_var: torch.Tensor | None = None, shared_axis: int | None = None,
            shared_rows: torch.Tensor | None = None, shared_total: float = 0.0) -> None:
        """One block of rows starting at ``row_offset``. ``noise_var``: the variance beyond the
        store that is independent per element (the fitted scale's); ``element_var``: the marginal
        variance beyond the store (default ``noise_var``); ``shared_var``/``shared_axis``: the part
        one rounded upstream value spreads along a column (axis 1) or row (axis 0);
        ``shared_rows``: that part already summed per row (``shared_total`` without it: not
        separable, added to every row window)."""
        cols = self.cols
        a_all = actual.detach().reshape(-1, cols)
        x_all = exact.detach().reshape(-1, cols)
        n_rows = x_all.shape[0]
        step = max(1, SLICE_ELEMENTS // max(cols, 1))
        if shared_total and shared_rows is None:
            self.columns_separable = False
            self.correlated = "rows"
            self.unsplit_shared += shared_total
        if shared_rows is not None:
            self.columns_separable = False
            self.correlated = "rows"
        if shared_var is not None and shared_axis == 1:
            self.correlated = "columns"
        if shared_var is not None and shared_axis == 0:
            self.columns_separable = False
            self.correlated = "rows"

        def part(t, lo, hi):
            if t is None or t.dim() == 0 or t.numel() == 1:
                return t
            t = t.detach()
            return t.reshape(-1, cols)[lo:hi] if t.numel() == n_rows * cols else t.reshape(-1)[lo:hi]
        for lo in range(0, n_rows, step):
            hi = min(n_rows, lo + step)
            x = x_all[lo:hi].double()
            a = a_all[lo:hi].double()
            ok = torch.isfinite(x) & torch.isfinite(a)
            x = torch.where(ok, x, 0.0)
            e = torch.where(ok, a - x, 0.0)
            x2 = x * x
            sp = bf16_spacing(x)
            store = sp.mul_(sp).div_(12)
            noise = part(noise_var, lo, hi)
            v_scale = store if noise is None else store + noise.double().to(store.device)
            v_scale = torch.where(ok, v_scale, 0.0)
            vx2 = v_scale * x2
            r0, r1 = row_offset + lo, row_offset + hi
            self.row[0, r0:r1] += (e * x).sum(1).cpu().numpy()
            self.row[1, r0:r1] += x2.sum(1).cpu().numpy()
            row_vbb = vx2.sum(1)
            col_vbb = vx2.sum(0)
            if shared_var is not None:
                sv = shared_var.detach().double().reshape(-1).to(x.device)
                if shared_axis == 1:
                    row_vbb = row_vbb + x2 @ sv
                    col_vbb = col_vbb + sv * x2.sum(0)
                else:
                    sv_rows = sv[r0:r1] if sv.numel() >= r1 else sv[lo:hi]
                    row_vbb = row_vbb + sv_rows * x2.sum(1)
            if shared_rows is not None:
                row_vbb = row_vbb + shared_rows.detach().double().reshape(-1)[lo:hi].to(x.device)
            self.row[2, r0:r1] += row_vbb.cpu().numpy()
            self.col[0] += (e * x).sum(0).cpu().numpy()
            self.col[1] += x2.sum(0).cpu().numpy()
            self.col[2] += col_vbb.cpu().numpy()
            marginal = part(element_var, lo, hi)
            if marginal is None:
                marginal = noise
            v = store if marginal is None else store + marginal.double().to(store.device)
            v = torch.where(ok, v, 0.0).expand_as(x)
            self.sum_ee += float((e * e).sum())
            self.sum_v += float(v.sum())
            self.sum_v2 += float((v * v).sum())
            self.max_v = max(self.max_v, float(v.max())) if v.numel() else self.max_v
            self.row_v[r0:r1] += v.sum(1).cpu().numpy()
            self.col[3] += v.sum(0).cpu().numpy()

    def result(self, bias: float, atol: float = 0.0) -> dict:
        """The three tests' numbers; ``bias``: the output's legitimate rounding bias of the fitted
        scale (the whole-output test's); ``atol``: the element-wise gate's absolute tolerance. A
        window of a few elements near zero has a beta of e / r: a correct kernel's FP32 range
        limits and cancellations (far below the atol, which the element-wise gate grants them)
        would make it any size, so every element's error may also hold a uniform +-atol, variance
        atol^2 / 3. Over a window of n elements near the rms that adds at most rtol / sqrt(n) x
        c / sqrt(3) to the allowed scale (the atol is at most rtol x rms): 1.1e-5 over one
        1024-row tile of dx at K=512, against the 7.8e-3 of a tile wrong by 1/128."""
        abs_var = atol * atol / 3
        rows = _window_test(self.row[0], self.row[1], self.row[2], bias, "rows", self.unsplit_shared, abs_var)
        columns = (_window_test(self.col[0], self.col[1], self.col[2], bias, "columns", 0.0, abs_var)
                   if self.columns_separable else None)
        return {"rows": rows, "columns": columns, "variance": self._variance()}

    def _variance(self) -> dict | None:
        if self.sum_v <= 0:
            return None
        if self.correlated == "rows":
            v2, vmax = float(np.dot(self.row_v, self.row_v)), float(self.row_v.max(initial=0.0))
        elif self.correlated == "columns":
            v2, vmax = float(np.dot(self.col[3], self.col[3])), float(self.col[3].max(initial=0.0))
        else:
            v2, vmax = self.sum_v2, self.max_v
        allowed = 1.0 + (2 * math.sqrt(VARIANCE_T * v2) + 2 * VARIANCE_T * vmax) / self.sum_v
        ratio = self.sum_ee / self.sum_v
        return {"ratio": ratio, "allowed": allowed, "passed": bool(ratio <= allowed),
                "correlated": self.correlated}
