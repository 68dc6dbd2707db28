"""The fused SwiGLU backward of the seed article (three kernels: b, w, x).

Inputs x [M,K], w_g, w_fc [K,N], dy, g, fc [M,N]; outputs dg, dfc [M,N] (rows), db_g, db_fc
[1,N] (sums over M, the b kernel's tile), dw_g, dw_fc [K,N] (contractions over M, the w
kernel's tile), dx [M,K] (rows). Its math is in ``operators.swiglu_backward.math``."""
from __future__ import annotations

from pathlib import Path

from contract.operator import Operator, OutputDecl, TensorDecl
from operators.swiglu_backward import gate, golden, profiles, schedule

OPERATOR = Operator(
    name="swiglu_backward",
    dims=("M", "K", "N"),
    inputs=(TensorDecl("x", ("M", "K")), TensorDecl("w_g", ("K", "N")), TensorDecl("w_fc", ("K", "N")),
            TensorDecl("dy", ("M", "N")), TensorDecl("g", ("M", "N")), TensorDecl("fc", ("M", "N"))),
    outputs=(OutputDecl("dg", ("M", "N")), OutputDecl("dfc", ("M", "N")),
             OutputDecl("db_g", (1, "N"), "sum_over_m", "b", "db"), OutputDecl("db_fc", (1, "N"), "sum_over_m", "b", "db"),
             OutputDecl("dw_g", ("K", "N"), "contraction", "w", "dw"),
             OutputDecl("dw_fc", ("K", "N"), "contraction", "w", "dw"),
             OutputDecl("dx", ("M", "K"))),
    sizes_from={"M": ("x", 0), "K": ("x", 1), "N": ("w_g", 1)},
    golden=golden,
    gate=gate,
    schedules=schedule,
    scales=profiles.SCALES,
    m_edges=profiles.M_EDGES,
    shapes=profiles.SHAPES,
    acceptance_case=profiles.ACCEPTANCE_CASE,
    range_cases=profiles.RANGE_CASES,
    title="SwiGLU backward",
    backends={
        "torch-eager": "operators.swiglu_backward.kernels.torch_autograd:torch_eager",
        "torch-compile": "operators.swiglu_backward.kernels.torch_autograd:torch_compile",
        "pypto": "operators.swiglu_backward.kernels.pypto.backend:pypto_article",
        "pypto-hardened": "operators.swiglu_backward.kernels.pypto.backend:pypto_hardened",
        "triton": "operators.swiglu_backward.kernels.triton.backend:triton_deterministic",
        "triton-atomic": "operators.swiglu_backward.kernels.triton.backend:triton_atomic",
        "triton-article": "operators.swiglu_backward.kernels.triton.backend:triton_article",
        "tiled-emulation": "operators.swiglu_backward.kernels.tiled_emulation:tiled_emulation",
        "article-schedule-emulated": "operators.swiglu_backward.kernels.tiled_emulation:tiled_emulation",
        "hardened-schedule-emulated": "operators.swiglu_backward.kernels.tiled_emulation:tiled_emulation_hardened",
    },
    default_backends=("pypto", "torch-eager"),   # the article's kernel beside PyTorch's own
    # the article's kernel cannot run at M=220000 through PyPTO's CPU interpreter: its schedule
    # and the hardened one, replayed by the tiled golden, stand in for it there
    acceptance_backends=("article-schedule-emulated", "hardened-schedule-emulated"),
    expectations=Path(__file__).parent / "expectations",
    study_shape=(64, 128),      # K, N: 20 seeds x 12 M under five minutes on 2 cores (reports.drift_study)
)
