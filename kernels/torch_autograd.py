"""PyTorch's own BF16 backward of ``y = silu(g) * fc`` as reference backends.

Nobody here wrote these kernels: autograd computes dg/dfc, then the bias,
weight and input gradients are plain BF16 torch ops (CPU BF16 matmuls and sums
accumulate in FP32 and round once).
"""
from __future__ import annotations

import functools

import torch

from operators.swiglu_backward.schedule import BF16_FAITHFUL, RoundingPlan, TiledSchedule

# PyTorch's dtype path, declared so its goldens replay it. Autograd of silu(g) * fc in BF16
# materialises dy*fc (the gradient reaching silu) and silu(g) (saved by the forward) as BF16
# tensors; dg/dfc are stored in BF16 and summed as stored for db; each matmul is rounded to
# BF16, so dx's two products are rounded before their (BF16) sum; one global FP32
# accumulation per reduction.
TORCH_BF16 = TiledSchedule(
    name="torch-bf16", tile_m_b=None, tile_m_w=None, tile_m_x=None,
    db_accumulator=torch.float32, dw_accumulator=torch.float32,
    plan=RoundingPlan(store={**BF16_FAITHFUL.store, "dy_fc": torch.bfloat16, "silu_g": torch.bfloat16,
                             "dx_product": torch.bfloat16}, db_input="stored", dg_order="torch"),
)

# Inductor fuses the elementwise backward into FP32 code that rounds once on store (no
# BF16 dy*fc or silu(g)); the bias sums read the stored BF16 dg/dfc (measured: db equals
# the FP32 sum of the stored dg bit for bit); matmuls are BF16, each rounded.
TORCH_COMPILE_BF16 = TiledSchedule(
    name="torch-compile-bf16", tile_m_b=None, tile_m_w=None, tile_m_x=None,
    db_accumulator=torch.float32, dw_accumulator=torch.float32,
    plan=RoundingPlan(store={**BF16_FAITHFUL.store, "dx_product": torch.bfloat16}, db_input="stored"),
)


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
