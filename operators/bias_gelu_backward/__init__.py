"""Bias + GELU backward: y = gelu(x + b) (exact erf GELU), b [1, N] broadcast over M.

Inputs x [M, N], b [1, N], dy [M, N]; outputs dx [M, N] (rows) and db [1, N] (a sum over M of
dx, tiled by the kernel ``b``). The operator is its math and rounding points
(``operators.bias_gelu_backward.math``): its golden, its allowances and its diagnosis bounds are
derived from them (``accuracy.derived``); nothing in this folder is a hand-written allowance.
"""
from __future__ import annotations

from pathlib import Path

import torch

from accuracy.derived import DerivedMath
from contract.operator import Operator, OutputDecl, TensorDecl
from operators.bias_gelu_backward import math, profiles

OUTPUTS = (OutputDecl("dx", ("M", "N")), OutputDecl("db", (1, "N"), "sum_over_m", "b"))
DERIVED = DerivedMath(math.backward, math.POINTS, OUTPUTS, operand_points={"db": "dx_sum"})
SCHEDULES = DERIVED.schedules
# PyTorch's BF16 autograd: x + b in BF16, GELU' in FP32, dx stored, db one FP32 sum of the stored dx
TORCH_BF16 = SCHEDULES.schedule("torch-bf16", SCHEDULES.BF16_FAITHFUL.with_store(h=torch.bfloat16,
                                                                                 dx_sum=torch.bfloat16))
# A fused kernel's loop: db accumulated over tiles of 1024 rows in FP32, or in its BF16 output buffer
TILED_FP32 = SCHEDULES.schedule("tiled-fp32", b=(1024, torch.float32))
TILED_BF16 = SCHEDULES.schedule("tiled-bf16", b=(1024, torch.bfloat16))
SCHEDULES.set_default(TILED_FP32, study=(TILED_BF16, TILED_FP32, TORCH_BF16))

OPERATOR = Operator(
    name="bias_gelu_backward",
    dims=("M", "N"),
    inputs=(TensorDecl("x", ("M", "N")), TensorDecl("b", (1, "N")), TensorDecl("dy", ("M", "N"))),
    outputs=OUTPUTS,
    sizes_from={"M": ("x", 0), "N": ("x", 1)},
    golden=DERIVED.golden,
    gate=DERIVED.gate,
    schedules=SCHEDULES,
    scales=profiles.SCALES,
    m_edges=profiles.M_EDGES,
    shapes=profiles.SHAPES,
    acceptance_case=profiles.ACCEPTANCE_CASE,
    title="Bias + GELU backward (derived allowances)",
    backends={
        "torch-eager": "operators.bias_gelu_backward.backends:torch_eager",
        "torch-fp32": "operators.bias_gelu_backward.backends:torch_fp32",
        "tiled-emulation": "operators.bias_gelu_backward.backends:tiled_emulation",
    },
    default_backends=("torch-eager", "torch-fp32", "tiled-emulation"),
    expectations=Path(__file__).parent / "expectations",
)
