"""RMSNorm backward: y = x * rsqrt(mean(x^2, -1) + eps) * w (eps = 1e-6).

Inputs x [M, N], w [1, N] (the weight as a row), dy [M, N]; outputs dx [M, N] (rows: its
reduction over N stays inside the row) and dw [1, N] (a sum over M of dy * xhat, tiled by the
``w`` loop). Math in ``operators.rmsnorm_backward.math``; the second operator of the framework,
declared in one folder."""
from __future__ import annotations

from pathlib import Path

from contract.operator import Operator, OutputDecl, TensorDecl
from operators.rmsnorm_backward import gate, golden, profiles, schedule

OPERATOR = Operator(
    name="rmsnorm_backward",
    dims=("M", "N"),
    inputs=(TensorDecl("x", ("M", "N")), TensorDecl("w", (1, "N")), TensorDecl("dy", ("M", "N"))),
    outputs=(OutputDecl("dx", ("M", "N")), OutputDecl("dw", (1, "N"), "sum_over_m", "w")),
    sizes_from={"M": ("x", 0), "N": ("x", 1)},
    golden=golden,
    gate=gate,
    schedules=schedule.SCHEDULES,
    scales=profiles.SCALES,
    m_edges=profiles.M_EDGES,
    shapes=profiles.SHAPES,
    acceptance_case=profiles.ACCEPTANCE_CASE,
    title="RMSNorm backward",
    backends={
        "torch-eager": "operators.rmsnorm_backward.backends:torch_eager",
        "torch-compile": "operators.rmsnorm_backward.backends:torch_compile",
        "tiled-emulation": "operators.rmsnorm_backward.backends:tiled_emulation",
    },
    default_backends=("torch-eager", "tiled-emulation"),
    expectations=Path(__file__).parent / "expectations",
)
