"""SwiGLU backward's element-wise math, written once: the golden pass, the rounding variances of
the gate's allowance and the ideal test's floors all call these.

s = sigmoid(g);  dg = (dy fc) * factor,  factor = s (1 + g (1 - s));  dfc = dy * silu(g),
silu(g) = g s. The legitimate stored intermediates are dy*fc (autograd's grad of silu(g)) and
silu(g) (autograd's saved forward output)."""
from __future__ import annotations

import torch

from goldens.rounding import round_to

SIGMOID_FORMS = ("stable", "exp_ratio")


def sigmoid(g: torch.Tensor, form: str = "stable") -> torch.Tensor:
    if form == "stable":
        return torch.sigmoid(g)
    if form != "exp_ratio":
        raise ValueError(f"sigmoid form must be one of {SIGMOID_FORMS}, got {form!r}")
    e = torch.exp(g)  # the article's form: inf / inf = NaN once exp overflows (g > ~88.7 in FP32)
    return e / (1 + e)


def dg_factor(g: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """d silu(g) / d g = s (1 + g (1 - s)): dg = (dy fc) times this."""
    return s * (1 + g * (1 - s))


def silu(g: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """silu(g) = g s: dfc = dy times this."""
    return g * s


def elementwise(dy: torch.Tensor, g: torch.Tensor, fc: torch.Tensor, plan) -> tuple[torch.Tensor, torch.Tensor]:
    """dg, dfc in the plan's math dtype, in the plan's operation order, with its intermediate
    roundings (``goldens.schedule.RoundingPlan``: ``math``, ``sigmoid``, ``dg_order``, ``rounding``)."""
    dy, g, fc = (t.to(plan.math) for t in (dy, g, fc))
    s = sigmoid(g, plan.sigmoid)
    dy_fc = round_to(dy * fc, plan.rounding("dy_fc"))
    if plan.dg_order == "torch":
        dg = (dy_fc * s) * (1 + g * (1 - s))   # autograd's silu_backward order (measured bit for bit)
    else:
        dg = dy_fc * dg_factor(g, s)           # the article's b kernel
    dfc = dy * round_to(silu(g, s), plan.rounding("silu_g"))
    return dg, dfc
