"""SwiGLU backward as math and rounding points only (``accuracy.derived``): the legitimate choices
of the hand model (``operators.swiglu_backward.gate``), from which the framework derives the
allowances. ``benchmarks/derived_vs_hand.py`` compares the two element by element; ``OPERATOR`` (``--operator
swiglu_backward_derived``) is the operator's kernels and schedules judged by them."""
from __future__ import annotations

from types import MappingProxyType

from accuracy.derived import DerivedMath
from accuracy.derived_switch import with_derived
from operators.swiglu_backward import OPERATOR as HAND

POINTS = {"dy_fc": "dy*fc stored in BF16 before dg (PyTorch's grad of silu(g))",
          "silu_g": "silu(g) stored in BF16 before dfc (PyTorch's saved forward output)",
          "dg_in": "db, dw, dx read dg as stored (BF16) or as computed",
          "dfc_in": "db, dw, dx read dfc as stored (BF16) or as computed",
          "dx_g": "dg w_g^T stored in BF16 before dx's sum",
          "dx_fc": "dfc w_fc^T stored in BF16 before dx's sum"}


def backward(ops, t):
    g, fc, dy, x = t["g"], t["fc"], t["dy"], t["x"]
    s = ops.sigmoid(g)
    dg = ops.store("dy_fc", dy * fc) * (s * (1 + g * (1 - s)))
    dfc = dy * ops.store("silu_g", g * s)
    dg_in, dfc_in = ops.store("dg_in", dg), ops.store("dfc_in", dfc)
    dx = ops.store("dx_g", ops.matmul(dg_in, t["w_g"].t())) + ops.store("dx_fc", ops.matmul(dfc_in, t["w_fc"].t()))
    return ({"dg": dg, "dfc": dfc, "dx": dx},
            {"db_g": (None, dg_in), "db_fc": (None, dfc_in), "dw_g": (x, dg_in), "dw_fc": (x, dfc_in)})


DERIVED = DerivedMath(backward, POINTS, HAND.outputs,
                      operand_points={"db_g": "dg_in", "db_fc": "dfc_in", "dw_g": "dg_in", "dw_fc": "dfc_in"},
                      reused={"dg_in": "dg", "dfc_in": "dfc"},
                      own={"db_g": ("dg",), "db_fc": ("dfc",), "dw_g": ("dg",), "dw_fc": ("dfc",),
                           "dx": ("dg", "dfc")})


# The derived math's points under SwiGLU's own RoundingPlan (``goldens.schedule``'s forms): dg_in and
# dfc_in are dg and dfc as stored, except where the plan's b kernel sums them as computed
# (``db_input = "math"``, the article's); dx's two products are its dx_product; db and dw store at
# their kernels' points
_PLAN_POINT = MappingProxyType({"dg_in": "dg", "dfc_in": "dfc", "dx_g": "dx_product", "dx_fc": "dx_product",
                                "db_g": "db", "db_fc": "db", "dw_g": "dw", "dw_fc": "dw"})


def rounding_in(plan, point: str, output: str):
    """The dtype SwiGLU's ``plan`` stores the derived math's ``point`` in, as ``output`` reads it."""
    if point in ("dg_in", "dfc_in") and output in ("db_g", "db_fc") and plan.db_input == "math":
        return None
    return plan.rounding(_PLAN_POINT.get(point, point))


# ``--operator swiglu_backward_derived``: SwiGLU's kernels, schedules and diagnosis layers, judged by
# the derived allowances (``accuracy.derived_switch``)
OPERATOR = with_derived(HAND, DERIVED, rounding_in=rounding_in, name="swiglu_backward_derived")
