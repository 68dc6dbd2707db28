"""The fused SwiGLU backward as three ``@pypto.frontend.jit`` kernels (b, w, x).

Written from the PyPTO-Gym article (``shared/seed/000_a4f6d6d51265b160.txt``):

* dynamic M (``pypto.DYNAMIC``), a ``pypto.loop`` over ``ceil(M / tile_m)`` tiles, the
  tail tile a ``pypto.view(..., valid_shape=[valid_m, n])``; tile_m per kernel from
  ``operators/swiglu_backward/kernels/pypto/schedule.py`` (the single source of truth: 1024 / 2048 / 1024);
* every input tile cast to FP32 first, all math in FP32, a cast back to BF16 only on store;
* sigmoid as ``exp(g) / (1 + exp(g))`` (article variant) -- NaN once exp(g) overflows FP32,
  i.e. g > ~88.7;
* db: per-tile ``pypto.sum(dim=0, keepdim=True)`` of the FP32 dg / dfc, accumulated across
  tiles into the zeroed output: ``db_g[:] = db_g + cast(partial, BF16)``;
* dw = x^T dg (``a_trans=True``), dx = dg w_g^T + dfc w_fc^T (``b_trans=True``), FP32
  accumulation (``out_dtype=DT_FP32``), per-tile dw accumulated in place into the zeroed
  BF16 output;
* the article's cube tiles, vec tiles (x kernel: 128x256 on DAV_3510, else 128x128),
  ``pass_options`` and ``runtime_options``.

The article also declares the sigmoid with ``precision_type=pypto.PrecisionType.INTRINSIC``
(hardware approximate exp/div). PyPTO 0.2.0 (the newest release on PyPI) has neither
``pypto.PrecisionType`` nor a ``precision_type=`` argument, so the kernels below use the
default precision. On hardware with a newer PyPTO that option would change the last bits
of exp/div (and so of dg, dfc); the interpreter models neither.

The *hardened* variant (``schedule.HARDENED``) differs only where the article's kernel
loses accuracy: a stable sigmoid ``1 / (1 + exp(-g))`` (exp(-g) -> inf gives 0, never
inf/inf), and FP32 accumulators for db and dw (extra FP32 workspace arguments, zeroed by
the caller) rounded to BF16 once, after the last tile.

Importing this module imports pypto (through ``interpreter.import_pypto``, which keeps
PyPTO's import-time log folder out of the home directory).
"""
# No `from __future__ import annotations`: pypto.frontend.jit reads the annotations as objects.
import torch

from operators.swiglu_backward.schedule import TiledSchedule
from operators.swiglu_backward.kernels.pypto.interpreter import import_pypto

pypto = import_pypto()

BF16 = pypto.DT_BF16
FP32 = pypto.DT_FP32
DYN = pypto.DYNAMIC

# The article's compile/runtime options, per kernel.
PASS_OPTIONS = {
    "b": {"pg_upper_bound": 5000000, "vec_nbuffer_setting": {-1: 2, 0: 4}},
    "w": {"pg_upper_bound": 5000000, "vec_nbuffer_setting": {-1: 2, 0: 8}, "cube_l1_reuse_setting": {-1: 2}},
    "x": {"pg_upper_bound": 5000000, "vec_nbuffer_setting": {-1: 2, 0: 4}, "cube_l1_reuse_setting": {-1: 2}},
}
# Cube tiles (M, K, N semantics of set_cube_tile_shapes) and vec tiles, per kernel.
CUBE_TILES = {
    "w": ([128, 128], [128, 256], [128, 256]),
    "x": ([128, 128], [64, 256], [256, 256]),
}
VEC_TILE = (128, 128)
VEC_TILE_X_DAV_3510 = (128, 256)


def runtime_options(run_mode) -> dict:
    return {"run_mode": run_mode, "stitch_function_max_num": 128, "device_sched_mode": 3}


def x_vec_tile(npuarch=None):
    """The article's architecture branch for the x kernel's vec tile."""
    arch = pypto.platform.npuarch if npuarch is None else npuarch
    return VEC_TILE_X_DAV_3510 if arch == "DAV_3510" else VEC_TILE


def _check_schedule(schedule: TiledSchedule) -> str:
    plan = schedule.plan
    tiles = (schedule.tile_m_b, schedule.tile_m_w, schedule.tile_m_x)
    if any(t is None for t in tiles):
        raise ValueError(f"the PyPTO kernels loop over M in tiles; schedule has tile_m (b, w, x) = {tiles}")
    if plan.math != torch.float32:
        raise ValueError(f"the PyPTO kernels compute in FP32; schedule asks for {plan.math}")
    acc = {schedule.db_accumulator, schedule.dw_accumulator}
    if acc == {torch.bfloat16} and plan.sigmoid == "exp_ratio":
        return "article"
    if acc == {torch.float32} and plan.sigmoid == "stable":
        return "hardened"
    raise ValueError("the PyPTO kernels implement two schedules: BF16 accumulators + exp_ratio sigmoid "
                     "(ARTICLE) and FP32 accumulators + stable sigmoid (HARDENED); got "
                     f"db={schedule.db_accumulator}, dw={schedule.dw_accumulator}, sigmoid={plan.sigmoid}")


_BUILT: dict = {}


def build(k: int, n: int, schedule: TiledSchedule, run_mode: int, npuarch=None, widen_matmul_inputs: bool = True):
    """The three jit kernels for static K, N (M stays dynamic), one schedule and run mode.

    Returns ``(variant, b_kernel, w_kernel, x_kernel)`` where variant is "article" or
    "hardened". Hardened kernels take extra FP32 accumulator arguments (see backend.py).
    """
    variant = _check_schedule(schedule)
    key = (k, n, variant, schedule.tile_m_b, schedule.tile_m_w, schedule.tile_m_x, int(run_mode), npuarch,
           bool(widen_matmul_inputs))
    if key not in _BUILT:
        _BUILT[key] = _build(k, n, schedule, variant, int(run_mode), npuarch, bool(widen_matmul_inputs))
    return _BUILT[key]


def _widen(t):
    return pypto.cast(t, FP32)


def _as_is(t):
    return t


def _build(k, n, schedule, variant, run_mode, npuarch, widen_matmul_inputs):
    tile_b, tile_w, tile_x = schedule.tile_m_b, schedule.tile_m_w, schedule.tile_m_x
    vec_x = x_vec_tile(npuarch)
    rt = runtime_options(run_mode)
    cube_w, cube_x = CUBE_TILES["w"], CUBE_TILES["x"]
    vec = VEC_TILE
    # The article widens the BF16 tiles to FP32 before pypto.matmul(..., DT_FP32). BF16 -> FP32
    # is exact, and both the interpreter and the cube multiply BF16 operands exactly into FP32
    # accumulators, so feeding the BF16 tiles directly is the same arithmetic; on the CPU
    # interpreter it skips two full-tile casts per matmul (tests/pypto checks bit equality).
    mm_in = _widen if widen_matmul_inputs else _as_is

    if variant == "article":

        @pypto.frontend.jit(pass_options=PASS_OPTIONS["b"], runtime_options=rt)
        def fused_swiglu_bwd_b_kernel(
            dy: pypto.Tensor([DYN, n], BF16),
            g: pypto.Tensor([DYN, n], BF16),
            fc: pypto.Tensor([DYN, n], BF16),
            dg: pypto.Tensor([DYN, n], BF16),
            dfc: pypto.Tensor([DYN, n], BF16),
            db_g: pypto.Tensor([1, n], BF16),
            db_fc: pypto.Tensor([1, n], BF16),
        ):
            pypto.set_vec_tile_shapes(vec[0], vec[1])
            m = dy.shape[0]
            loop_count = (m + tile_b - 1) // tile_b
            for idx in pypto.loop(loop_count, name="LOOP_BWD_DG", idx_name="idx"):
                tile_offset = idx * tile_b
                valid_m = (m - tile_offset).min(tile_b)
                dy_tile = pypto.view(dy, [tile_b, n], [tile_offset, 0], valid_shape=[valid_m, n])
                g_tile = pypto.view(g, [tile_b, n], [tile_offset, 0], valid_shape=[valid_m, n])
                fc_tile = pypto.view(fc, [tile_b, n], [tile_offset, 0], valid_shape=[valid_m, n])
                dy_fp32 = pypto.cast(dy_tile, FP32)
                g_fp32 = pypto.cast(g_tile, FP32)
                fc_fp32 = pypto.cast(fc_tile, FP32)
                # sigmoid as the article writes it (precision_type=INTRINSIC: not in pypto 0.2.0)
                exp_g = pypto.exp(g_fp32)
                sigmoid_g = pypto.div(exp_g, pypto.add(exp_g, 1.0))
                # silu'(g) = s * (1 + g * (1 - s)); silu(g) = g * s
                one_minus_s = 1.0 - sigmoid_g
                silu_bwd = pypto.mul(sigmoid_g, pypto.add(pypto.mul(g_fp32, one_minus_s), 1.0))
                silu_g = pypto.mul(g_fp32, sigmoid_g)
                dy_mul_fc = pypto.mul(dy_fp32, fc_fp32)
                dg_fp32 = pypto.mul(dy_mul_fc, silu_bwd)
                dfc_fp32 = pypto.mul(dy_fp32, silu_g)
                pypto.assemble(pypto.cast(dg_fp32, BF16), [tile_offset, 0], dg)
                pypto.assemble(pypto.cast(dfc_fp32, BF16), [tile_offset, 0], dfc)
                dg_sum = pypto.sum(dg_fp32, dim=0, keepdim=True)
                dfc_sum = pypto.sum(dfc_fp32, dim=0, keepdim=True)
                db_g[:] = db_g + pypto.cast(dg_sum, BF16)
                db_fc[:] = db_fc + pypto.cast(dfc_sum, BF16)

        @pypto.frontend.jit(pass_options=PASS_OPTIONS["w"], runtime_options=rt)
        def fused_swiglu_bwd_w_kernel(
            x: pypto.Tensor([DYN, k], BF16),
            dg: pypto.Tensor([DYN, n], BF16),
            dfc: pypto.Tensor([DYN, n], BF16),
            dw_g: pypto.Tensor([k, n], BF16),
            dw_fc: pypto.Tensor([k, n], BF16),
        ):
            pypto.set_vec_tile_shapes(vec[0], vec[1])
            pypto.set_cube_tile_shapes(cube_w[0], cube_w[1], cube_w[2])
            m = x.shape[0]
            loop_count = (m + tile_w - 1) // tile_w
            for idx in pypto.loop(loop_count, name="LOOP_BWD_DW", idx_name="idx"):
                tile_offset = idx * tile_w
                valid_m = (m - tile_offset).min(tile_w)
                x_tile = pypto.view(x, [tile_w, k], [tile_offset, 0], valid_shape=[valid_m, k])
                dg_tile = pypto.view(dg, [tile_w, n], [tile_offset, 0], valid_shape=[valid_m, n])
                dfc_tile = pypto.view(dfc, [tile_w, n], [tile_offset, 0], valid_shape=[valid_m, n])
                x_mm = mm_in(x_tile)
                dg_mm = mm_in(dg_tile)
                dfc_mm = mm_in(dfc_tile)
                dw_g_part = pypto.matmul(x_mm, dg_mm, FP32, a_trans=True, b_trans=False)
                dw_fc_part = pypto.matmul(x_mm, dfc_mm, FP32, a_trans=True, b_trans=False)
                dw_g[:] = dw_g + pypto.cast(dw_g_part, BF16)
                dw_fc[:] = dw_fc + pypto.cast(dw_fc_part, BF16)

    else:  # hardened

        @pypto.frontend.jit(pass_options=PASS_OPTIONS["b"], runtime_options=rt)
        def fused_swiglu_bwd_b_kernel(
            dy: pypto.Tensor([DYN, n], BF16),
            g: pypto.Tensor([DYN, n], BF16),
            fc: pypto.Tensor([DYN, n], BF16),
            dg: pypto.Tensor([DYN, n], BF16),
            dfc: pypto.Tensor([DYN, n], BF16),
            db_g: pypto.Tensor([1, n], BF16),
            db_fc: pypto.Tensor([1, n], BF16),
            db_g_acc: pypto.Tensor([1, n], FP32),
            db_fc_acc: pypto.Tensor([1, n], FP32),
        ):
            pypto.set_vec_tile_shapes(vec[0], vec[1])
            m = dy.shape[0]
            loop_count = (m + tile_b - 1) // tile_b
            for idx in pypto.loop(loop_count, name="LOOP_BWD_DG", idx_name="idx"):
                tile_offset = idx * tile_b
                valid_m = (m - tile_offset).min(tile_b)
                dy_tile = pypto.view(dy, [tile_b, n], [tile_offset, 0], valid_shape=[valid_m, n])
                g_tile = pypto.view(g, [tile_b, n], [tile_offset, 0], valid_shape=[valid_m, n])
                fc_tile = pypto.view(fc, [tile_b, n], [tile_offset, 0], valid_shape=[valid_m, n])
                dy_fp32 = pypto.cast(dy_tile, FP32)
                g_fp32 = pypto.cast(g_tile, FP32)
                fc_fp32 = pypto.cast(fc_tile, FP32)
                # stable sigmoid: exp(-g) overflows to inf for g < -88.7 and 1/(1+inf) = 0
                sigmoid_g = pypto.reciprocal(pypto.add(pypto.exp(pypto.neg(g_fp32)), 1.0))
                one_minus_s = 1.0 - sigmoid_g
                silu_bwd = pypto.mul(sigmoid_g, pypto.add(pypto.mul(g_fp32, one_minus_s), 1.0))
                silu_g = pypto.mul(g_fp32, sigmoid_g)
                dy_mul_fc = pypto.mul(dy_fp32, fc_fp32)
                dg_fp32 = pypto.mul(dy_mul_fc, silu_bwd)
                dfc_fp32 = pypto.mul(dy_fp32, silu_g)
                pypto.assemble(pypto.cast(dg_fp32, BF16), [tile_offset, 0], dg)
                pypto.assemble(pypto.cast(dfc_fp32, BF16), [tile_offset, 0], dfc)
                db_g_acc[:] = db_g_acc + pypto.sum(dg_fp32, dim=0, keepdim=True)
                db_fc_acc[:] = db_fc_acc + pypto.sum(dfc_fp32, dim=0, keepdim=True)
            db_g[:] = pypto.cast(db_g_acc, BF16)
            db_fc[:] = pypto.cast(db_fc_acc, BF16)

        @pypto.frontend.jit(pass_options=PASS_OPTIONS["w"], runtime_options=rt)
        def fused_swiglu_bwd_w_kernel(
            x: pypto.Tensor([DYN, k], BF16),
            dg: pypto.Tensor([DYN, n], BF16),
            dfc: pypto.Tensor([DYN, n], BF16),
            dw_g: pypto.Tensor([k, n], BF16),
            dw_fc: pypto.Tensor([k, n], BF16),
            dw_g_acc: pypto.Tensor([k, n], FP32),
            dw_fc_acc: pypto.Tensor([k, n], FP32),
        ):
            pypto.set_vec_tile_shapes(vec[0], vec[1])
            pypto.set_cube_tile_shapes(cube_w[0], cube_w[1], cube_w[2])
            m = x.shape[0]
            loop_count = (m + tile_w - 1) // tile_w
            for idx in pypto.loop(loop_count, name="LOOP_BWD_DW", idx_name="idx"):
                tile_offset = idx * tile_w
                valid_m = (m - tile_offset).min(tile_w)
                x_tile = pypto.view(x, [tile_w, k], [tile_offset, 0], valid_shape=[valid_m, k])
                dg_tile = pypto.view(dg, [tile_w, n], [tile_offset, 0], valid_shape=[valid_m, n])
                dfc_tile = pypto.view(dfc, [tile_w, n], [tile_offset, 0], valid_shape=[valid_m, n])
                x_mm = mm_in(x_tile)
                dg_mm = mm_in(dg_tile)
                dfc_mm = mm_in(dfc_tile)
                dw_g_acc[:] = dw_g_acc + pypto.matmul(x_mm, dg_mm, FP32, a_trans=True, b_trans=False)
                dw_fc_acc[:] = dw_fc_acc + pypto.matmul(x_mm, dfc_mm, FP32, a_trans=True, b_trans=False)
            dw_g[:] = pypto.cast(dw_g_acc, BF16)
            dw_fc[:] = pypto.cast(dw_fc_acc, BF16)

    # The x kernel has no cross-tile accumulation: identical in both variants.
    @pypto.frontend.jit(pass_options=PASS_OPTIONS["x"], runtime_options=rt)
    def fused_swiglu_bwd_x_kernel(
        dg: pypto.Tensor([DYN, n], BF16),
        dfc: pypto.Tensor([DYN, n], BF16),
        w_g: pypto.Tensor([k, n], BF16),
        w_fc: pypto.Tensor([k, n], BF16),
        dx: pypto.Tensor([DYN, k], BF16),
    ):
        pypto.set_vec_tile_shapes(vec_x[0], vec_x[1])
        pypto.set_cube_tile_shapes(cube_x[0], cube_x[1], cube_x[2])
        m = dg.shape[0]
        loop_count = (m + tile_x - 1) // tile_x
        w_g_mm = mm_in(w_g)
        w_fc_mm = mm_in(w_fc)
        for idx in pypto.loop(loop_count, name="LOOP_BWD_DX", idx_name="idx"):
            tile_offset = idx * tile_x
            valid_m = (m - tile_offset).min(tile_x)
            dg_tile = pypto.view(dg, [tile_x, n], [tile_offset, 0], valid_shape=[valid_m, n])
            dfc_tile = pypto.view(dfc, [tile_x, n], [tile_offset, 0], valid_shape=[valid_m, n])
            dg_mm = mm_in(dg_tile)
            dfc_mm = mm_in(dfc_tile)
            dx_g = pypto.matmul(dg_mm, w_g_mm, FP32, a_trans=False, b_trans=True)
            dx_fc = pypto.matmul(dfc_mm, w_fc_mm, FP32, a_trans=False, b_trans=True)
            pypto.assemble(pypto.cast(pypto.add(dx_g, dx_fc), BF16), [tile_offset, 0], dx)

    return variant, fused_swiglu_bwd_b_kernel, fused_swiglu_bwd_w_kernel, fused_swiglu_bwd_x_kernel
