"""A legitimate path's errors on a row output, in one compiled pass: what the fitted scale's
rounding bias and the direction test read of it (``accuracy.derived._Golden._add_path_bias``).

Per element, the path's FP32 value stored in BF16 (round to nearest even, from its bits: the
store a kernel makes) minus the exact FP64 value, non-finite errors as zero; summed as err x exact
per row and per column, and counted by direction (``accuracy.allowance.direction_counts``: errors
of 1/4 to 1 BF16 ULP, toward zero, upward). In torch that is about twenty passes over the block
per path (SwiGLU's 12 distinct path values a 2048-row piece: 1.2 s of the derived gate's 3.5 s
there); here one. A row is summed in one loop and each group's columns over its rows in order, so
the sums do not depend on the thread count.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from accuracy.allowance import SIGN_MAX_ULP, SIGN_MIN_ULP, DirectionCounts
from accuracy.compiled_pass import _bits32, _from_bits32, _spacing, set_threads
from goldens.threads import compiled_pass_threads

# rows per group of the column sums (a group is one thread's work)
GROUP_ROWS = 64


@njit(inline="always")
def _bf16_round(v):
    """An FP32 value rounded to BF16 (nearest, ties to even), as FP32; NaN stays NaN."""
    u = _bits32(v)
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return v
    u = u + 0x7FFF + ((u >> 16) & 1)
    return _from_bits32(u & np.int32(-65536))


@njit(parallel=True, cache=True, error_model="numpy")
def _path_sums(v, x, rows, cols, per, row_out, col_out, counts, bf16_store):
    """``v``: the path's FP32 values (stored in BF16 where ``bf16_store``, else as they are),
    ``x``: the exact values with non-finite ones as 0 (FP64),
    both flat [rows x cols]; ``row_out[r]``: sum over the row of err x; ``col_out[g, c]``: over
    group g's rows; ``counts[g]``: counted, toward zero, upward."""
    groups = col_out.shape[0]
    for grp in prange(groups):
        counted = toward = up = 0
        for r in range(grp * per, min(rows, (grp + 1) * per)):
            s = 0.0
            base = r * cols
            for c in range(cols):
                xk = x[base + c]
                e = np.float64(_bf16_round(v[base + c]) if bf16_store else v[base + c]) - xk
                if not np.isfinite(e):
                    e = 0.0
                p = e * xk
                s += p
                col_out[grp, c] += p
                ulps = e / _spacing(xk)
                size = abs(ulps)
                if size >= SIGN_MIN_ULP and size <= SIGN_MAX_ULP:
                    counted += 1
                    if ulps * xk < 0:
                        toward += 1
                    if e > 0:
                        up += 1
            row_out[r] = s
        counts[grp, 0] = counted
        counts[grp, 1] = toward
        counts[grp, 2] = up


def path_error_sums(value: torch.Tensor, exact: torch.Tensor,
                    store: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor, DirectionCounts]:
    """A path's FP32 ``value`` of a row output stored in ``store`` (BF16, or FP32: as it is), against
    ``exact`` (FP64, non-finite elements as 0): sum err x exact per row and per column, and the
    errors' direction counts (in BF16 ULPs: an FP32 output's legitimate errors count none)."""
    if store not in (torch.bfloat16, torch.float32):
        raise ValueError(f"a path's row output is stored in BF16 or FP32, not {store}")
    rows = exact.shape[0]
    cols = exact.numel() // rows if rows else 0
    v = value.float().contiguous().reshape(-1).numpy()
    x = exact.double().contiguous().reshape(-1).numpy()
    groups = max(1, -(-rows // GROUP_ROWS))
    row_out = np.zeros(rows)
    col_out = np.zeros((groups, cols))
    counts = np.zeros((groups, 3), dtype=np.int64)
    set_threads(compiled_pass_threads())
    _path_sums(v, x, rows, cols, GROUP_ROWS, row_out, col_out, counts, store == torch.bfloat16)
    total = counts.sum(0)
    return (torch.from_numpy(row_out), torch.from_numpy(np.add.reduce(col_out, axis=0)),
            DirectionCounts(int(total[0]), int(total[1]), int(total[2])))
