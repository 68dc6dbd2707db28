"""RMSNorm backward as math and rounding points only (``accuracy.derived``): the same legitimate
choices as the hand model of ``operators.rmsnorm_backward.gate``, from which the framework derives
the allowances. ``benchmarks/derived_vs_hand.py`` compares the two element by element; ``OPERATOR`` (``--operator
rmsnorm_backward_derived``) is the operator's kernels and schedules judged by them."""
from __future__ import annotations

from accuracy.derived import DerivedMath
from accuracy.derived_switch import with_derived
from operators.rmsnorm_backward import OPERATOR as HAND
from operators.rmsnorm_backward.math import EPS

# rstd is FP32 (saved by the forward or recomputed): FP32 math, not a BF16 point
POINTS = {"xhat": "xhat = x rstd stored in BF16",
          "g": "g = dy w stored in BF16",
          "dw_term": "dy xhat stored in BF16 before dw sums it"}


def backward(ops, t):
    x, w, dy = t["x"], t["w"], t["dy"]
    r = ops.rsqrt(ops.mean(x * x, -1) + EPS)
    xhat = ops.store("xhat", x * r)
    g = ops.store("g", dy * w)
    c = ops.mean(g * xhat, -1)
    dx = r * (g - xhat * c)
    return {"dx": dx}, {"dw": (None, ops.store("dw_term", dy * xhat))}


# The model's element-wise work in blocks of 2^20 elements (256 rows at N = 4096): its FP64
# intermediates stay below the allocator's mmap threshold (``goldens.heap``), reused instead of
# page-faulted afresh; the acceptance case's gate 75 s -> 33-38 s (one thread, 2026-12-05)
DERIVED = DerivedMath(backward, POINTS, HAND.outputs, operand_points={"dw": "dw_term"}, row_elements=1 << 20)

# ``--operator rmsnorm_backward_derived``: RMSNorm's kernels, schedules and diagnosis layers, judged
# by the derived allowances (``accuracy.derived_switch``); its plans name the derived math's points
OPERATOR = with_derived(HAND, DERIVED, name="rmsnorm_backward_derived")
