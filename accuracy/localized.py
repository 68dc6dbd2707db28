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
sum r^2 and a rounding bias, the larger of the output's (the whole-output test's) and the
legitimate paths' own over that window (``TermSums.local_bias``); the sums are
sub-Gaussian (``accuracy.allowance``), so P(|beta - bias| > c sigma) <= 2 exp(-c^2/2). A scan of
W windows shares the whole-output test's budget 2 exp(-7.5^2/2) = 1.3e-12 by the union bound:
c = sqrt(2 ln(2 W / 1.3e-12)) (one window: 7.5; the 659985 windows of dx's rows at M=220000:
9.11). The excess-variance test takes the Laurent-Massart bound for a weighted chi-square,
P(sum V z^2 - sum V > 2 sqrt(t sum V^2) + 2 t max V) <= exp(-t), at t = 7.5^2/2 (the same
1.3e-12 up to a factor 2), times ``MODEL_SLACK`` for what the model's expected variance may
miss; where the model's errors are correlated along rows (or columns), V is
taken per row (column), whose totals bound the eigenvalues of each row's covariance.

Metrics only: nothing here raises; ``accuracy.gate`` reads ``result()``.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from accuracy.compiled_pass import _spacing, set_threads
from goldens.threads import compiled_pass_threads

# the whole-output aggregate tests' tail constant (``accuracy.allowance.TAIL_SIGMAS``, checked
# equal by tests/core/test_localized.py) and the false-alarm bound it gives
BASE_SIGMAS = 7.5
FAMILY_BUDGET = 2 * math.exp(-BASE_SIGMAS ** 2 / 2)
VARIANCE_T = BASE_SIGMAS ** 2 / 2
# How far a correct kernel's mean square error may exceed the model's expected sum V: the model
# takes each rounding as uniform in +-half its spacing and sums variances; over 10 correct kernels
# at the quick profile's 17 small cases x 3 seeds, sum e^2 / sum V reached 1.07 on outputs of
# 1e5 elements or more (dx, dw at the outliers, cancellation and unit profiles: the roundings of
# a shared dg are not independent of the store after them) and 1.9 on db's 200 (a chi-square of
# few degrees; the bound there allowed 10). A random-sign error of one rtol gives 5.1-8.9.
MODEL_SLACK = 1.5
# per-row fields of ``_local_sums``: e x, x^2, V_scale x^2, V, e^2, V^2, max V
ROW_FIELDS = 7


@njit(parallel=True, cache=True, error_model="numpy")
def _local_sums(a, x, noise, marginal, shared_col, has_noise, has_marginal, has_shared_col, rows, cols, per,
                row_out, col_out):
    """Per row (``row_out[r]``, ``ROW_FIELDS``) and per group of ``per`` rows and column
    (``col_out[g, :, c]``: e x, x^2, V_scale x^2, V) of ``a`` (FP32 kernel values) against ``x``
    (FP64), flat [rows x cols]: V_scale = the store's ULP^2/12 + ``noise`` (+ ``shared_col`` per
    column), V = the store's + ``marginal`` (default ``noise``); optional arrays are per element
    (per column for ``shared_col``) or one value when their flag is off. Non-finite pairs add
    nothing. A row is summed in one loop and a group's columns over its rows in order, so rows
    and groups give the same bits however the caller chunks them (in whole groups)."""
    groups = col_out.shape[0]
    for grp in prange(groups):
        for r in range(grp * per, min(rows, (grp + 1) * per)):
            seb = sbb = svb = sv = see = sv2 = vmax = 0.0
            base = r * cols
            for c in range(cols):
                xk = x[base + c]
                ak = np.float64(a[base + c])
                if not (np.isfinite(xk) and np.isfinite(ak)):
                    continue
                e = ak - xk
                sp = _spacing(xk)
                store = sp * sp / 12.0
                nz = noise[base + c] if has_noise else 0.0
                vs = store + nz + (shared_col[c] if has_shared_col else 0.0)
                v = store + (marginal[base + c] if has_marginal else nz)
                x2 = xk * xk
                seb += e * xk
                sbb += x2
                svb += vs * x2
                sv += v
                see += e * e
                sv2 += v * v
                vmax = max(vmax, v)
                col_out[grp, 0, c] += e * xk
                col_out[grp, 1, c] += x2
                col_out[grp, 2, c] += vs * x2
                col_out[grp, 3, c] += v
            row = row_out[r]
            row[0], row[1], row[2], row[3], row[4], row[5], row[6] = seb, sbb, svb, sv, see, sv2, vmax


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
                 extra_vbb: float = 0.0, abs_var: float = 0.0, path_bias: np.ndarray | None = None) -> dict | None:
    """The scan over one axis: the worst window by |beta| / allowed, and whether any fails.
    ``extra_vbb``: variance not known per position, added whole to every window; ``abs_var``: an
    absolute variance every element may add (weighted by its r^2 like the rest); ``path_bias``:
    per legitimate path and position, sum (path - exact) exact: a window's bias is the largest
    |sum| / sum exact^2 over the paths, where it exceeds ``bias`` (a correct kernel's rounding
    bias is a property of the values it rounds, which a window may hold more of than the whole)."""
    n = eb.shape[0]
    if n < 2:
        return None
    paths = [] if path_bias is None or path_bias.shape[-1] != n else list(path_bias)
    starts, stops, (s_eb, s_bb, s_vbb, *s_paths) = scan_windows(n, eb, bb, vbb, *paths)
    s_vbb = s_vbb + extra_vbb + abs_var * s_bb
    window_bias = np.full(s_bb.shape, bias)
    with np.errstate(divide="ignore", invalid="ignore"):
        for s_p in s_paths:
            window_bias = np.maximum(window_bias, np.where(s_bb > 0, np.abs(s_p) / s_bb, 0.0))
    tested = s_bb > 0
    c = scan_sigmas(int(tested.sum()))
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = np.where(tested, s_eb / s_bb, 0.0)
        sigma = np.where(tested, np.sqrt(np.maximum(s_vbb, 0.0)) / s_bb, 0.0)
    allowed = c * sigma + window_bias
    with np.errstate(divide="ignore", invalid="ignore"):     # untested windows: 0 / 0, masked
        ratio = np.where(tested, np.abs(beta) / allowed, 0.0)
    if not tested.any():
        return None
    i = int(np.argmax(ratio))
    return {"axis": axis, "windows": int(tested.sum()), "sigmas": c, "passed": bool(ratio[i] <= 1.0),
            "failing_windows": int((ratio > 1.0).sum()),
            "worst": {"start": int(starts[i]), "stop": int(stops[i]), "beta": float(beta[i]),
                      "sigma": float(sigma[i]), "bias": float(window_bias[i]), "allowed": float(allowed[i]),
                      "ratio": float(ratio[i])}}


class LocalSums:
    """Per-row and per-column sums of e r, r^2 and V r^2, and the excess-variance sums, of one
    output against its FP64 values, accumulated row block by row block (any chunking gives the
    same per-row sums: a row is summed within one pass)."""

    def __init__(self, shape):
        shape = list(shape)
        self.rows, self.cols = (shape[0], shape[-1]) if len(shape) > 1 else (1, shape[0] if shape else 1)
        self.row = np.zeros((ROW_FIELDS, self.rows))  # per row: e r, r^2, V r^2, V, e^2, V^2, max V
        self.col = np.zeros((4, self.cols))           # per column: e r, r^2, V r^2, V
        self.columns_separable = True                # the model's variance separates over columns
        self.correlated: str | None = None           # "rows" / "columns": V is correlated along them
        self.unsplit_shared = 0.0                    # shared variance not given per row: in every row window

    def add(self, actual: torch.Tensor, exact: torch.Tensor, row_offset: int = 0, *,
            noise_var: torch.Tensor | None = None, element_var: torch.Tensor | None = None,
            shared_var: torch.Tensor | None = None, shared_axis: int | None = None,
            shared_rows: torch.Tensor | None = None, shared_total: float = 0.0,
            group_rows: int = 256) -> None:
        """One block of rows starting at ``row_offset``. ``noise_var``: the variance beyond the
        store that is independent per element (the fitted scale's); ``element_var``: the marginal
        variance beyond the store (default ``noise_var``); ``shared_var``/``shared_axis``: the part
        one rounded upstream value spreads along a column (axis 1, per column) or a row (axis 0,
        per row); ``shared_rows``: that part already summed per row (``shared_total`` without it:
        not separable, added whole to every row window). Columns are summed in groups of
        ``group_rows`` rows (the caller's own slices: chunks of whole slices give the same bits)."""
        cols = self.cols
        n_rows = exact.numel() // max(cols, 1)
        if shared_total and shared_rows is None:
            self.columns_separable = False
            self.correlated = "rows"
            self.unsplit_shared += shared_total
        if shared_rows is not None or (shared_var is not None and shared_axis == 0):
            self.columns_separable = False
            self.correlated = "rows"
        if shared_var is not None and shared_axis == 1:
            self.correlated = "columns"
        if n_rows == 0:
            return
        n = n_rows * cols

        def flat(t, dtype, length=n):
            if t is None:
                return np.zeros(1, dtype=dtype), False
            t = t.detach().reshape(-1)
            t = t.expand(length) if t.numel() == 1 else t
            return t.to("cpu", torch.float64 if dtype == np.float64 else torch.float32).contiguous().numpy(), True
        a, _ = flat(actual, np.float32)
        x, _ = flat(exact, np.float64)
        noise, has_noise = flat(noise_var, np.float64)
        marginal, has_marginal = flat(element_var, np.float64)
        column_shared = shared_var if shared_axis == 1 else None
        shared_col, has_shared_col = flat(column_shared, np.float64, cols)
        per = max(1, group_rows)
        row_out = np.zeros((n_rows, ROW_FIELDS))
        col_out = np.zeros((-(-n_rows // per), 4, cols))
        set_threads(compiled_pass_threads())
        _local_sums(a, x, noise, marginal, shared_col, has_noise, has_marginal, has_shared_col, n_rows, cols, per,
                    row_out, col_out)
        r0, r1 = row_offset, row_offset + n_rows
        if shared_var is not None and shared_axis == 0:
            sv = shared_var.detach().double().reshape(-1).cpu().numpy()
            row_out[:, 2] += sv[:n_rows] * row_out[:, 1]     # per row of this block, as ErrorStats.update slices it
        if shared_rows is not None:
            row_out[:, 2] += shared_rows.detach().double().reshape(-1).cpu().numpy()[:n_rows]
        self.row[:, r0:r1] += row_out.T
        for part in col_out:        # in row order: the same additions whatever the chunks
            self.col += part

    def result(self, bias: float, atol: float = 0.0, path_bias: dict | None = None) -> dict:
        """The three tests' numbers; ``bias``: the output's legitimate rounding bias of the fitted
        scale (the whole-output test's); ``atol``: the element-wise gate's absolute tolerance. A
        window of a few elements near zero has a beta of e / r: a correct kernel's FP32 range
        limits and cancellations (far below the atol, which the element-wise gate grants them)
        would make it any size, so every element's error may also hold a uniform +-atol, variance
        atol^2 / 3. Over a window of n elements near the rms that adds at most rtol / sqrt(n) x
        c / sqrt(3) to the allowed scale (the atol is at most rtol x rms): 1.1e-5 over one
        1024-row tile of dx at K=512, against the 7.8e-3 of a tile wrong by 1/128.
        ``path_bias``: the legitimate paths' bias numerators per row and column
        (``TermSums.local_bias``), or None."""
        abs_var = atol * atol / 3
        path_bias = path_bias or {}
        rows = _window_test(self.row[0], self.row[1], self.row[2], bias, "rows", self.unsplit_shared, abs_var,
                            path_bias.get("rows"))
        columns = (_window_test(self.col[0], self.col[1], self.col[2], bias, "columns", 0.0, abs_var,
                                path_bias.get("columns"))
                   if self.columns_separable else None)
        return {"rows": rows, "columns": columns, "variance": self._variance()}

    def _variance(self) -> dict | None:
        sum_v = float(self.row[3].sum())
        if sum_v <= 0:
            return None
        if self.correlated == "rows":
            v2, vmax = float(np.dot(self.row[3], self.row[3])), float(self.row[3].max(initial=0.0))
        elif self.correlated == "columns":
            v2, vmax = float(np.dot(self.col[3], self.col[3])), float(self.col[3].max(initial=0.0))
        else:
            v2, vmax = float(self.row[5].sum()), float(self.row[6].max(initial=0.0))
        allowed = MODEL_SLACK * (1.0 + (2 * math.sqrt(VARIANCE_T * v2) + 2 * VARIANCE_T * vmax) / sum_v)
        ratio = float(self.row[4].sum()) / sum_v
        return {"ratio": ratio, "allowed": allowed, "passed": bool(ratio <= allowed),
                "correlated": self.correlated}
