"""Wrong bias + GELU backward kernels: each a bug a fused kernel can have, each caught by the
derived gate at a named output (``tests/operators/test_derived_operator.py``)."""
from __future__ import annotations

import torch

from accuracy.derived import TensorOps
from operators.bias_gelu_backward.backends import torch_fp32
from operators.bias_gelu_backward.math import gelu_grad


def _grad(h: torch.Tensor) -> torch.Tensor:
    """GELU' as the operator's math writes it, on tensors."""
    return gelu_grad(TensorOps, h)


def _outputs(dx: torch.Tensor) -> dict:
    return {"dx": dx.to(torch.bfloat16), "db": dx.sum(0, keepdim=True).to(torch.bfloat16)}


def bias_dropped(*, x, b, dy):
    """GELU' at x, not at x + b (the bias add fused into the forward only)."""
    return _outputs(dy.float() * _grad(x.float()))


def sigmoid_gelu(*, x, b, dy):
    """The derivative of the sigmoid approximation h sigmoid(1.702 h) in place of the exact GELU's."""
    h = x.float() + b.float()
    s = torch.sigmoid(1.702 * h)
    return _outputs(dy.float() * (s + 1.702 * h * s * (1 - s)))


def tanh_gelu(*, x, b, dy):
    """The tanh approximation's derivative (``approximate='tanh'``) for a kernel that claims the exact GELU."""
    h = (x.float() + b.float()).detach().requires_grad_(True)
    y = torch.nn.functional.gelu(h, approximate="tanh")
    (dx,) = torch.autograd.grad(y, (h,), grad_outputs=dy.float())
    return _outputs(dx)


def pdf_term_halved(*, x, b, dy):
    """Phi(h) + h phi(h) / 2: a dropped factor in the density term."""
    h = x.float() + b.float()
    return _outputs(dy.float() * (0.5 * (1 + torch.erf(h * 0.5 ** 0.5)) + 0.5 * h * torch.exp(-0.5 * h * h)
                                  * (2 * torch.pi) ** -0.5))


def db_first_tile_only(*, x, b, dy):
    """db summed over the first 1024-row tile only (the loop's later tiles never added)."""
    out = torch_fp32(x=x, b=b, dy=dy)
    h = x.float() + b.float()
    dx = dy.float() * _grad(h)
    out["db"] = dx[:1024].sum(0, keepdim=True).to(torch.bfloat16)
    return out


def db_bf16_running_sum(*, x, b, dy):
    """db accumulated row by row in a BF16 register."""
    out = torch_fp32(x=x, b=b, dy=dy)
    dx = out["dx"]
    acc = torch.zeros(1, dx.shape[1], dtype=torch.bfloat16)
    for row in dx:
        acc = acc + row
    out["db"] = acc
    return out


def bf16_math(*, x, b, dy):
    """GELU' evaluated in BF16 arithmetic (every operation rounded to BF16), db from it."""
    h = x + b
    d = 0.5 * (1 + torch.erf(h * 0.5 ** 0.5)) + h * torch.exp(-0.5 * h * h) * (2 * torch.pi) ** -0.5
    dx = dy * d
    return {"dx": dx, "db": dx.float().sum(0, keepdim=True).to(torch.bfloat16)}
