"""PyTorch's own BF16 backward of ``y = silu(g) * fc`` as reference backends.

Nobody here wrote these kernels: autograd computes dg/dfc, then the bias,
weight and input gradients are plain BF16 torch ops (CPU BF16 matmuls and sums
accumulate in FP32 and round once).
"""
from __future__ import annotations

import functools

import torch

from operators.swiglu_backward.schedule import TORCH_BF16, TORCH_COMPILE_BF16

def _backward(x, w_g, w_fc, dy, g, fc):
    g = g.detach().requires_grad_(True)
    fc = fc.detach().requires_grad_(True)
    y = torch.nn.functional.silu(g) * fc
    dg, dfc = torch.autograd.grad(y, (g, fc), grad_outputs=dy)
    return {
        "dg": dg, "dfc": dfc,
        "db_g": dg.sum(dim=0, keepdim=True), "db_fc": dfc.sum(dim=0, keepdim=True),
        "dw_g": x.t() @ dg, "dw_fc": x.t() @ dfc,
        "dx": dg @ w_g.t() + dfc @ w_fc.t(),
    }


def torch_eager(*, x, w_g, w_fc, dy, g, fc):
    return _backward(x, w_g, w_fc, dy, g, fc)


@functools.cache
def _compiled():
    # dynamic=True: one graph serves every M of the matrix instead of a
    # recompile per edge size (11 M values).
    return torch.compile(_backward, dynamic=True)


def torch_compile(*, x, w_g, w_fc, dy, g, fc):
    return _compiled()(x, w_g, w_fc, dy, g, fc)


torch_eager.schedule = TORCH_BF16
torch_compile.schedule = TORCH_COMPILE_BF16
