"""The two interpreter traps the kernels are built around (triton 3.9.0), pinned.

If one of these starts failing, triton changed: the workaround in
``operators/swiglu_backward/kernels/triton/_kernels.py`` may be removable (say so there), never silently kept.
"""
from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="triton is not installed (pip install '.[triton]')")
if not triton.__version__.startswith("3.9."):
    pytest.skip(f"the traps are pinned for triton 3.9.x; this is {triton.__version__}", allow_module_level=True)
tl = pytest.importorskip("triton.language")
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402


def _dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, FP32: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    if FP32:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b, out_dtype=tl.float32))


def _narrow(src_ptr, dst_ptr, n: tl.constexpr):
    r = tl.arange(0, n)
    tl.store(dst_ptr + r, tl.load(src_ptr + r).to(tl.bfloat16))


def test_bf16_dot_is_garbage_and_fp32_dot_accurate():
    """FP32 tl.dot is within the FP32 rounding bound of the exact product (K = 16 products:
    gamma_16 x sum |a||b|); the interpreter's numpy dot and torch's BLAS may sum in other orders,
    so bit equality with torch is a property of the machine's BLAS, not of triton (measured: 4.8e-7
    apart on an AMD EPYC with AVX2 only, equal on an Intel Xeon)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 16, generator=gen).bfloat16()
    b = torch.randn(16, 32, generator=gen).bfloat16()
    exact = a.double() @ b.double()
    bound = float((16 * 2.0 ** -24 * (a.double().abs() @ b.double().abs())).max())
    kern = InterpretedFunction(_dot)
    errors = {}
    for fp32 in (False, True):
        c = torch.zeros(64, 32)
        kern[(1,)](a, b, c, 64, 32, 16, fp32)
        errors[fp32] = float((c.double() - exact).abs().max())
    assert errors[True] <= bound, (errors[True], bound)
    assert errors[False] > 1e6, f"BF16 tl.dot in the interpreter now errs only {errors[False]:.3g}: trap fixed?"


def test_native_bf16_narrowing_truncates():
    x = torch.randn(4096, generator=torch.Generator().manual_seed(1))
    out = torch.empty(4096, dtype=torch.bfloat16)
    InterpretedFunction(_narrow)[(1,)](x, out, 4096)
    wrong = int((out.view(torch.int16) != x.bfloat16().view(torch.int16)).sum())
    assert wrong > 1000, f"only {wrong} of 4096 differ from round-to-nearest-even: trap fixed?"
