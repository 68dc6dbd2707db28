"""The three golden layers as pure functions of the case inputs.

Each returns the operator's outputs (SwiGLU's seven: dg, dfc, db_g, db_fc, dw_g, dw_fc, dx) as
full tensors in its math dtype; the values of the BF16-faithful and tiled layers are
exactly representable in BF16 wherever their plan stores. They are thin views
of one streaming pass (``goldens.stream``), which the case matrix uses directly
so that large M never materialises full-size float64 tensors.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from contract.operator import Operator
from contract.schedule import RoundingPlan, TiledSchedule
from goldens.stream import materialize


def fp64_ideal(operator: Operator, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Float64 throughout from the BF16 inputs, global sums, no intermediate rounding."""
    return materialize(operator, inputs, operator.schedules.FP64_GLOBAL)


def bf16_faithful(operator: Operator, inputs: Mapping[str, torch.Tensor],
                  plan: RoundingPlan | None = None) -> dict[str, torch.Tensor]:
    """FP32 math, BF16 rounding where the plan stores (SwiGLU: dg/dfc before they feed dw/dx;
    sums and matmul outputs), global sums."""
    schedules = operator.schedules
    return materialize(operator, inputs, schedules.FAITHFUL_GLOBAL if plan is None else schedules.faithful_schedule(plan))


def tiled_emulation(operator: Operator, inputs: Mapping[str, torch.Tensor],
                    schedule: TiledSchedule) -> dict[str, torch.Tensor]:
    """Replays the kernel's loop: per-tile partials in the math dtype, cast to the
    accumulator dtype and added in loop order, tail tile with valid_m rows."""
    return materialize(operator, inputs, schedule)
