"""The tiled emulation of the article's schedule, served as a backend.

A kernel that follows the article's schedule exactly should be indistinguishable
from this; the gate must accept it (no false alarm) at every case.
"""
from __future__ import annotations

import torch

from goldens.layers import tiled_emulation as _tiled
from operators.swiglu_backward.schedule import ARTICLE
from operators.swiglu_backward import OPERATOR


def tiled_emulation(*, x, w_g, w_fc, dy, g, fc):
    out = _tiled(OPERATOR, {"x": x, "w_g": w_g, "w_fc": w_fc, "dy": dy, "g": g, "fc": fc}, ARTICLE)
    return {name: t.to(torch.bfloat16) for name, t in out.items()}


tiled_emulation.schedule = ARTICLE
