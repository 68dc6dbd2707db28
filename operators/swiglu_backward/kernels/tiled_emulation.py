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


def _served(schedule, name: str):
    """The tiled golden's emulation of ``schedule`` as a kernel: its outputs stored once in BF16."""
    def kernel(*, x, w_g, w_fc, dy, g, fc):
        out = _tiled(OPERATOR, {"x": x, "w_g": w_g, "w_fc": w_fc, "dy": dy, "g": g, "fc": fc}, schedule)
        return {o: t.to(torch.bfloat16) for o, t in out.items()}
    kernel.__name__ = kernel.__qualname__ = name
    kernel.schedule = schedule
    return kernel


tiled_emulation = _served(ARTICLE, "tiled_emulation")
tiled_emulation_hardened = _served(HARDENED, "tiled_emulation_hardened")
