"""The forward operators' backends (``operators.attention.forward``): each takes q [M, D], kt, vt
[D, N] in BF16 and returns O [M, D] in BF16 and LSE [M, 1] in FP32:

* ``torch-eager``: ``F.scaled_dot_product_attention``'s math path in BF16 for O, and
  ``torch.logsumexp`` of the FP32 scores for LSE (the math path returns none);
* ``torch-fp32``: the math path in FP32 from the BF16 inputs, O stored once; LSE as above;
* ``torch-flash-cpu``: PyTorch's CPU flash-attention kernel, which returns both
  (``aten._scaled_dot_product_flash_attention_for_cpu``);
* ``flash-emulation``: FlashAttention-2's forward loop replayed in PyTorch (``operators.attention.flash``);
* ``triton-flash``: the Triton forward kernel (``operators.attention.triton_flash``), compiled on
  CUDA, triton's interpreter on the CPU with TRITON_INTERPRET=1 (without it a case records a skip).
"""
from __future__ import annotations

import math

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from operators.attention import flash, triton_flash as _triton
from operators.attention.forward import REFERENCE, SCHEDULES

BF16 = torch.bfloat16


def scores_logsumexp(q, kt, *, causal: bool) -> torch.Tensor:
    """LSE [M, 1] from the FP32 scores of the BF16 inputs (PyTorch's max-subtracted logsumexp)."""
    s = (q.float() @ kt.float()) * (1 / math.sqrt(q.shape[1]))
    if causal:
        m, n = s.shape
        s = s.masked_fill(torch.ones(m, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.logsumexp(s, -1, keepdim=True)


def sdpa_forward(q, kt, vt, *, causal: bool, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        o = torch.nn.functional.scaled_dot_product_attention(
            *(t.to(dtype).unsqueeze(0).unsqueeze(0) for t in (q, kt.t(), vt.t())), is_causal=causal)
    return {"o": o[0, 0].to(BF16), "lse": scores_logsumexp(q, kt, causal=causal)}


def make(causal: bool, schedules, reference):
    """The forward backends with or without the causal mask, each declaring its schedule."""
    def torch_eager(*, q, kt, vt):
        return sdpa_forward(q, kt, vt, causal=causal, dtype=BF16)

    def torch_fp32(*, q, kt, vt):
        return sdpa_forward(q, kt, vt, causal=causal, dtype=torch.float32)

    def torch_flash_cpu(*, q, kt, vt):
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            *(t.unsqueeze(0).unsqueeze(0) for t in (q, kt.t().contiguous(), vt.t().contiguous())), 0.0, causal)
        return {"o": o[0, 0].contiguous(), "lse": lse[0, 0].unsqueeze(1).contiguous()}

    def flash_emulation(*, q, kt, vt):
        return flash.forward(q, kt, vt, causal=causal)

    def triton_flash(*, q, kt, vt):
        return _triton.run_forward(q, kt, vt, causal=causal)

    torch_eager.schedule = reference.torch_bf16
    torch_fp32.schedule = schedules.FAITHFUL_GLOBAL
    torch_flash_cpu.schedule = reference.torch_flash_cpu
    flash_emulation.schedule = reference.flash
    triton_flash.schedule = reference.triton_flash
    return torch_eager, torch_fp32, torch_flash_cpu, flash_emulation, triton_flash


torch_eager, torch_fp32, torch_flash_cpu, flash_emulation, triton_flash = make(False, SCHEDULES, REFERENCE)
