"""Known-wrong kernels: the gate's power is measured by what it catches.

Each mutant is one small edit of a correct per-tile kernel (``TileLoop`` below), made
the way such bugs really happen in tiled BF16 kernels: a loop bound, a tail tile's
``valid_m``, a buffer that is not zeroed, an assignment where an accumulation was
meant, a dtype in a store, a transpose that is a reshape. Each declares the schedule
it claims (``fn.schedule``), so the framework compares it with the path it says it
follows and its error is attributed to the kernel, not to the schedule.

Why they live in ``kernels/`` and not under ``tests/``: a mutant is a backend like any
other, so ``pytest cases/ --backend operators.swiglu_backward.kernels.mutants:tail_dropped`` runs it through the
whole case matrix, records and report; the benchmark ``benchmarks/false_alarms.py``
measures catch rates over seeds with them; and a test module is not an importable
library (a kernel import path into ``tests/`` would break as soon as the tests are not
on ``sys.path``). They are registered in ``MUTANTS`` here, not in
the operator's ``backends`` (``operators.swiglu_backward``): a wrong kernel must never appear among the defaults.

The correct kernels beside them (``CORRECT``) are the ones every case of the kill
matrix must pass: ``tiled_fp32`` (the loop below, unedited) and
``tiled_emulation_hardened`` (the golden's own tiled emulation served as a kernel),
both under the hardened schedule (FP32 accumulators, stable sigmoid). The article's
schedule (BF16 accumulation across tiles) legitimately fails the faithful gate at
multi-tile M (operators/swiglu_backward/expectations/pypto.toml), so it cannot serve as the correct base.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from operators.swiglu_backward.kernels.tiled_emulation import tiled_emulation_hardened
from operators.swiglu_backward.schedule import TiledSchedule
from operators.swiglu_backward.schedule import ARTICLE, HARDENED

BF16 = torch.bfloat16
F32 = torch.float32
FP32_MIN_NORMAL = 2.0 ** -126


def _tiles(m: int, tile: int | None) -> list[tuple[int, int]]:
    """(start, valid_m) of each tile: full tiles, then the tail with valid_m = M mod tile_m rows."""
    tile = m if tile is None else tile
    return [(s, min(tile, m - s)) for s in range(0, m, tile)]


class TileLoop:
    """A correct fused SwiGLU backward in per-tile torch, faithful to ``schedule``
    (FP32 math, BF16 stores of dg/dfc/db/dw/dx, FP32 accumulators across tiles).

    Three kernels as on the device: b (dg, dfc, db over M tiles of tile_m_b rows), w (dw
    over tiles of tile_m_w rows, reading the stored BF16 dg/dfc), x (dx per tile of
    tile_m_x rows). Each kernel stages its tile in a buffer of tile_m rows allocated
    once and reused across tiles; the tail tile fills only its valid_m rows (the rest
    still holds the previous tile) and every reduction is masked to the valid rows.
    Every method is one place where a real kernel can go wrong; each mutant overrides one.
    """

    schedule: TiledSchedule = HARDENED

    # -- pieces a mutant may get wrong ------------------------------------------------
    def tiles(self, m: int, tile: int | None) -> list[tuple[int, int]]:
        return _tiles(m, tile)

    def sigmoid(self, g: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(g)

    def silu_grad(self, s: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return s * (1 + g * (1 - s))          # d/dg [g * sigmoid(g)]

    def flush(self, t: torch.Tensor) -> torch.Tensor:
        return t                              # IEEE: subnormals kept

    store_dtype: torch.dtype = BF16           # the dg/dfc store; the w and x kernels read it back

    def reduced_rows(self, buf: torch.Tensor, valid: int) -> torch.Tensor:
        return buf[:valid]                    # a reduction sees only the tile's valid rows

    def x_transposed(self, x_tile: torch.Tensor) -> torch.Tensor:
        return x_tile.t()

    def dx_tile(self, dg: torch.Tensor, dfc: torch.Tensor, w_g: torch.Tensor, w_fc: torch.Tensor) -> torch.Tensor:
        return dg @ w_g.t() + dfc @ w_fc.t()

    def init_acc(self, what: str, shape: tuple[int, int]) -> torch.Tensor:
        return torch.zeros(shape, dtype=F32)

    def accumulate(self, what: str, acc: torch.Tensor, partial: torch.Tensor) -> torch.Tensor:
        return acc + partial.to(self.schedule.db_accumulator if what == "db" else self.schedule.dw_accumulator)

    # -- the three kernels ------------------------------------------------------------
    def b_kernel(self, dy, g, fc):
        m, n = dy.shape
        dg_out = torch.zeros(m, n, dtype=self.store_dtype)
        dfc_out = torch.zeros(m, n, dtype=self.store_dtype)
        acc_g, acc_fc = self.init_acc("db", (1, n)), self.init_acc("db", (1, n))
        tile = self.schedule.tile_m_b or m
        buf = {name: torch.zeros(tile, n, dtype=F32) for name in ("dy", "g", "fc")}
        for start, valid in self.tiles(m, self.schedule.tile_m_b):
            for name, src in (("dy", dy), ("g", g), ("fc", fc)):
                buf[name][:valid] = src[start:start + valid]
            b_dy, b_g, b_fc = buf["dy"], buf["g"], buf["fc"]
            s = self.sigmoid(b_g)
            dg = self.flush((b_dy * b_fc) * self.silu_grad(s, b_g))
            dfc = self.flush(b_dy * (b_g * s))
            dg_out[start:start + valid] = dg[:valid]
            dfc_out[start:start + valid] = dfc[:valid]
            acc_g = self.accumulate("db", acc_g, self.reduced_rows(dg, valid).sum(0, keepdim=True))
            acc_fc = self.accumulate("db", acc_fc, self.reduced_rows(dfc, valid).sum(0, keepdim=True))
        self.last_acc = {"db": (acc_g, acc_fc)}
        return dg_out, dfc_out, acc_g.to(BF16), acc_fc.to(BF16)

    def w_kernel(self, x, dg_st, dfc_st):
        m, k = x.shape
        n = dg_st.shape[1]
        acc_g, acc_fc = self.init_acc("dw", (k, n)), self.init_acc("dw", (k, n))
        tile = self.schedule.tile_m_w or m
        b_x = torch.zeros(tile, k, dtype=F32)
        b_g, b_fc = torch.zeros(tile, n, dtype=F32), torch.zeros(tile, n, dtype=F32)
        for start, valid in self.tiles(m, self.schedule.tile_m_w):
            b_x[:valid] = x[start:start + valid]
            b_g[:valid] = dg_st[start:start + valid]
            b_fc[:valid] = dfc_st[start:start + valid]
            xt = self.x_transposed(self.reduced_rows(b_x, valid))
            acc_g = self.accumulate("dw", acc_g, xt @ self.reduced_rows(b_g, valid))
            acc_fc = self.accumulate("dw", acc_fc, xt @ self.reduced_rows(b_fc, valid))
        self.last_acc["dw"] = (acc_g, acc_fc)
        return acc_g.to(BF16), acc_fc.to(BF16)

    def x_kernel(self, dg_st, dfc_st, w_g, w_fc):
        m = dg_st.shape[0]
        dx = torch.zeros(m, w_g.shape[0], dtype=BF16)
        w_g, w_fc = w_g.to(F32), w_fc.to(F32)
        for start, valid in self.tiles(m, self.schedule.tile_m_x):
            rows = slice(start, start + valid)
            dx[rows] = self.dx_tile(dg_st[rows], dfc_st[rows], w_g, w_fc).to(BF16)
        return dx

    def run(self, x, w_g, w_fc, dy, g, fc) -> dict[str, torch.Tensor]:
        device = x.device
        x, w_g, w_fc, dy, g, fc = (t.cpu() for t in (x, w_g, w_fc, dy, g, fc))
        dg, dfc, db_g, db_fc = self.b_kernel(dy.float(), g.float(), fc.float())
        # the w and x kernels read what the b kernel stored, in its store dtype
        dw_g, dw_fc = self.w_kernel(x.float(), dg.float(), dfc.float())
        dx = self.x_kernel(dg.float(), dfc.float(), w_g, w_fc)
        out = {"dg": dg, "dfc": dfc, "db_g": db_g, "db_fc": db_fc, "dw_g": dw_g, "dw_fc": dw_fc, "dx": dx}
        return {k: v.to(BF16).to(device) for k, v in out.items()}


def _kernel(loop: type[TileLoop], name: str, doc: str) -> Callable:
    def fn(*, x, w_g, w_fc, dy, g, fc):
        return loop().run(x, w_g, w_fc, dy, g, fc)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    fn.schedule = loop.schedule
    return fn


# ---------------------------------------------------------------------------- mutants
class _AllZero(TileLoop):
    def run(self, x, w_g, w_fc, dy, g, fc):
        # outputs allocated and zeroed, the launch forgotten (or never synchronised)
        m, k = x.shape
        n = w_g.shape[1]
        z = lambda *s: torch.zeros(*s, dtype=BF16, device=x.device)
        return {"dg": z(m, n), "dfc": z(m, n), "db_g": z(1, n), "db_fc": z(1, n),
                "dw_g": z(k, n), "dw_fc": z(k, n), "dx": z(m, k)}


class _TailDropped(TileLoop):
    def tiles(self, m, tile):
        tile = m if tile is None else tile
        return [(s, tile) for s in range(0, m - tile + 1, tile)]     # range(0, M // tile_m * tile_m): no tail


class _TailValidOffByOne(TileLoop):
    def tiles(self, m, tile):
        tile = m if tile is None else tile
        n_full = (m - 1) // tile
        last_valid = (m - 1) % tile                                  # should be (M - 1) % tile_m + 1
        return [(i * tile, tile) for i in range(n_full)] + ([(n_full * tile, last_valid)] if last_valid else [])


class _TailPaddingLeak(TileLoop):
    def reduced_rows(self, buf, valid):
        return buf                            # the whole tile buffer: stale rows past valid_m leak into db/dw


class _DbLastTileOnly(TileLoop):
    def accumulate(self, what, acc, partial):
        if what == "db":
            return partial.to(self.schedule.db_accumulator)          # acc = partial: the temp never accumulates
        return super().accumulate(what, acc, partial)


class _OutNotZeroed(TileLoop):
    """db/dw accumulate into persistent output buffers that are never zeroed: after the
    warm-up launch every benchmark harness does, they hold two launches' sums."""
    def run(self, x, w_g, w_fc, dy, g, fc):
        warm = TileLoop()
        warm.run(x, w_g, w_fc, dy, g, fc)
        self.stale = {"db": list(warm.last_acc["db"]), "dw": list(warm.last_acc["dw"])}
        return super().run(x, w_g, w_fc, dy, g, fc)

    def init_acc(self, what, shape):
        return self.stale[what].pop(0).clone()


class _DxSwappedWeights(TileLoop):
    def dx_tile(self, dg, dfc, w_g, w_fc):
        return dg @ w_fc.t() + dfc @ w_g.t()


class _SiluGradMissingFactor(TileLoop):
    def silu_grad(self, s, g):
        return s                               # d/dg silu taken as sigmoid(g): the (1 + g(1 - s)) factor lost


class _Fp16Store(TileLoop):
    store_dtype = torch.float16               # the store's dtype template says half, not bfloat16;
    # the w and x kernels read the FP16 values (more mantissa, far less range), the wrapper returns BF16


class _DxProductsBf16(TileLoop):
    def dx_tile(self, dg, dfc, w_g, w_fc):
        # each product lands in a BF16 tile before the add: PyTorch's own dx path, one of the
        # operator's legitimate choices (accuracy.allowance), whatever the schedule declares
        return (dg @ w_g.t()).to(BF16).float() + (dfc @ w_fc.t()).to(BF16).float()


class _DwXNotTransposed(TileLoop):
    def x_transposed(self, x_tile):
        return x_tile.reshape(x_tile.shape[1], x_tile.shape[0])      # a reshape where a transpose was meant


class _SubnormalsFlushed(TileLoop):
    def flush(self, t):
        return torch.where(t.abs() < FP32_MIN_NORMAL, torch.zeros_like(t), t)   # FTZ/DAZ on the vector unit


class _SigmoidExpRatio(TileLoop):
    def sigmoid(self, g):
        e = torch.exp(g)                       # fine while |g| is small; inf/inf = NaN once g > 88.7
        return e / (1 + e)


# name -> (loop, what is wrong, outputs where it shows)
_ZOO: dict[str, tuple[type[TileLoop], str]] = {
    "all_zero": (_AllZero, "every output zero: the launch never happened"),
    "tail_dropped": (_TailDropped, "the loop covers full tiles only; the tail tile is never computed"),
    "tail_valid_off_by_one": (_TailValidOffByOne, "the tail tile's valid_m is one row short ((M-1) % tile_m)"),
    "tail_padding_leak": (_TailPaddingLeak, "db/dw sum the whole tile buffer: the tail tile's padding rows "
                                            "(stale rows of the previous tile) leak into the sums"),
    "db_last_tile_only": (_DbLastTileOnly, "db's accumulation temp is assigned, not accumulated: db is the last tile's sum"),
    "out_not_zeroed": (_OutNotZeroed, "db/dw output buffers never zeroed: the warm-up launch's sums stay in"),
    "dx_swapped_weights": (_DxSwappedWeights, "dx uses w_fc for dg and w_g for dfc"),
    "silu_grad_missing_factor": (_SiluGradMissingFactor, "SiLU derivative taken as sigmoid(g), missing (1 + g(1 - s))"),
    "fp16_store": (_Fp16Store, "dg/dfc stored as FP16 instead of BF16; w and x read the FP16 values: right where "
                               "FP16 holds them (more mantissa), zero below its range (6e-8: the tiny profile)"),
    "dw_x_not_transposed": (_DwXNotTransposed, "x^T in dw taken as x.reshape(K, tile) instead of a transpose"),
    "subnormals_flushed": (_SubnormalsFlushed, "FP32 subnormal dg/dfc flushed to zero (FTZ)"),
    "sigmoid_exp_ratio": (_SigmoidExpRatio, "sigmoid as exp(g)/(1+exp(g)) while claiming the stable form: "
                                            "right at the seed scale, NaN for g > 88.7"),
}

MUTANTS: dict[str, Callable] = {name: _kernel(loop, name, doc) for name, (loop, doc) in _ZOO.items()}
globals().update(MUTANTS)     # operators.swiglu_backward.kernels.mutants:NAME resolves from the CLI


# ---------------------------------------------------------------------------- correct
tiled_fp32 = _kernel(TileLoop, "tiled_fp32", "The unedited per-tile loop: every mutant's correct original.")

tiled_dx_products_bf16 = _kernel(_DxProductsBf16, "tiled_dx_products_bf16",
                                 "The per-tile loop with dx's two products stored in BF16 before their sum.")

CORRECT: dict[str, Callable] = {"tiled_fp32": tiled_fp32, "tiled_emulation_hardened": tiled_emulation_hardened,
                                "tiled_dx_products_bf16": tiled_dx_products_bf16}


# ---------------------------------------------------------------------------- the article's chain
class _ArticleLoop(TileLoop):
    """The loop under the article's schedule: per-tile FP32 partials, cast to BF16 and added to
    a BF16 accumulator tile by tile (out[:] = out + cast(partial))."""
    schedule = ARTICLE

    def init_acc(self, what, shape):
        return torch.zeros(shape, dtype=self.schedule.db_accumulator if what == "db" else self.schedule.dw_accumulator)

    def accumulate(self, what, acc, partial):
        return acc + partial.to(F32).to(acc.dtype)


class _ArticleExactPartials(_ArticleLoop):
    """Each tile's partial computed exactly (FP64), then rounded to FP32: another valid FP32 partial."""
    def reduced_rows(self, buf, valid):
        return buf[:valid].double()


class _ArticleReversedRows(_ArticleLoop):
    """Each tile's rows summed in reverse order: another valid FP32 summation order."""
    def reduced_rows(self, buf, valid):
        return buf[:valid].flip(0)


# Kernels faithful to the article's schedule whose FP32 partials differ in the last bits: the
# ensemble against which "faithful to its schedule" is judged (accuracy.allowance.tile_chain).
ARTICLE_ENSEMBLE: dict[str, Callable] = {
    name: _kernel(loop, name, doc) for name, (loop, doc) in {
        "article_loop": (_ArticleLoop, "The per-tile loop under the article's schedule (BF16 cross-tile adds)."),
        "article_exact_partials": (_ArticleExactPartials, "As article_loop, each tile's partial exact, then FP32."),
        "article_reversed_rows": (_ArticleReversedRows, "As article_loop, each tile's rows summed in reverse."),
    }.items()}
globals().update(ARTICLE_ENSEMBLE)
