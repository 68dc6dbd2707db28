"""The tiled golden's emulations of the reference schedules, served as backends.

A kernel that follows the article's schedule exactly should be indistinguishable from
``tiled_emulation``; the hardened schedule (FP32 accumulators across tiles) from
``tiled_emulation_hardened``. Where the article's schedule fails the gate (its BF16
accumulators across tiles, at its own case), it is the schedule that fails, not a kernel.
"""
from __future__ import annotations

import torch

from goldens.layers import tiled_emulation as _tiled
from operators.swiglu_backward.schedule import ARTICLE, HARDENED
from operators.swiglu_backward import OPERATOR


def tiled_emulation(*, x, w_g, w_fc, dy, g, fc):
    out = _tiled(OPERATOR, {"x": x, "w_g": w_g, "w_fc": w_fc, "dy": dy, "g": g, "fc": fc}, ARTICLE)
    return {name: t.to(torch.bfloat16) for name, t in out.items()}


tiled_emulation.schedule = ARTICLE


def tiled_emulation_hardened(*, x, w_g, w_fc, dy, g, fc):
    """The golden's tiled emulation of the hardened schedule, served as a kernel."""
    out = _tiled(OPERATOR, {"x": x, "w_g": w_g, "w_fc": w_fc, "dy": dy, "g": g, "fc": fc}, HARDENED)
    return {name: t.to(torch.bfloat16) for name, t in out.items()}


tiled_emulation_hardened.schedule = HARDENED
