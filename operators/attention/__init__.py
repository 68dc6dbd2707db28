"""Attention, forward and backward for one head (FlashAttention-style), non-causal: N keys for M queries.

Inputs q [M, D], kt [D, N], vt [D, N] (keys and values held transposed), do [M, D]; outputs o and
dq [M, D] (rows: their softmax over N stays inside the query's row) and dkt, dvt [D, N] (sums over
the M query rows, cut by the backward kernel's query tile). The math and its rounding points are
``operators.attention.math``; the golden, the allowances and the diagnosis bounds are derived from
them (``accuracy.derived``). The causal operator (M = N, key j > query i masked) is
``operators.attention.causal``. LSE is the forward's output a kernel hands its own backward:
checked through dq, dkt, dvt, which read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from accuracy.derived import DerivedMath
from contract.operator import Operator, OutputDecl, TensorDecl
from operators.attention import math, profiles

BF16 = torch.bfloat16


def outputs(keys: str) -> tuple[OutputDecl, ...]:
    return (OutputDecl("o", ("M", "D")), OutputDecl("dq", ("M", "D")),
            OutputDecl("dkt", ("D", keys), "contraction", "bwd"), OutputDecl("dvt", ("D", keys), "contraction", "bwd"))


def inputs(keys: str) -> tuple[TensorDecl, ...]:
    return (TensorDecl("q", ("M", "D")), TensorDecl("kt", ("D", keys)), TensorDecl("vt", ("D", keys)),
            TensorDecl("do", ("M", "D")))


@dataclass(frozen=True)
class ReferenceSchedules:
    """An attention operator's declared schedules (each a ``goldens.schedule_data.Schedule``)."""
    flash: object            # FlashAttention-2's 128 x 128 blocks
    flash_bf16_partials: object
    torch_bf16: object
    torch_flash_cpu: object
    triton_flash: object     # the Triton kernel's 64 x 64 blocks (``operators.attention.triton_flash``)


def schedules(derived: DerivedMath) -> ReferenceSchedules:
    """The reference schedules: FlashAttention-2's 128 x 128 blocks (P~, P and dS in BF16, delta
    from the stored O, dK and dV summed over query tiles in FP32; the default), the same with dK and
    dV's query-tile partials added in BF16 (a split kernel that stores its partials), PyTorch's BF16
    autograd of the math path (P and dS stored, global sums), PyTorch's CPU flash kernel and the
    Triton kernel. Each golden's plan runs the online softmax over its key blocks (``Plan.loops``)."""
    s = derived.schedules
    stored = s.BF16_FAITHFUL.with_store(p=BF16, p_bwd=BF16, ds=BF16, o_in=BF16)

    def blocks(name, queries, keys, accumulator):
        return s.schedule(name, stored.with_loops(key=keys), bwd=(queries, accumulator))

    flash = blocks("flash-128x128", profiles.BLOCK, profiles.BLOCK, torch.float32)
    split_bf16 = blocks("flash-128x128-bf16-partials", profiles.BLOCK, profiles.BLOCK, BF16)
    # PyTorch's CPU flash kernel (aten FlashAttentionKernel): 512-key blocks, and its backward adds
    # dK and dV's query-block partials in their BF16 outputs; at M = N = 2048 its errors equal a
    # BF16 accumulation over 256-query blocks to 3 digits (rms 3.88e-3 and 3.92e-3 of rms(dK), rms(dV))
    torch_flash_cpu = blocks("torch-flash-cpu", 256, 512, BF16)
    triton_flash = blocks("triton-flash-64x64", 64, 64, torch.float32)
    s.set_default(flash, study=(split_bf16, flash, torch_flash_cpu))
    return ReferenceSchedules(flash, split_bf16, s.schedule("torch-bf16", stored), torch_flash_cpu, triton_flash)


BACKENDS = ("torch-eager", "torch-fp32", "flash-emulation", "triton-flash")
# PyTorch's CPU flash kernel adds dK, dV's partials in BF16 (``schedules``): outside the operator's
# legitimate choices, it fails dK, dV at the acceptance case (a known failure) and a few elements
# of them at some small cases and seeds; a run without --backend shows it at the acceptance case
ACCEPTANCE_BACKENDS = ("torch-flash-cpu",)


def backend_paths(module: str) -> dict[str, str]:
    return {"torch-eager": f"{module}:torch_eager", "torch-compile": f"{module}:torch_compile",
            "torch-flash-cpu": f"{module}:torch_flash_cpu", "torch-fp32": f"{module}:torch_fp32",
            "flash-emulation": f"{module}:flash_emulation", "triton-flash": f"{module}:triton_flash",
            "torch-flash-cuda": f"{module}:torch_flash_cuda", "torch-efficient-cuda": f"{module}:torch_efficient_cuda"}


# The golden evaluates at most this many (queries x keys) scores at a time: 16 queries at N = 32768.
# Its rounding model holds some 90 FP64 tensors of that size: the golden pass of one 1024-row chunk
# at M = N = 32768, D = 128 peaked at 3.30 GB RSS with 2^19 (323 s on 2 shared cores), 4.69 GB
# with 2^21 (160 s)
ROW_ELEMENTS = 1 << 19


def declaration(name: str, causal: bool, derived: DerivedMath, *, inputs, outputs, title: str, backends: str,
                expectations: str) -> Operator:
    """An attention operator from its derived math: the dimensions, profiles, edges and acceptance
    case every attention operator shares; ``backends``, ``expectations``: its module and folder here."""
    return Operator(
        name=name,
        dims=("M", "D") if causal else ("M", "N", "D"),
        inputs=inputs,
        outputs=outputs,
        sizes_from={"M": ("q", 0), "D": ("q", 1), **({} if causal else {"N": ("kt", 1)})},
        golden=derived.golden,
        gate=derived.gate,
        schedules=derived.schedules,
        scales=profiles.CAUSAL_SCALES if causal else profiles.SCALES,
        m_edges=profiles.M_EDGES,
        shapes=profiles.CAUSAL_SHAPES if causal else profiles.SHAPES,
        acceptance_case=profiles.CAUSAL_ACCEPTANCE_CASE if causal else profiles.ACCEPTANCE_CASE,
        range_cases=profiles.CAUSAL_RANGE_CASES if causal else profiles.RANGE_CASES,
        title=title,
        backends=backend_paths("operators.attention." + backends),
        default_backends=BACKENDS,
        acceptance_backends=ACCEPTANCE_BACKENDS,
        expectations=Path(__file__).parent / expectations,
        study_shape=(64,) if causal else (129, 64),
    )


def declare(name: str, causal: bool) -> tuple[Operator, DerivedMath, ReferenceSchedules]:
    """The non-causal operator (M queries, N keys) or the causal one (M = N: kt, vt [D, M], each
    query's index in M passed to the math for its mask), from the same math and points."""
    keys = "M" if causal else "N"
    derived = DerivedMath(math.causal if causal else math.non_causal, math.POINTS, outputs(keys),
                          operand_points={"dkt": "ds", "dvt": "p_bwd"}, row_index="row" if causal else None,
                          row_elements=ROW_ELEMENTS)
    reference = schedules(derived)
    operator = declaration(name, causal, derived, inputs=inputs(keys), outputs=outputs(keys),
                           title=("Causal attention" if causal else "Attention") + " forward + backward (derived allowances)",
                           backends="causal_backends" if causal else "backends",
                           expectations="expectations-causal" if causal else "expectations")
    return operator, derived, reference


OPERATOR, DERIVED, REFERENCE = declare("attention", causal=False)
SCHEDULES = DERIVED.schedules
