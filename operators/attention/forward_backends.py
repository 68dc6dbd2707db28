"""The forward operators' backends (``operators.attention.forward``): each takes q [M, D], kt, vt
[D, N] in BF16 and returns O [M, D] in BF16 and LSE [M, 1] in FP32:

* ``torch-eager``: ``F.scaled_dot_product_attention``'s math path in BF16 for O, and
  ``torch.logsumexp`` of the FP32 scores for LSE (the math path returns none);
* ``torch-fp32``: the math path in FP32 from the BF16 inputs, O stored once; LSE as above;
* ``torch-flash-cpu``: PyTorch's CPU flash-attention kernel, which returns both
  (``aten._scaled_dot_product_flash_attention_for_cpu``);
* ``flash-emulation``: FlashAttention-2's forward loop replayed in PyTorch (``operators.attention.flash``);
* ``triton-flash``: the Triton forward kernel (``operators.attention.triton_flash``), compiled on
  CUDA, triton's interpreter on the CPU with TRITON_INTERPRET=1 (without it a case records a skip);
* ``torch-compile``: ``torch-eager``'s O compiled;
* ``torch-flash-cuda``, ``torch-efficient-cuda``: PyTorch's CUDA flash-attention and
  memory-efficient kernels, which return their LSE (``--device cuda``; on CPU inputs a skip
  saying so).
"""
from __future__ import annotations

import math

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from contract.heads import head_by_head
from operators.attention import flash, triton_flash as _triton
from operators.attention.backends import on_cuda
from operators.attention.forward import REFERENCE, SCHEDULES

BF16 = torch.bfloat16


def scores_logsumexp(q, kt, *, causal: bool) -> torch.Tensor:
    """LSE [M, 1] from the FP32 scores of the BF16 inputs (PyTorch's max-subtracted logsumexp)."""
    s = (q.float() @ kt.float()) * (1 / math.sqrt(q.shape[1]))
    if causal:
        m, n = s.shape
        s = s.masked_fill(torch.ones(m, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.logsumexp(s, -1, keepdim=True)


def sdpa_forward(q, kt, vt, *, causal: bool, dtype: torch.dtype, compiled: bool = False) -> dict[str, torch.Tensor]:
    def forward(q4, k4, v4):
        return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

    fn = torch.compile(forward, dynamic=False) if compiled else forward
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        o = fn(*(t.to(dtype).unsqueeze(0).unsqueeze(0) for t in (q, kt.t(), vt.t())))
    return {"o": o[0, 0].to(BF16), "lse": scores_logsumexp(q, kt, causal=causal)}


def _four(q, kt, vt):
    return tuple(t.unsqueeze(0).unsqueeze(0) for t in (q, kt.t().contiguous(), vt.t().contiguous()))


def _returned(o, lse, m: int) -> dict[str, torch.Tensor]:
    """O [1, 1, M, D] and LSE [1, 1, M'] (the efficient kernel pads M' to its block) as [M, D], [M, 1]."""
    return {"o": o[0, 0].contiguous(), "lse": lse[0, 0, :m].float().unsqueeze(1).contiguous()}


def make(causal: bool, schedules, reference):
    """The forward backends with or without the causal mask, each declaring its schedule."""
    def torch_eager(*, q, kt, vt):
        return sdpa_forward(q, kt, vt, causal=causal, dtype=BF16)

    def torch_fp32(*, q, kt, vt):
        return sdpa_forward(q, kt, vt, causal=causal, dtype=torch.float32)

    def torch_compile(*, q, kt, vt):
        return sdpa_forward(q, kt, vt, causal=causal, dtype=BF16, compiled=True)

    def torch_flash_cpu(*, q, kt, vt):
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*_four(q, kt, vt), 0.0, causal)
        return _returned(o, lse, q.shape[0])

    def torch_flash_cuda(*, q, kt, vt):
        on_cuda(q, "PyTorch's flash-attention SDPA kernel")
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention(*_four(q, kt, vt), 0.0, causal)[:2]
        return _returned(o, lse, q.shape[0])

    def torch_efficient_cuda(*, q, kt, vt):
        on_cuda(q, "PyTorch's memory-efficient SDPA kernel")
        o, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
            *_four(q, kt, vt), None, True, 0.0, causal)[:2]
        return _returned(o, lse, q.shape[0])

    def flash_emulation(*, q, kt, vt):
        return flash.forward(q, kt, vt, causal=causal)

    def triton_flash(*, q, kt, vt):
        return _triton.run_forward(q, kt, vt, causal=causal)

    torch_eager.schedule = torch_compile.schedule = reference.torch_bf16
    torch_fp32.schedule = schedules.FAITHFUL_GLOBAL
    torch_flash_cpu.schedule = reference.torch_flash_cpu
    flash_emulation.schedule = torch_flash_cuda.schedule = torch_efficient_cuda.schedule = reference.flash
    triton_flash.schedule = reference.triton_flash
    # given H heads (``operators.attention.forward_heads``: every tensor [H, ...]), each runs head by head
    # but the Triton kernel, which launches over every head at once
    by_head = (head_by_head(fn) for fn in (torch_eager, torch_compile, torch_flash_cpu, torch_fp32, flash_emulation))
    return (*by_head, triton_flash, *(head_by_head(fn) for fn in (torch_flash_cuda, torch_efficient_cuda)))


(torch_eager, torch_compile, torch_flash_cpu, torch_fp32, flash_emulation, triton_flash, torch_flash_cuda,
 torch_efficient_cuda) = make(False, SCHEDULES, REFERENCE)
