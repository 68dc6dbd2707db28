"""Attention's forward alone, for one head: O [M, D] in BF16 and LSE [M, 1] in FP32, as a forward
kernel (FlashAttention's ``flash_attn_func`` with its softmax LSE, PyTorch's CPU flash kernel)
returns them. LSE is gated on its own here, in FP32 (``accuracy.tolerances.FP32_ACCEPTANCE``): it
is what a split-KV combine reads (each split's O weighted by exp(LSE_split - LSE)) and what the
backward recomputes P from, so an error of e in it scales every probability of its row by exp(-e).
The fused forward + backward operators (``operators.attention``) check it only through dq, dkt
and dvt, which read it.

The same math as the fused operators' forward (``operators.attention.math.forward``), one rounding
point (P~ stored in BF16 before P~ V), the same profiles and edges; no reductions over M.
``attention_forward`` is non-causal (M queries, N keys), ``attention_forward_causal`` (M = N) in
``operators.attention.forward_causal``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from accuracy.derived import DerivedMath
from contract.operator import Operator, OutputDecl
from operators.attention import ROW_ELEMENTS, declaration, inputs as _inputs, math, profiles

BF16 = torch.bfloat16


def outputs() -> tuple[OutputDecl, ...]:
    return OutputDecl("o", ("M", "D")), OutputDecl("lse", ("M", 1), dtype=torch.float32)


@dataclass(frozen=True)
class ForwardSchedules:
    """The forward's declared schedules: its online softmax over key blocks of each size."""
    flash: object            # FlashAttention-2's 128-key blocks (the default)
    torch_bf16: object       # PyTorch's math path: P~ stored, one pass over the keys
    torch_flash_cpu: object  # PyTorch's CPU flash kernel: 512-key blocks
    triton_flash: object     # the Triton kernel here: 64-key blocks


def schedules(derived: DerivedMath) -> ForwardSchedules:
    s = derived.schedules
    stored = s.BF16_FAITHFUL.with_store(p=BF16)

    def blocks(name, keys):
        return s.schedule(name, stored.with_loops(key=keys))

    flash = blocks("flash-128", profiles.BLOCK)
    s.set_default(flash)
    return ForwardSchedules(flash, s.schedule("torch-bf16", stored), blocks("torch-flash-cpu", 512),
                            blocks("triton-flash-64", 64))


def declare(name: str, causal: bool) -> tuple[Operator, DerivedMath, ForwardSchedules]:
    keys = "M" if causal else "N"
    derived = DerivedMath(math.forward_causal if causal else math.forward_non_causal, math.FORWARD_POINTS,
                          outputs(), row_index="row" if causal else None, row_elements=ROW_ELEMENTS)
    reference = schedules(derived)
    operator = declaration(name, causal, derived, inputs=_inputs(keys)[:3], outputs=outputs(),
                           title=("Causal attention" if causal else "Attention") + " forward, O and its FP32 LSE (derived allowances)",
                           backends="forward_causal_backends" if causal else "forward_backends",
                           expectations="expectations-forward-causal" if causal else "expectations-forward")
    return operator, derived, reference


OPERATOR, DERIVED, REFERENCE = declare("attention_forward", causal=False)
SCHEDULES = DERIVED.schedules
