"""Platform facts a verdict can depend on, measured at the start of a run.

A known failure of a library's BF16 numerics holds on some machines and not on
others: oneDNN's BF16 GEMM on a CPU with BF16 instructions (avx512_bf16, AMX)
uses ``vdpbf16ps``/``tdpbf16ps``, which treat subnormal operands as zero and
flush subnormal products, while on a CPU without them (AVX2, plain AVX-512) it
converts to FP32 and keeps them (findings 9: torch-eager's dw error at the tiny
profile is 0.56 x rms on the first kind, 6.5e-7 x rms on the second). The CPU's
flags say which instructions exist, not which kernel oneDNN picks (it picks by
shape, and ``ONEDNN_MAX_CPU_ISA`` can lower it), so each fact is measured with
the operation and the shapes the matrix itself runs, and expectations condition
on the measured value, never on a machine name or a flag.

Every fact is a bool, or the string ``"shape-dependent"`` when the shapes
disagree; an expectation conditioned on ``true`` or ``false`` then applies to
neither, so such a machine shows its failures instead of hiding them.
Each probe takes a few milliseconds (0.6 s for all on 2 cores).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

SHAPE_DEPENDENT = "shape-dependent"

# (M, K, N) of the matrix's tiny-profile cases whose torch results depend on the
# GEMM's subnormal handling: M2048-K96-N200 and M1025-K512-N1024.
PROBE_SHAPES = ((2048, 96, 200), (1025, 512, 1024))

# A GEMM that keeps subnormals errs by at most a BF16 rounding of each result
# (2^-9 relative, below 0.01 x rms once results near zero, where BF16 is itself
# subnormal, are counted); one that flushes its operands loses the whole product
# (error ~ 1 x rms). 0.1 x rms sits an order of magnitude from both.
FLUSH_ERROR_RMS = 0.1


def _generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed)


def _subnormal_bf16(m: int, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A BF16 [m, n] tensor of subnormals (biased exponent 0: value = mantissa x 2^-133),
    built from its bits, and its mantissas as exact integers: the reference products are
    computed from the integers and scaled in FP64, so the reference is exact even in a
    process that flushes subnormals (``torch.set_flush_denormal(True)``)."""
    mantissa = torch.randint(1, 128, (m, n), generator=gen, dtype=torch.int16)
    negative = torch.rand(m, n, generator=gen) < 0.5
    bits = torch.where(negative, mantissa | torch.tensor(-0x8000, dtype=torch.int16), mantissa)
    signed = torch.where(negative, -mantissa, mantissa)
    return bits.view(torch.bfloat16), signed.double()


def _bf16_in_units(t: torch.Tensor) -> torch.Tensor:
    """BF16 values in FP64 units of 2^-133, decoded from their bits (a plain conversion
    would itself flush subnormals in a flushing process)."""
    bits = t.view(torch.int16).to(torch.int64) & 0xFFFF
    exponent, fraction = (bits >> 7) & 0xFF, bits & 0x7F
    magnitude = torch.where(exponent == 0, fraction.double(),
                            (fraction + 128).double() * torch.pow(2.0, (exponent - 1).double()))
    return torch.where(bits >= 0x8000, -magnitude, magnitude)


def _gemm_error_rms(m: int, k: int, n: int, device: str) -> float:
    """Max |torch BF16 GEMM - exact| / rms(exact) over autograd's two layouts of a backward pass,
    ``a.t() @ b`` (a weight gradient) and ``b @ w.t()`` (an input gradient), with b entirely
    subnormal (SwiGLU's dw = x^T dg and dx = dg w^T)."""
    gen = _generator(m * 1_000_003 + k * 1009 + n)
    x = torch.randn(m, k, generator=gen).bfloat16()
    w = torch.randn(k, n, generator=gen).bfloat16()
    b, b_mantissa = _subnormal_bf16(m, n, gen)
    scale = 2.0 ** -133
    worst = 0.0
    for got_fn, exact in (
            (lambda: x.t().to(device) @ b.to(device), (x.t().double() @ b_mantissa) * scale),
            (lambda: b.to(device) @ w.t().to(device), (b_mantissa @ w.t().double()) * scale)):
        got_units = _bf16_in_units(got_fn().cpu())
        exact_units = exact / scale
        rms = float(exact_units.pow(2).mean().sqrt())
        worst = max(worst, float((got_units - exact_units).abs().max()) / rms)
    return worst


def bf16_gemm_keeps_subnormals(device: str = "cpu") -> bool | str:
    """Does torch's BF16 matmul on ``device`` keep subnormal operands and products?"""
    kept = {_gemm_error_rms(m, k, n, device) < FLUSH_ERROR_RMS for m, k, n in PROBE_SHAPES}
    return kept.pop() if len(kept) == 1 else SHAPE_DEPENDENT


# (M, N) of bias + GELU backward's tiny-profile cases in its quick matrix, and one row
GELU_PROBE_SHAPES = ((1025, 200), (1025, 1024), (1, 200))


def _gelu_flushed_share(m: int, n: int, device: str) -> float:
    """Of the BF16 GELU gradients that are subnormal and nonzero in exact arithmetic on the same
    BF16 values, the share torch's BF16 autograd returns as zero (dy near 2^-124, the tiny
    profile's): oneDNN's BF16 element-wise kernels, which torch uses on a CPU with BF16
    instructions, flush subnormal results (measured 1.0 at every shape on a Xeon with avx512_bf16
    and AMX; 0 with oneDNN disabled). The reference is GELU'(h) in FP32 (normal values) times dy
    in units of 2^-133 (``_bf16_in_units``), so it stays exact in a flushing process."""
    gen = _generator(m * 1_000_003 + n)
    h = torch.randn(m, n, generator=gen).bfloat16()
    dy = (torch.randn(m, n, generator=gen) * 2.0 ** -124).bfloat16()
    h_grad = h.to(device).requires_grad_(True)
    got, = torch.autograd.grad(torch.nn.functional.gelu(h_grad), h_grad, dy.to(device))
    h32 = h.float().requires_grad_(True)
    slope, = torch.autograd.grad(torch.nn.functional.gelu(h32), h32, torch.ones_like(h32))
    want = slope.double() * _bf16_in_units(dy)
    # rounds to a nonzero subnormal: at least half the smallest spacing, below 2^-126 (2^7 units)
    subnormal = (want.abs() >= 0.5) & (want.abs() < 2.0 ** 7)
    return float(((_bf16_in_units(got.cpu()) == 0) & subnormal).sum()) / max(int(subnormal.sum()), 1)


def bf16_gelu_keeps_subnormals(device: str = "cpu") -> bool | str:
    """Does torch's BF16 GELU backward on ``device`` keep subnormal results? Most of them flushed
    (a share above 1/2) is a flushing kernel; a kernel that keeps them zeroes only what rounds to
    zero in FP32 too (none: the probe counts elements FP32 keeps)."""
    kept = {_gelu_flushed_share(m, n, device) < 0.5 for m, n in GELU_PROBE_SHAPES}
    return kept.pop() if len(kept) == 1 else SHAPE_DEPENDENT


def fp32_keeps_subnormals(device: str = "cpu") -> bool:
    """Does FP32 arithmetic on ``device`` keep subnormals (no flush-to-zero / denormals-are-zero),
    on the calling thread and on torch's worker threads alike? ``torch.set_flush_denormal(True)``
    sets FTZ/DAZ on the calling thread, and worker threads created while it is set inherit it
    and keep it after it is unset (measured: a pool started under it flushes for the rest of the
    process), so both a scalar and a parallel op (2^18 elements, above torch's grain of 2^15) are probed."""
    scalar = torch.tensor([2.0 ** -140], dtype=torch.float32, device=device)
    parallel = torch.full((1 << 18,), 2.0 ** -140, dtype=torch.float32, device=device)
    return bool((scalar * 1.5).item() != 0.0) and bool(((parallel * 1.5) != 0).all())


@contextlib.contextmanager
def flushing_subnormals() -> Iterator[None]:
    """FTZ+DAZ on the calling thread alone, torch single-threaded inside: the semantics of a
    BF16-ISA dot product, for emulation and tests. Worker threads are started first, outside the
    region, since threads started under FTZ/DAZ would keep it after it is unset."""
    torch.ones(1 << 20).sum()          # start torch's worker threads with a clean FP environment
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    if not torch.set_flush_denormal(True):
        torch.set_num_threads(threads)
        raise RuntimeError("this CPU cannot set flush-to-zero / denormals-are-zero (torch.set_flush_denormal)")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(threads)


FACTS: dict[str, Callable[[str], bool | str]] = {
    "bf16_gemm_keeps_subnormals": bf16_gemm_keeps_subnormals,
    "fp32_keeps_subnormals": fp32_keeps_subnormals,
    "bf16_gelu_keeps_subnormals": bf16_gelu_keeps_subnormals,
}
# The values each fact can take, so a test can feed the expectation logic every one.
FACT_VALUES: dict[str, tuple] = {
    "bf16_gemm_keeps_subnormals": (True, False, SHAPE_DEPENDENT),
    "fp32_keeps_subnormals": (True, False),
    "bf16_gelu_keeps_subnormals": (True, False, SHAPE_DEPENDENT),
}


def measure(device: str = "cpu") -> dict[str, bool | str]:
    """Every fact on ``device``, in a fixed order."""
    return {name: probe(device) for name, probe in FACTS.items()}
