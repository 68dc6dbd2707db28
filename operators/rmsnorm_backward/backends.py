"""RMSNorm backward's reference backends: PyTorch's own autograd of ``F.rms_norm`` (eager and
compiled) and the tiled emulation of a fused kernel's loop (dw accumulated in BF16 over tiles of
1024 rows). A backend takes x [M, N], w [1, N], dy [M, N] in BF16 and returns dx [M, N], dw [1, N].
"""
from __future__ import annotations

import functools

import torch

from goldens.emulation import ScheduleEmulation
from operators.rmsnorm_backward import OPERATOR
from operators.rmsnorm_backward.math import EPS
from operators.rmsnorm_backward.schedule import TILED_BF16, TORCH_FP32


def _backward(x, w, dy):
    x = x.detach().requires_grad_(True)
    w1 = w.detach().reshape(-1).requires_grad_(True)
    y = torch.nn.functional.rms_norm(x, (x.shape[-1],), w1, EPS)
    dx, dw = torch.autograd.grad(y, (x, w1), grad_outputs=dy)
    return {"dx": dx, "dw": dw.reshape(1, -1)}


def torch_eager(*, x, w, dy):
    return _backward(x, w, dy)


@functools.cache
def _compiled():
    return torch.compile(_backward, dynamic=True)


def torch_compile(*, x, w, dy):
    return _compiled()(x, w, dy)


# the fused kernel's loop replayed by the tiled golden (``goldens.emulation``)
tiled_emulation = ScheduleEmulation(OPERATOR, TILED_BF16, "tiled_emulation")


torch_eager.schedule = TORCH_FP32
torch_compile.schedule = TORCH_FP32
