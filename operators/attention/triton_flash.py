"""A FlashAttention-2-style attention kernel in Triton (forward and backward, one head or H heads in
one launch, each program offset by its head's stride), run by triton's CPU interpreter in CI and
compiled on CUDA.

Forward (one program per block of ``BLOCK_M`` queries): the loop over key blocks of ``BLOCK_N``
with the running max, the running sum and the O accumulator rescaled in FP32, each block's
P~ = exp(S - m) rounded to BF16 before P~ V; O = acc / l stored in BF16, LSE = m + log l in FP32.
Backward (one program per block of ``BLOCK_N`` keys, FlashAttention-2's): over the query blocks,
P = exp(S - LSE) recomputed and rounded to BF16 before dV += P^T dO, dP = dO V^T,
dS = P (dP - delta) rounded to BF16 before dK += dS^T Q and dQ += dS K (FP32 atomics across the
key programs); delta = rowsum(dO * O) from the stored O, computed on the host before the launch.
dK and dV stay in FP32 registers over every query block and are stored once.

The interpreter traps of triton 3.9.0 (``operators/swiglu_backward/kernels/triton/_kernels.py``
pins them) are handled the same way: BF16 tiles are widened to FP32 through their bits before
``tl.dot(..., input_precision="ieee")`` (the interpreter's BF16 dot multiplies raw integers), every
FP32 -> BF16 rounding goes through the bits (round half to even: the interpreter's ``.to``
truncates), and the reductions are ``tl.reduce`` with triton's own combine functions, which the
interpreter maps to numpy (``tl.max`` and ``tl.sum`` are jit functions frozen at import).
"""
from __future__ import annotations

import math
import os
from types import SimpleNamespace

import torch

from contract.backend import BackendUnsupported

BLOCK_M = 64
BLOCK_N = 64
# The interpreter runs each program's block loop in numpy: M = N = 2048 at D = 128 (2^22 query-key
# pairs) took 33 s here (2 cores), M = 129, N = 257 at D = 64 1.0 s. Above 2^21 pairs over all heads
# (every quick case of the operators but the acceptance cases' 2048 x 2048; the causal M = 1025
# has 1.05e6) a case is refused with this estimate: override with ATTENTION_TRITON_INTERPRET_MAX_PAIRS.
INTERPRETER_MAX_PAIRS = 1 << 21

try:
    import triton
    import triton.language as tl
except ImportError:      # the backend says so when called
    triton = None


def _fwd(q_ptr, kt_ptr, vt_ptr, o_ptr, lse_ptr, M, N, scale,
         D: tl.constexpr, BLOCK_M_: tl.constexpr,
         BLOCK_N_: tl.constexpr, CAUSAL: tl.constexpr):
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)        # each head's tensors at its stride: [H, M, D], [H, D, N]
    q_ptr += head * M * D
    kt_ptr += head * D * N
    vt_ptr += head * D * N
    o_ptr += head * M * D
    lse_ptr += head * M
    rows = pid * BLOCK_M_ + tl.arange(0, BLOCK_M_)
    dims = tl.arange(0, D)
    rmask = rows < M
    q16 = tl.load(q_ptr + rows.to(tl.int64)[:, None] * D + dims[None, :], mask=rmask[:, None], other=0)
    q = (q16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    m = tl.full([BLOCK_M_], -1e30, tl.float32)
    l = tl.full([BLOCK_M_], 0.0, tl.float32)
    acc = tl.full([BLOCK_M_, D], 0.0, tl.float32)
    for j0 in range(0, N, BLOCK_N_):
        cols = j0 + tl.arange(0, BLOCK_N_)
        cmask = cols < N
        kt16 = tl.load(kt_ptr + dims.to(tl.int64)[:, None] * N + cols[None, :], mask=cmask[None, :], other=0)
        kt = (kt16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        v16 = tl.load(vt_ptr + dims.to(tl.int64)[None, :] * N + cols[:, None], mask=cmask[:, None], other=0)
        v = (v16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        s = tl.dot(q, kt, input_precision="ieee") * scale
        keep = cmask[None, :] & rmask[:, None]
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.reduce(s, 1, tl.standard._elementwise_max))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = alpha * l + tl.reduce(p, 1, tl.standard._sum_combine)
        bits = p.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        p_b = (bits << 16).to(tl.float32, bitcast=True)
        acc = acc * alpha[:, None] + tl.dot(p_b, v, input_precision="ieee")
        m = m_new
    o = acc / l[:, None]
    bits = o.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    bits = tl.where(o != o, 0x7FC0, bits).to(tl.uint16)
    tl.store(o_ptr + rows.to(tl.int64)[:, None] * D + dims[None, :], bits.to(tl.bfloat16, bitcast=True),
             mask=rmask[:, None])
    tl.store(lse_ptr + rows, m + tl.log(l), mask=rmask)


def _bwd(q_ptr, kt_ptr, vt_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, dkt_ptr, dvt_ptr, M, N, scale,
         D: tl.constexpr, BLOCK_M_: tl.constexpr,
         BLOCK_N_: tl.constexpr, CAUSAL: tl.constexpr):
    pid = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    q_ptr += head * M * D
    do_ptr += head * M * D
    dq_ptr += head * M * D
    kt_ptr += head * D * N
    vt_ptr += head * D * N
    dkt_ptr += head * D * N
    dvt_ptr += head * D * N
    lse_ptr += head * M
    delta_ptr += head * M
    cols = pid * BLOCK_N_ + tl.arange(0, BLOCK_N_)
    dims = tl.arange(0, D)
    cmask = cols < N
    kt16 = tl.load(kt_ptr + dims.to(tl.int64)[:, None] * N + cols[None, :], mask=cmask[None, :], other=0)
    kt = (kt16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    k16 = tl.load(kt_ptr + dims.to(tl.int64)[None, :] * N + cols[:, None], mask=cmask[:, None], other=0)
    k = (k16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    vt16 = tl.load(vt_ptr + dims.to(tl.int64)[:, None] * N + cols[None, :], mask=cmask[None, :], other=0)
    vt = (vt16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    dk = tl.full([BLOCK_N_, D], 0.0, tl.float32)
    dv = tl.full([BLOCK_N_, D], 0.0, tl.float32)
    start = 0
    if CAUSAL:
        start = (pid * BLOCK_N_) // BLOCK_M_ * BLOCK_M_     # earlier queries see none of these keys
    for i0 in range(start, M, BLOCK_M_):
        rows = i0 + tl.arange(0, BLOCK_M_)
        rmask = rows < M
        offs = rows.to(tl.int64)[:, None] * D + dims[None, :]
        q16 = tl.load(q_ptr + offs, mask=rmask[:, None], other=0)
        q = (q16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        do16 = tl.load(do_ptr + offs, mask=rmask[:, None], other=0)
        do = (do16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        lse = tl.load(lse_ptr + rows, mask=rmask, other=0.0)
        delta = tl.load(delta_ptr + rows, mask=rmask, other=0.0)
        s = tl.dot(q, kt, input_precision="ieee") * scale
        keep = cmask[None, :] & rmask[:, None]
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        bits = p.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        p_b = (bits << 16).to(tl.float32, bitcast=True)
        dv += tl.dot(tl.trans(p_b), do, input_precision="ieee")
        dp = tl.dot(do, vt, input_precision="ieee")
        ds = p * (dp - delta[:, None])
        bits = ds.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        ds_b = (bits << 16).to(tl.float32, bitcast=True)
        dk += tl.dot(tl.trans(ds_b), q, input_precision="ieee") * scale
        dq = tl.dot(ds_b, k, input_precision="ieee") * scale
        tl.atomic_add(dq_ptr + offs, dq, mask=rmask[:, None])
    bits = dk.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    bits = tl.where(dk != dk, 0x7FC0, bits).to(tl.uint16)
    tl.store(dkt_ptr + dims.to(tl.int64)[None, :] * N + cols[:, None], bits.to(tl.bfloat16, bitcast=True),
             mask=cmask[:, None])
    bits = dv.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    bits = tl.where(dv != dv, 0x7FC0, bits).to(tl.uint16)
    tl.store(dvt_ptr + dims.to(tl.int64)[None, :] * N + cols[:, None], bits.to(tl.bfloat16, bitcast=True),
             mask=cmask[:, None])


_BUILT: dict = {}


def _kernels(interpret: bool) -> SimpleNamespace:
    if interpret not in _BUILT:
        if interpret:
            from triton.runtime.interpreter import InterpretedFunction as wrap
        else:
            wrap = triton.JITFunction
        _BUILT[interpret] = SimpleNamespace(fwd=wrap(_fwd), bwd=wrap(_bwd))
    return _BUILT[interpret]


def _mode(q: torch.Tensor, pairs: int) -> bool:
    """True: the interpreter; False: compiled (CUDA); else BackendUnsupported with the reason."""
    if triton is None:
        raise BackendUnsupported("triton is not installed (pip install -e '.[triton]')")
    if q.device.type == "cuda":
        return False
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendUnsupported("inputs on the CPU: set TRITON_INTERPRET=1 to run triton's interpreter")
    limit = int(os.environ.get("ATTENTION_TRITON_INTERPRET_MAX_PAIRS", INTERPRETER_MAX_PAIRS))
    if pairs > limit:
        raise BackendUnsupported(f"{pairs} query-key pairs is above the interpreter's limit {limit} "
                                 f"(ATTENTION_TRITON_INTERPRET_MAX_PAIRS)")
    return True


def _heads(*tensors: torch.Tensor) -> tuple[bool, list[torch.Tensor]]:
    """(whether the inputs came with a head dimension, each as a contiguous [H, ...] tensor)."""
    one = tensors[0].dim() == 2
    return not one, [(t.unsqueeze(0) if one else t).contiguous() for t in tensors]


def _checked(q: torch.Tensor, n: int) -> bool:
    """The kernel's mode (``_mode``) for [H, M, D] queries over N keys, or BackendUnsupported."""
    h, m, d = q.shape
    if d & (d - 1) or d < 16:
        raise BackendUnsupported(f"head dim {d}: the kernel's tiles need a power of two >= 16")
    return _mode(q, h * m * n)


def run(q, kt, vt, do, *, causal: bool) -> dict[str, torch.Tensor]:
    """Forward and backward of one head ([M, D], [D, N]) or of H heads in one launch ([H, M, D],
    [H, D, N]: a program per query block (forward) or key block (backward) and head)."""
    heads, (q, kt, vt, do) = _heads(q, kt, vt, do)
    k = _kernels(_checked(q, kt.shape[2]))
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    with numpy_quiet():
        out = _launch(k, q, kt, vt, do, o, lse, causal)
    return out if heads else {name: t[0] for name, t in out.items()}


def run_forward(q, kt, vt, *, causal: bool) -> dict[str, torch.Tensor]:
    """The forward kernel alone: O in BF16 and its LSE [M, 1] in FP32 (per head where given H)."""
    heads, (q, kt, vt) = _heads(q, kt, vt)
    k = _kernels(_checked(q, kt.shape[2]))
    h, m, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(h, m, dtype=torch.float32, device=q.device)
    with numpy_quiet():
        k.fwd[(triton.cdiv(m, BLOCK_M), h)](q, kt, vt, o, lse, m, kt.shape[2], 1 / math.sqrt(d), D=d,
                                            BLOCK_M_=BLOCK_M, BLOCK_N_=BLOCK_N, CAUSAL=causal)
    out = {"o": o, "lse": lse.unsqueeze(-1)}
    return out if heads else {name: t[0] for name, t in out.items()}


def numpy_quiet():
    """The interpreter's numpy divides 0 by 0 in the padded rows it never stores: no warnings."""
    import numpy
    return numpy.errstate(all="ignore")


def _launch(k, q, kt, vt, do, o, lse, causal):
    h, m, d = q.shape
    n = kt.shape[2]
    scale = 1 / math.sqrt(d)
    k.fwd[(triton.cdiv(m, BLOCK_M), h)](q, kt, vt, o, lse, m, n, scale, D=d, BLOCK_M_=BLOCK_M, BLOCK_N_=BLOCK_N,
                                        CAUSAL=causal)
    delta = (do.float() * o.float()).sum(-1)
    dq = torch.zeros(h, m, d, dtype=torch.float32, device=q.device)
    dkt, dvt = torch.empty_like(kt), torch.empty_like(vt)
    k.bwd[(triton.cdiv(n, BLOCK_N), h)](q, kt, vt, do, lse, delta, dq, dkt, dvt, m, n, scale, D=d,
                                        BLOCK_M_=BLOCK_M, BLOCK_N_=BLOCK_N, CAUSAL=causal)
    return {"o": o, "dq": dq.to(torch.bfloat16), "dkt": dkt, "dvt": dvt}
