"""SwiGLU backward as math and rounding points only (``accuracy.derived``): the legitimate choices
of the hand model (``operators.swiglu_backward.gate``), from which the framework derives the
allowances. ``benchmarks/derived_vs_hand.py`` compares the two element by element."""
from __future__ import annotations

from accuracy.derived import DerivedMath
from operators.swiglu_backward import OPERATOR

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


DERIVED = DerivedMath(backward, POINTS, OPERATOR.outputs,
                      operand_points={"db_g": "dg_in", "db_fc": "dfc_in", "dw_g": "dg_in", "dw_fc": "dfc_in"},
                      reused={"dg_in": "dg", "dfc_in": "dfc"},
                      own={"db_g": ("dg",), "db_fc": ("dfc",), "dw_g": ("dg",), "dw_fc": ("dfc",),
                           "dx": ("dg", "dfc")})
