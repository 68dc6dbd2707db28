"""Backends for the report tests: PyTorch's BF16 backward with one output made wrong."""
from __future__ import annotations

import torch

from operators.swiglu_backward.kernels.torch_autograd import TORCH_BF16, torch_eager


def wrong_db_g(*, x, w_g, w_fc, dy, g, fc):
    """db_g 5% too large (fails the gate); everything else is torch-eager's."""
    out = dict(torch_eager(x=x, w_g=w_g, w_fc=w_fc, dy=dy, g=g, fc=fc))
    out["db_g"] = (out["db_g"].float() * 1.05).to(torch.bfloat16)
    return out


wrong_db_g.schedule = TORCH_BF16
