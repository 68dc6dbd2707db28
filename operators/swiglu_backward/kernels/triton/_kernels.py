"""Triton sources of the three kernels (b, w, x) and the deterministic tile-order reduction.

Importing this module imports triton but compiles nothing. ``build(interpret)``
wraps the plain Python functions below either as compiled ``JITFunction``s (CUDA)
or as triton's CPU ``InterpretedFunction``s. The wrapper is chosen explicitly
instead of by ``triton.jit`` reading ``TRITON_INTERPRET`` at decoration time, so
one process can hold both and the env variable is only consulted by the backend
when it decides which to run (see ``backend.py``).

Numerics shared by every kernel: BF16 in memory, FP32 math, BF16 on store.

Two interpreter traps (triton 3.9.0, torch 2.13.0 CPU), both designed around here:

* ``tl.dot`` on BF16 operands returns garbage in the interpreter (max error 2.7e10
  on a 64x16 @ 16x32 product): the interpreter holds BF16 as raw ``uint16`` bit
  patterns and ``np.matmul`` multiplies those integers. FP32 operands are exact.
  ``DOT_FP32=True`` (forced in interpreter mode) casts the BF16 tiles to FP32
  before ``tl.dot`` with ``input_precision="ieee"``; that is also the article's
  semantics (``pypto.matmul(..., pypto.DT_FP32)``): BF16 x BF16 products are exact
  in FP32, so both paths are the same math, FP32 accumulation in a different order.
  On CUDA ``DOT_FP32=False`` feeds the BF16 tiles to the tensor cores with an
  FP32 accumulator.
* ``x.to(tl.bfloat16)`` / ``x.to(tl.float32)`` in the interpreter truncate instead
  of rounding to nearest even (32809 of 65536 random FP32 values came out 1 ulp
  low) and flush BF16 subnormals to zero (49450 of 65536 values ~1e-38 wrong).
  Every BF16 <-> FP32 conversion here therefore goes through the bit patterns
  (``_bf16_to_f32`` / ``_f32_to_bf16``): exact widening and round-to-nearest-even
  narrowing, bit-identical to torch's ``.to()`` on every finite value and
  infinity, on both the interpreter and CUDA (NaN stays NaN; its payload may
  differ). One conversion code path, so the CPU tests exercise the GPU's.

A third, about the mode: triton's standard library (``tl.sum``, ``tl.sigmoid``, ...)
is made of ``@triton.jit`` functions wrapped when triton is first imported, as
interpreted functions if ``TRITON_INTERPRET=1`` then, compiled ones otherwise. The
kernels below call only builtins (and ``tl.reduce`` with ``tl.standard._sum_combine``,
which the interpreter special-cases), so they run in either mode whatever the
variable was at import.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import triton
import triton.language as tl


# --- BF16 <-> FP32 through the bits (see the module docstring for why) -------------------------
#
# These are written inline in every kernel rather than as helper @jit functions:
# a helper would have to be wrapped in the same mode as its caller, which the
# explicit ``build(interpret)`` below cannot do for nested calls.
#
#   widen:  f32 = bitcast_f32(u32(bits16) << 16)                          exact
#   narrow: bits = bitcast_u32(f32); bits += 0x7FFF + ((bits >> 16) & 1); bits16 = bits >> 16
#           (round half to even; NaN forced to the quiet NaN 0x7FC0 so that a
#            payload in the low bits cannot round up into infinity)


def _b_kernel(dy_ptr, g_ptr, fc_ptr, dg_ptr, dfc_ptr, part_g_ptr, part_fc_ptr,
              M, N,
              TILE_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
              EXP_RATIO: tl.constexpr, ATOMIC: tl.constexpr, PART_BF16: tl.constexpr):
    """b kernel: one program per (1024-row tile of M, BLOCK_N columns).

    dg, dfc in FP32 in the article's operation order, stored as BF16; the tile's
    FP32 column sums of dg / dfc (before their BF16 store, as the article's
    ``pypto.sum(dg_fp32)``) go to the per-tile partial row ``part[tile, :]``
    (rounded to BF16 when PART_BF16: the article's ``cast(partial, BF16)``), or are
    atomically added into an FP32 ``part[0, :]`` when ATOMIC.
    """
    tile = tl.program_id(0)
    pid_n = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    row0 = tile * TILE_M
    valid_m = tl.minimum(TILE_M, M - row0)          # the tail tile has valid_m < TILE_M rows
    acc_g = tl.full([BLOCK_N], 0.0, tl.float32)
    acc_fc = tl.full([BLOCK_N], 0.0, tl.float32)
    for r in range(0, valid_m, BLOCK_R):
        rows = row0 + r + tl.arange(0, BLOCK_R)
        mask = (rows < row0 + valid_m)[:, None] & cmask[None, :]
        offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
        dy16 = tl.load(dy_ptr + offs, mask=mask, other=0)
        g16 = tl.load(g_ptr + offs, mask=mask, other=0)
        fc16 = tl.load(fc_ptr + offs, mask=mask, other=0)
        dy = (dy16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        g = (g16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        fc = (fc16.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        if EXP_RATIO:
            # the article's form: exp(g) / (1 + exp(g)); inf / inf = NaN for g > ~88.7
            e = tl.exp(g)
            s = tl.math.div_rn(e, 1.0 + e)
        else:
            # stable: 1 / (1 + exp(-g)); exp(-g) = inf for g < ~-88.7 gives s = 0, never NaN
            s = tl.math.div_rn(tl.full(g.shape, 1.0, tl.float32), 1.0 + tl.exp(-g))
        silu_bwd = s * (1.0 + g * (1.0 - s))
        dg = (dy * fc) * silu_bwd
        dfc = dy * (g * s)
        dg = tl.where(mask, dg, 0.0)
        dfc = tl.where(mask, dfc, 0.0)
        bits = dg.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        bits = tl.where(dg != dg, 0x7FC0, bits).to(tl.uint16)
        tl.store(dg_ptr + offs, bits.to(tl.bfloat16, bitcast=True), mask=mask)
        bits = dfc.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        bits = tl.where(dfc != dfc, 0x7FC0, bits).to(tl.uint16)
        tl.store(dfc_ptr + offs, bits.to(tl.bfloat16, bitcast=True), mask=mask)
        # tl.reduce with triton's own _sum_combine, not tl.sum: tl.sum is itself a
        # @triton.jit function, wrapped for the interpreter or not when triton is first
        # imported, so it fails inside a kernel wrapped the other way. The interpreter
        # recognises _sum_combine and sums with numpy; compiled, it is tl.sum's reduction.
        acc_g += tl.reduce(dg, 0, tl.standard._sum_combine)
        acc_fc += tl.reduce(dfc, 0, tl.standard._sum_combine)
    if ATOMIC:
        tl.atomic_add(part_g_ptr + cols, acc_g, mask=cmask)
        tl.atomic_add(part_fc_ptr + cols, acc_fc, mask=cmask)
    else:
        poffs = tile.to(tl.int64) * N + cols
        if PART_BF16:
            bits = acc_g.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            bits = tl.where(acc_g != acc_g, 0x7FC0, bits).to(tl.uint16)
            tl.store(part_g_ptr + poffs, bits.to(tl.bfloat16, bitcast=True), mask=cmask)
            bits = acc_fc.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            bits = tl.where(acc_fc != acc_fc, 0x7FC0, bits).to(tl.uint16)
            tl.store(part_fc_ptr + poffs, bits.to(tl.bfloat16, bitcast=True), mask=cmask)
        else:
            tl.store(part_g_ptr + poffs, acc_g, mask=cmask)
            tl.store(part_fc_ptr + poffs, acc_fc, mask=cmask)


def _w_kernel(x_ptr, d_ptr, part_ptr,
              M, K, N,
              TILE_M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
              DOT_FP32: tl.constexpr, ATOMIC: tl.constexpr, PART_BF16: tl.constexpr):
    """w kernel, one weight gradient (launched once for dg -> dw_g, once for dfc -> dw_fc):
    one program per (2048-row tile of M, BLOCK_K x BLOCK_N block of [K, N]).

    The tile's partial x[tile]^T @ d[tile] accumulates in FP32 over the tile's
    valid rows, then goes to ``part[tile]`` (BF16-rounded when PART_BF16) or is
    atomically added into an FP32 ``part[0]`` when ATOMIC.
    """
    tile = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_n = tl.program_id(2)
    rk = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    kmask = rk < K
    nmask = rn < N
    row0 = tile * TILE_M
    valid_m = tl.minimum(TILE_M, M - row0)
    acc = tl.full([BLOCK_K, BLOCK_N], 0.0, tl.float32)
    for r in range(0, valid_m, BLOCK_M):
        rows = row0 + r + tl.arange(0, BLOCK_M)
        rmask = rows < row0 + valid_m
        rows64 = rows.to(tl.int64)
        # x^T tile [BLOCK_K, BLOCK_M], loaded transposed; masked rows load 0 and add nothing
        xt = tl.load(x_ptr + rows64[None, :] * K + rk[:, None], mask=kmask[:, None] & rmask[None, :], other=0)
        d = tl.load(d_ptr + rows64[:, None] * N + rn[None, :], mask=rmask[:, None] & nmask[None, :], other=0)
        if DOT_FP32:
            xt = (xt.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
            d = (d.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
            acc = tl.dot(xt, d, acc, input_precision="ieee")
        else:
            acc = tl.dot(xt, d, acc)
    offs = rk.to(tl.int64)[:, None] * N + rn[None, :]
    omask = kmask[:, None] & nmask[None, :]
    if ATOMIC:
        tl.atomic_add(part_ptr + offs, acc, mask=omask)
    else:
        poffs = tile.to(tl.int64) * K * N + offs
        if PART_BF16:
            bits = acc.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            bits = tl.where(acc != acc, 0x7FC0, bits).to(tl.uint16)
            tl.store(part_ptr + poffs, bits.to(tl.bfloat16, bitcast=True), mask=omask)
        else:
            tl.store(part_ptr + poffs, acc, mask=omask)


def _x_kernel(dg_ptr, dfc_ptr, wg_ptr, wfc_ptr, dx_ptr,
              M, K, N,
              TILE_M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
              DOT_FP32: tl.constexpr):
    """x kernel: one program per (1024-row tile, BLOCK_M-row slice of it, BLOCK_K columns of dx).

    dx = dg @ w_g^T + dfc @ w_fc^T with the two products in separate FP32
    accumulators (the plan's ``dx_product`` point: no rounding between), summed
    in FP32 and rounded to BF16 once. No reduction crosses M tiles here, so the
    tile over M only organises the grid; it cannot change a bit of dx.
    """
    tile = tl.program_id(0)
    sub = tl.program_id(1)
    pid_k = tl.program_id(2)
    row0 = tile * TILE_M + sub * BLOCK_M
    rows = row0 + tl.arange(0, BLOCK_M)
    rmask = rows < M
    rk = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    kmask = rk < K
    rows64 = rows.to(tl.int64)
    acc_g = tl.full([BLOCK_M, BLOCK_K], 0.0, tl.float32)
    acc_fc = tl.full([BLOCK_M, BLOCK_K], 0.0, tl.float32)
    if row0 < M:
        for n0 in range(0, N, BLOCK_N):
            rn = n0 + tl.arange(0, BLOCK_N)
            nmask = rn < N
            amask = rmask[:, None] & nmask[None, :]
            wmask = nmask[:, None] & kmask[None, :]
            a_g = tl.load(dg_ptr + rows64[:, None] * N + rn[None, :], mask=amask, other=0)
            a_fc = tl.load(dfc_ptr + rows64[:, None] * N + rn[None, :], mask=amask, other=0)
            # w^T tile [BLOCK_N, BLOCK_K], loaded transposed from w [K, N]
            b_g = tl.load(wg_ptr + rk[None, :] * N + rn[:, None], mask=wmask, other=0)
            b_fc = tl.load(wfc_ptr + rk[None, :] * N + rn[:, None], mask=wmask, other=0)
            if DOT_FP32:
                a_g = (a_g.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
                a_fc = (a_fc.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
                b_g = (b_g.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
                b_fc = (b_fc.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
                acc_g = tl.dot(a_g, b_g, acc_g, input_precision="ieee")
                acc_fc = tl.dot(a_fc, b_fc, acc_fc, input_precision="ieee")
            else:
                acc_g = tl.dot(a_g, b_g, acc_g)
                acc_fc = tl.dot(a_fc, b_fc, acc_fc)
        dx = acc_g + acc_fc
        bits = dx.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        bits = tl.where(dx != dx, 0x7FC0, bits).to(tl.uint16)
        tl.store(dx_ptr + rows64[:, None] * K + rk[None, :], bits.to(tl.bfloat16, bitcast=True),
                 mask=rmask[:, None] & kmask[None, :])


def _tile_order_reduce(part_ptr, out_ptr, n_tiles, L,
                       BLOCK: tl.constexpr, ACC_BF16: tl.constexpr):
    """Deterministic second pass: out = sum over tiles of part[t], added in tile order
    t = 0, 1, ... like the article's ``out[:] = out + cast(partial)`` into a zeroed
    output. ACC_BF16: the running value is rounded to BF16 after every addition
    (the article's BF16 accumulator); else it stays FP32 and is rounded once."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < L
    acc = tl.full([BLOCK], 0.0, tl.float32)
    ptrs = part_ptr + offs          # 64-bit pointer steps: t * L can pass 2^31 (e.g. 108 tiles x 4096 x 16384)
    for t in range(0, n_tiles):
        p = tl.load(ptrs, mask=mask, other=0)
        ptrs += L
        if ACC_BF16:
            p = (p.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
            acc = acc + p
            bits = acc.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            bits = tl.where(acc != acc, 0x7FC0, bits).to(tl.uint16)
            acc = (bits.to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        else:
            acc = acc + p
    bits = acc.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    bits = tl.where(acc != acc, 0x7FC0, bits).to(tl.uint16)
    tl.store(out_ptr + offs, bits.to(tl.bfloat16, bitcast=True), mask=mask)


def _to_bf16(src_ptr, dst_ptr, L, BLOCK: tl.constexpr):
    """Round an FP32 buffer (the atomic accumulators) to BF16, nearest even."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < L
    v = tl.load(src_ptr + offs, mask=mask, other=0)
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    bits = tl.where(v != v, 0x7FC0, bits).to(tl.uint16)
    tl.store(dst_ptr + offs, bits.to(tl.bfloat16, bitcast=True), mask=mask)


_SOURCES = {"b": _b_kernel, "w": _w_kernel, "x": _x_kernel,
            "reduce": _tile_order_reduce, "to_bf16": _to_bf16}


@functools.cache
def build(interpret: bool) -> SimpleNamespace:
    """The kernels wrapped for CUDA (``interpret=False``) or for triton's CPU interpreter."""
    if interpret:
        from triton.runtime.interpreter import InterpretedFunction as wrap
    else:
        wrap = triton.JITFunction
    return SimpleNamespace(**{name: wrap(fn) for name, fn in _SOURCES.items()})
