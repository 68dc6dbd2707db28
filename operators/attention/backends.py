"""Attention's backends (non-causal; ``causal_backends`` holds the same for the causal operator).
Each takes q [M, D], kt, vt [D, N], do [M, D] in BF16 and returns o, dq [M, D] and dkt, dvt [D, N]
in BF16, from one forward and its backward; given H heads (``operators.attention.heads``: every
tensor [H, ...]) the same over all heads at once (PyTorch's, the Triton kernel) or head by head
(the emulation):

* ``torch-eager``: PyTorch's BF16 autograd of ``F.scaled_dot_product_attention`` on its math path
  (the dual verdict's benchmark); ``torch-compile``: the same compiled;
* ``torch-flash-cpu``: the same on PyTorch's CPU flash-attention kernel (blocked, online softmax);
* ``torch-fp32``: the math path in FP32 from the BF16 inputs, each output stored once;
* ``flash-emulation``: FlashAttention-2's loops replayed in PyTorch (``operators.attention.flash``:
  128 x 128 blocks, P~, P and dS in BF16, FP32 statistics and accumulators);
* ``triton-flash``: the same algorithm as a Triton kernel (``operators.attention.triton_flash``,
  64 x 64 blocks): compiled on CUDA, triton's interpreter on the CPU with TRITON_INTERPRET=1
  (without it a case records a skip saying so);
* ``torch-flash-cuda``, ``torch-efficient-cuda``: PyTorch's CUDA flash-attention and
  memory-efficient SDPA kernels (``--device cuda``); on CPU inputs a case records a skip saying so
  (neither has a CPU kernel: PyTorch's CPU flash kernel is ``torch-flash-cpu``).
"""
from __future__ import annotations

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from contract.backend import BackendUnsupported
from contract.heads import head_by_head
from operators.attention import REFERENCE, SCHEDULES, flash, triton_flash as _triton

BF16 = torch.bfloat16


def sdpa(q, kt, vt, do, *, causal: bool, dtype: torch.dtype, backend: SDPBackend, compiled: bool = False):
    """Autograd of ``scaled_dot_product_attention`` over [1, H, S, D] views of the inputs (one head:
    [M, D] and [D, N]; H heads: [H, M, D] and [H, D, N])."""
    leaves = [t.to(dtype).contiguous().detach().requires_grad_(True) for t in (q, kt.mT, vt.mT)]

    def four(t):
        return t.reshape(1, -1, *t.shape[-2:])

    def forward(q4, k4, v4):
        return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

    fn = torch.compile(forward, dynamic=False) if compiled else forward
    with sdpa_kernel(backend):
        o = fn(*(four(t) for t in leaves))
        dq, dk, dv = torch.autograd.grad(o, leaves, grad_outputs=four(do.to(dtype)))
    return {"o": o.reshape(q.shape).to(BF16), "dq": dq.to(BF16), "dkt": dk.mT.contiguous().to(BF16),
            "dvt": dv.mT.contiguous().to(BF16)}


def on_cuda(q: torch.Tensor, kernel: str) -> None:
    """BackendUnsupported unless the case's inputs are on a CUDA device."""
    if q.device.type != "cuda":
        raise BackendUnsupported(f"{kernel} runs on CUDA only; the inputs are on {q.device.type} "
                                 f"(run the matrix with --device cuda on a machine with a GPU)")


def make(causal: bool, schedules, reference):
    """The backends of the operator with or without the causal mask, each declaring its schedule."""
    def torch_eager(*, q, kt, vt, do):
        return sdpa(q, kt, vt, do, causal=causal, dtype=BF16, backend=SDPBackend.MATH)

    def torch_compile(*, q, kt, vt, do):
        return sdpa(q, kt, vt, do, causal=causal, dtype=BF16, backend=SDPBackend.MATH, compiled=True)

    def torch_flash_cpu(*, q, kt, vt, do):
        return sdpa(q, kt, vt, do, causal=causal, dtype=BF16, backend=SDPBackend.FLASH_ATTENTION)

    def torch_flash_cuda(*, q, kt, vt, do):
        on_cuda(q, "PyTorch's flash-attention SDPA kernel")
        return sdpa(q, kt, vt, do, causal=causal, dtype=BF16, backend=SDPBackend.FLASH_ATTENTION)

    def torch_efficient_cuda(*, q, kt, vt, do):
        on_cuda(q, "PyTorch's memory-efficient SDPA kernel")
        return sdpa(q, kt, vt, do, causal=causal, dtype=BF16, backend=SDPBackend.EFFICIENT_ATTENTION)

    def torch_fp32(*, q, kt, vt, do):
        return sdpa(q, kt, vt, do, causal=causal, dtype=torch.float32, backend=SDPBackend.MATH)

    @head_by_head
    def flash_emulation(*, q, kt, vt, do):
        return flash.run(q, kt, vt, do, causal=causal)

    def triton_flash(*, q, kt, vt, do):     # one launch over every head
        return _triton.run(q, kt, vt, do, causal=causal)

    torch_eager.schedule = torch_compile.schedule = reference.torch_bf16
    torch_flash_cpu.schedule = reference.torch_flash_cpu
    torch_fp32.schedule = schedules.FAITHFUL_GLOBAL
    flash_emulation.schedule = reference.flash
    triton_flash.schedule = reference.triton_flash
    # FlashAttention-2's CUDA kernel and the memory-efficient one both hold P in BF16 before P V
    # and dS in BF16 before its matmuls, with FP32 statistics (the declaration names the tiled
    # layer a failure is attributed to; the verdict does not read it)
    torch_flash_cuda.schedule = torch_efficient_cuda.schedule = reference.flash
    return (torch_eager, torch_compile, torch_flash_cpu, torch_fp32, flash_emulation, triton_flash,
            torch_flash_cuda, torch_efficient_cuda)


(torch_eager, torch_compile, torch_flash_cpu, torch_fp32, flash_emulation, triton_flash, torch_flash_cuda,
 torch_efficient_cuda) = make(False, SCHEDULES, REFERENCE)
