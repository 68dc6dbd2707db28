"""The fused SwiGLU backward as Triton kernels: the article's three-kernel schedule on a GPU.

Callables (the contract of ``contract/backend.py``; each carries ``.schedule``):

* ``triton_deterministic`` (registry name ``triton``): per-tile partials of db / dw
  rounded to BF16 and added in tile order by a second pass -- the article's BF16
  accumulation, bit-identical from run to run. Stable sigmoid.
* ``triton_atomic`` (``triton-atomic``): FP32 atomics across tiles, one rounding to
  BF16; the FP32 order (and so possibly the last BF16 bit) varies run to run on a GPU.
  Stable sigmoid.
* ``triton_article`` (import path ``operators.swiglu_backward.kernels.triton.backend:triton_article``): the
  deterministic kernel with the article's ``exp(g)/(1+exp(g))`` sigmoid, so exactly
  the article's schedule (``operators.swiglu_backward.schedule.ARTICLE``), NaN for g > ~88.7.

Where the kernels run:

* inputs on CUDA: compiled kernels (tensor-core BF16 ``tl.dot``, FP32 accumulators);
* inputs on CPU with ``TRITON_INTERPRET=1`` in the environment at call time: triton's
  interpreter (FP32 ``tl.dot``: the interpreter's BF16 dot is garbage, see
  ``_kernels.py``), for cases up to ``INTERPRETER_MAX_MKN`` (M*K*N) -- larger ones raise
  ``BackendUnsupported`` with the estimate;
* otherwise (CPU without the variable, triton not installed, another device):
  ``BackendUnsupported`` with the reason, which the case matrix records as a skip.

Unlike a bare ``@triton.jit`` kernel, the mode is not frozen when triton is first
imported: the kernels are wrapped explicitly per mode (``_kernels.build``), so
setting ``TRITON_INTERPRET`` with ``monkeypatch.setenv`` for one test is enough
and nothing leaks into other tests of the same worker.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from operators.swiglu_backward.schedule import TiledSchedule
from contract.backend import BackendUnsupported, validate_inputs
from operators.swiglu_backward import OPERATOR
from operators.swiglu_backward.kernels.triton.schedule import TRITON, TRITON_ARTICLE, TRITON_ATOMIC

# The interpreter runs each program in numpy (matmuls in BLAS). Measured here (2 cores,
# deterministic variant): M,K,N = 2049,96,200 in 0.7 s; 1025,512,1024 in 3.9 s;
# 4097,512,1024 in 7.8 s (2.7e8 M*K*N a second). 2^32 (4.3e9) admits every tile-edge
# case of the matrix up to M=8192 at K,N = 512,1024 (<~20 s each) and refuses the seed
# case (M=220000: 1.2e11, ~7 minutes). Override with SWIGLU_TRITON_INTERPRET_MAX_MKN.
INTERPRETER_MAX_MKN = 1 << 32


@dataclass(frozen=True)
class Blocks:
    """Block sizes (powers of two) inside the article's tiles. They fix the FP32
    summation order inside a tile (so they are constants, never autotuned: an
    autotuner could pick a different order per run), not the schedule."""
    b_rows: int          # b kernel: rows per step through its 1024-row tile
    b_cols: int
    w_rows: int          # w kernel: rows per tl.dot step through its 2048-row tile
    w_k: int
    w_n: int
    x_rows: int          # x kernel: rows per program (divides tile_m_x)
    x_k: int
    x_n: int             # reduction step over N
    reduce: int          # elements per program of the tile-order reduction
    warps_b: int = 4
    warps_w: int = 8
    warps_x: int = 8
    stages: int = 3


# CUDA, sized for H100/H200 with the compile check in benchmarks/h200/compile_check.py
# (ptxas for sm_90, K and N divisible by 16): b 135 registers, w 114, x 193, no spills.
# With K or N not a multiple of 16 (the odd 96 x 200 pair) the loads lose their vector
# width and the x kernel spills: correct, slower.
CUDA_BLOCKS = Blocks(b_rows=16, b_cols=256, w_rows=64, w_k=128, w_n=128,
                     x_rows=128, x_k=128, x_n=64, reduce=1024, warps_b=8, warps_w=8, warps_x=8)
# Interpreter: every tl op is one numpy call per program, so fewer, larger blocks are faster.
INTERPRETER_BLOCKS = Blocks(b_rows=256, b_cols=256, w_rows=256, w_k=128, w_n=256,
                            x_rows=256, x_k=128, x_n=256, reduce=4096)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _interpreter_limit() -> int:
    return int(os.environ.get("SWIGLU_TRITON_INTERPRET_MAX_MKN", INTERPRETER_MAX_MKN))


def _mode(device: torch.device, m: int, k: int, n: int) -> bool:
    """True: run in the interpreter; False: compiled on CUDA. Raises BackendUnsupported."""
    interpret = os.environ.get("TRITON_INTERPRET", "0") == "1"
    if device.type == "cuda" and not interpret:
        if not torch.cuda.is_available():
            raise BackendUnsupported("triton: inputs claim a CUDA device but torch.cuda is not available")
    elif device.type == "cpu" and not interpret:
        raise BackendUnsupported(
            "triton: inputs are on CPU and TRITON_INTERPRET=1 is not set (set it to run triton's "
            "CPU interpreter, or move the inputs to a CUDA device)")
    elif device.type not in ("cpu", "cuda"):
        raise BackendUnsupported(f"triton: no triton path for inputs on {device.type}")
    if interpret and m * k * n > _interpreter_limit():
        raise BackendUnsupported(
            f"triton: M*K*N = {m * k * n:.3g} is above the interpreter's limit {_interpreter_limit():.3g} "
            f"(about {m * k * n / 2.7e8:.0f} s in the interpreter); run it on a CUDA device")
    try:
        import triton
    except ImportError as exc:
        raise BackendUnsupported(f"triton is not installed ({exc}); pip install '.[triton]'") from exc
    if interpret and interpreter_too_old(triton.__version__):
        raise BackendUnsupported(
            f"triton {triton.__version__}'s interpreter cannot run these kernels (a runtime loop bound "
            f"fails with numpy 2: 'only 0-dimensional arrays can be converted to Python scalars'); "
            f"use triton >= {'.'.join(map(str, MIN_INTERPRETER_TRITON))} (pinned: 3.9.0)")
    return interpret


# Seen with triton 3.6.0 (the H200 image's) and numpy 2.x: the interpreter passes a loop
# bound as a 1-element array and Python's range() rejects it. 3.9.0 runs them.
MIN_INTERPRETER_TRITON = (3, 9)


def interpreter_too_old(version: str) -> bool:
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) < MIN_INTERPRETER_TRITON


def run(inputs: dict, schedule: TiledSchedule, *, atomic: bool, blocks: Blocks | None = None) -> dict:
    """Run the three kernels under ``schedule`` (tile sizes, accumulator dtypes, sigmoid form)."""
    m, k, n = validate_inputs(OPERATOR, inputs, allow_nonfinite=True)
    device = inputs["x"].device
    interpret = _mode(device, m, k, n)
    from operators.swiglu_backward.kernels.triton._kernels import build
    kern = build(interpret)
    blocks = blocks or (INTERPRETER_BLOCKS if interpret else CUDA_BLOCKS)
    if schedule.plan.math != torch.float32:
        raise ValueError(f"the triton kernels compute in FP32; schedule {schedule.name!r} asks for {schedule.plan.math}")
    for kernel, rows in (("b", blocks.b_rows), ("w", blocks.w_rows), ("x", blocks.x_rows)):
        tile = schedule.tile_m(kernel)
        if tile is None or tile % rows:
            raise ValueError(f"{kernel} kernel: tile_m {tile} must be a multiple of the block's {rows} rows")
    for acc in (schedule.db_accumulator, schedule.dw_accumulator):
        if acc not in (torch.bfloat16, torch.float32):
            raise ValueError(f"accumulator dtype {acc} not supported (bfloat16 or float32)")
    if atomic and (schedule.db_accumulator, schedule.dw_accumulator) != (torch.float32, torch.float32):
        raise ValueError("atomic accumulation is FP32: declare FP32 db/dw accumulators in the schedule")

    x, w_g, w_fc, dy, g, fc = (inputs[name].contiguous() for name in ("x", "w_g", "w_fc", "dy", "g", "fc"))
    bf16, f32 = torch.bfloat16, torch.float32
    exp_ratio = schedule.plan.sigmoid == "exp_ratio"
    # fp fusion off for the elementwise b kernel: no FMA contraction, so dg/dfc follow the
    # article's (and the golden's) operation order rounding by rounding; the matmul kernels
    # accumulate in their own order anyway.
    # (and off everywhere else, explicitly: triton 3.9 warns that its default will change).
    cuda_b = {} if interpret else {"num_warps": blocks.warps_b, "enable_fp_fusion": False}
    cuda_w = {} if interpret else {"num_warps": blocks.warps_w, "num_stages": blocks.stages, "enable_fp_fusion": False}
    cuda_x = {} if interpret else {"num_warps": blocks.warps_x, "num_stages": blocks.stages, "enable_fp_fusion": False}
    cuda_r = {} if interpret else {"enable_fp_fusion": False}
    dot_fp32 = interpret  # the interpreter's BF16 tl.dot is garbage; FP32 operands are exact

    # --- b kernel -------------------------------------------------------------------------
    tile_b = schedule.tile_m_b
    tiles_b = _cdiv(m, tile_b)
    dg = torch.empty((m, n), dtype=bf16, device=device)
    dfc = torch.empty((m, n), dtype=bf16, device=device)
    db_part_bf16 = schedule.db_accumulator == bf16
    if atomic:
        part_g = torch.zeros((1, n), dtype=f32, device=device)
        part_fc = torch.zeros((1, n), dtype=f32, device=device)
    else:
        pdt = bf16 if db_part_bf16 else f32
        part_g = torch.empty((tiles_b, n), dtype=pdt, device=device)
        part_fc = torch.empty((tiles_b, n), dtype=pdt, device=device)
    kern.b[(tiles_b, _cdiv(n, blocks.b_cols))](
        dy, g, fc, dg, dfc, part_g, part_fc, m, n,
        TILE_M=tile_b, BLOCK_R=blocks.b_rows, BLOCK_N=blocks.b_cols,
        EXP_RATIO=exp_ratio, ATOMIC=atomic, PART_BF16=db_part_bf16, **cuda_b)
    db_g = torch.empty((1, n), dtype=bf16, device=device)
    db_fc = torch.empty((1, n), dtype=bf16, device=device)
    _combine(kern, blocks, part_g, db_g, tiles_b, n, atomic, db_part_bf16, cuda_r)
    _combine(kern, blocks, part_fc, db_fc, tiles_b, n, atomic, db_part_bf16, cuda_r)

    # --- w kernel -------------------------------------------------------------------------
    tile_w = schedule.tile_m_w
    tiles_w = _cdiv(m, tile_w)
    dw_part_bf16 = schedule.dw_accumulator == bf16
    outs = {}
    for name, d in (("dw_g", dg), ("dw_fc", dfc)):
        if atomic:
            part = torch.zeros((1, k, n), dtype=f32, device=device)
        else:
            part = torch.empty((tiles_w, k, n), dtype=bf16 if dw_part_bf16 else f32, device=device)
        kern.w[(tiles_w, _cdiv(k, blocks.w_k), _cdiv(n, blocks.w_n))](
            x, d, part, m, k, n,
            TILE_M=tile_w, BLOCK_M=blocks.w_rows, BLOCK_K=blocks.w_k, BLOCK_N=blocks.w_n,
            DOT_FP32=dot_fp32, ATOMIC=atomic, PART_BF16=dw_part_bf16, **cuda_w)
        out = torch.empty((k, n), dtype=bf16, device=device)
        _combine(kern, blocks, part, out, tiles_w, k * n, atomic, dw_part_bf16, cuda_r)
        outs[name] = out
        del part

    # --- x kernel -------------------------------------------------------------------------
    tile_x = schedule.tile_m_x
    dx = torch.empty((m, k), dtype=bf16, device=device)
    kern.x[(_cdiv(m, tile_x), tile_x // blocks.x_rows, _cdiv(k, blocks.x_k))](
        dg, dfc, w_g, w_fc, dx, m, k, n,
        TILE_M=tile_x, BLOCK_M=blocks.x_rows, BLOCK_K=blocks.x_k, BLOCK_N=blocks.x_n,
        DOT_FP32=dot_fp32, **cuda_x)

    return {"dg": dg, "dfc": dfc, "db_g": db_g, "db_fc": db_fc,
            "dw_g": outs["dw_g"], "dw_fc": outs["dw_fc"], "dx": dx}


def _combine(kern, blocks: Blocks, part: torch.Tensor, out: torch.Tensor, n_tiles: int, length: int,
             atomic: bool, acc_bf16: bool, opts: dict) -> None:
    """Partials -> BF16 output: round the atomic FP32 sum once, or add the tiles in order."""
    grid = (_cdiv(length, blocks.reduce),)
    if atomic:
        kern.to_bf16[grid](part, out, length, BLOCK=blocks.reduce, **opts)
    else:
        kern.reduce[grid](part, out, n_tiles, length, BLOCK=blocks.reduce, ACC_BF16=acc_bf16, **opts)


def _backend(name: str, schedule: TiledSchedule, atomic: bool):
    def backend(*, x, w_g, w_fc, dy, g, fc):
        return run({"x": x, "w_g": w_g, "w_fc": w_fc, "dy": dy, "g": g, "fc": fc}, schedule, atomic=atomic)
    backend.__name__ = backend.__qualname__ = name
    backend.__doc__ = f"Triton fused SwiGLU backward, schedule {schedule.name!r} ({'atomic' if atomic else 'tile-order'} cross-tile sums)."
    backend.schedule = schedule
    backend.atomic = atomic
    return backend


triton_deterministic = _backend("triton_deterministic", TRITON, atomic=False)
triton_atomic = _backend("triton_atomic", TRITON_ATOMIC, atomic=True)
triton_article = _backend("triton_article", TRITON_ARTICLE, atomic=False)
