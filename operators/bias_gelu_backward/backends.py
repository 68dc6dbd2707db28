"""Bias + GELU backward's backends: PyTorch's own autograd of ``F.gelu(x + b)`` in BF16, the same
in FP32 from the BF16 inputs (each output stored once), and the tiled emulation of a fused
kernel's loop (db accumulated in FP32 over tiles of 1024 rows). Each takes x [M, N], b [1, N],
dy [M, N] in BF16 and returns dx [M, N], db [1, N] in BF16."""
from __future__ import annotations

import torch

from goldens.emulation import ScheduleEmulation
from operators.bias_gelu_backward import OPERATOR, TILED_FP32, TORCH_BF16


def _autograd(x, b, dy, dtype):
    x = x.to(dtype).detach().requires_grad_(True)
    b = b.to(dtype).detach().requires_grad_(True)
    y = torch.nn.functional.gelu(x + b)
    dx, db = torch.autograd.grad(y, (x, b), grad_outputs=dy.to(dtype))
    return {"dx": dx.to(torch.bfloat16), "db": db.to(torch.bfloat16)}


def torch_eager(*, x, b, dy):
    return _autograd(x, b, dy, torch.bfloat16)


def torch_fp32(*, x, b, dy):
    return _autograd(x, b, dy, torch.float32)


# the fused kernel's loop replayed by the tiled golden (``goldens.emulation``)
tiled_emulation = ScheduleEmulation(OPERATOR, TILED_FP32, "tiled_emulation")


torch_eager.schedule = TORCH_BF16
torch_fp32.schedule = OPERATOR.schedules.FAITHFUL_GLOBAL
