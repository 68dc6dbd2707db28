"""SwiGLU backward's dtype path and loop schedule, declared as data (the framework reads them
through the protocol of ``goldens.schedule``).

Two records describe a kernel variant without new code:

* ``RoundingPlan`` says where the kernel rounds (stores) and to what dtype;
  ``None`` at a point means the value stays in the math dtype. The
  BF16-faithful golden and the tiled emulation both follow it.
* ``TiledSchedule`` adds the loop over M: tile_m per kernel and the dtype in
  which the cross-tile accumulation of db and dw happens (the output buffer's
  dtype when the kernel does ``out[:] = out + cast(partial)``).

A kernel's schedule lives next to the kernel (``operators/swiglu_backward/kernels/pypto/schedule.py``
for the article's kernels); goldens only read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from operators.swiglu_backward.math import SIGMOID_FORMS

# The points where the operator's dtype path can round, in data-flow order.
ROUNDING_POINTS = (
    "dy_fc",       # dy * fc, when a framework materialises it (autograd's grad of silu(g))
    "silu_g",      # g * sigmoid(g), likewise (autograd's saved forward output)
    "dg",          # b kernel stores dg; w and x kernels read the stored value
    "dfc",         # likewise dfc
    "db",          # db_g / db_fc output store
    "dw",          # dw_g / dw_fc output store
    "dx_product",  # each of dg @ w_g^T and dfc @ w_fc^T before their sum
    "dx",          # dx output store
)


@dataclass(frozen=True)
class RoundingPlan:
    """Where values are rounded, and in which dtype the math runs.

    ``sigmoid``: ``"stable"`` (torch.sigmoid) or ``"exp_ratio"``
    (exp(g) / (1 + exp(g)), the article's form, NaN for g above ~88.7 in FP32).
    """
    math: torch.dtype = torch.float32
    store: dict = field(default_factory=lambda: {
        "dy_fc": None, "silu_g": None, "dg": torch.bfloat16, "dfc": torch.bfloat16, "db": torch.bfloat16,
        "dw": torch.bfloat16, "dx_product": None, "dx": torch.bfloat16})
    sigmoid: str = "stable"
    # db sums dg/dfc as computed ("math", the article's b kernel) or as stored ("stored",
    # a framework that materialises dg in BF16 first, as PyTorch autograd does)
    db_input: str = "math"
    # dg's multiplication order: "article" = (dy*fc) * (s*(1 + g*(1-s))), the b kernel's;
    # "torch" = ((dy*fc) * s) * (1 + g*(1-s)), autograd's silu_backward (measured bit for bit)
    dg_order: str = "article"

    def __post_init__(self):
        if self.dg_order not in ("article", "torch"):
            raise ValueError(f"dg_order must be 'article' or 'torch', got {self.dg_order!r}")
        if self.db_input not in ("math", "stored"):
            raise ValueError(f"db_input must be 'math' or 'stored', got {self.db_input!r}")
        unknown = set(self.store) - set(ROUNDING_POINTS)
        if unknown:
            raise ValueError(f"unknown rounding points {sorted(unknown)}; known: {ROUNDING_POINTS}")
        if self.sigmoid not in SIGMOID_FORMS:
            raise ValueError(f"sigmoid must be one of {SIGMOID_FORMS}, got {self.sigmoid!r}")

    def rounding(self, point: str) -> torch.dtype | None:
        return self.store.get(point)

    def with_store(self, **points: torch.dtype | None) -> "RoundingPlan":
        return replace(self, store={**self.store, **points})


KERNELS = ("b", "w", "x")   # the operator's kernels that loop over M


@dataclass(frozen=True)
class TiledSchedule:
    """The kernel's loop over M. Tile sizes in rows (``None``: one global
    reduction over all M rows); accumulators are the dtypes the per-tile partials
    are cast to and added in, tile by tile in loop order."""
    name: str = "article"
    tile_m_b: int | None = 1024
    tile_m_w: int | None = 2048
    tile_m_x: int | None = 1024
    db_accumulator: torch.dtype = torch.bfloat16
    dw_accumulator: torch.dtype = torch.bfloat16
    plan: RoundingPlan = field(default_factory=RoundingPlan)

    def __post_init__(self):
        for name in ("tile_m_b", "tile_m_w", "tile_m_x"):
            tile = getattr(self, name)
            if tile is not None and tile < 1:
                raise ValueError(f"{name} must be >= 1 or None (global), got {tile}")

    def tile_m(self, kernel: str) -> int | None:
        return {"b": self.tile_m_b, "w": self.tile_m_w, "x": self.tile_m_x}[kernel]

    def accumulator(self, kernel: str) -> torch.dtype:
        """The dtype a kernel's cross-tile accumulation adds in (the math dtype where it has none)."""
        return {"b": self.db_accumulator, "w": self.dw_accumulator}.get(kernel, self.plan.math)

    @property
    def is_global(self) -> bool:
        """No kernel tiles M: every reduction is one sum over all rows."""
        return all(self.tile_m(k) is None for k in KERNELS)

    def summed_globally(self, name: str) -> "TiledSchedule":
        """The same dtype path without tiles: each reduction one sum in the math dtype."""
        return replace(self, name=name, tile_m_b=None, tile_m_w=None, tile_m_x=None,
                       db_accumulator=self.plan.math, dw_accumulator=self.plan.math)

    def n_tiles(self, m: int, kernel: str) -> int:
        tile = self.tile_m(kernel)
        return 1 if tile is None else -(-m // tile)


BF16_FAITHFUL = RoundingPlan()
FP64_IDEAL = RoundingPlan(math=torch.float64, store={p: None for p in ROUNDING_POINTS})

# The two global-sum goldens are schedules without tiles: one reduction over all
# M rows in the math dtype, rounded once where the plan stores.


def faithful_schedule(plan: RoundingPlan) -> TiledSchedule:
    """The BF16-faithful golden of a dtype path: the plan's roundings, a stable sigmoid
    (the right answer, whatever form the kernel uses), one global reduction in the math dtype."""
    stable = replace(plan, sigmoid="stable")
    differs = [p for p in ROUNDING_POINTS if stable.rounding(p) != BF16_FAITHFUL.rounding(p)]
    extras = differs + ([] if stable.db_input == BF16_FAITHFUL.db_input else [f"db_{stable.db_input}"]) \
        + ([] if stable.math == BF16_FAITHFUL.math else [str(stable.math).replace("torch.", "")])
    name = "faithful" + (f"[{','.join(extras)}]" if extras else "")
    return TiledSchedule(name=name, tile_m_b=None, tile_m_w=None, tile_m_x=None,
                         db_accumulator=plan.math, dw_accumulator=plan.math, plan=replace(plan, sigmoid="stable"))


FP64_GLOBAL = TiledSchedule(name="fp64", tile_m_b=None, tile_m_w=None, tile_m_x=None,
                            db_accumulator=torch.float64, dw_accumulator=torch.float64, plan=FP64_IDEAL)
FAITHFUL_GLOBAL = TiledSchedule(name="faithful", tile_m_b=None, tile_m_w=None, tile_m_x=None,
                                db_accumulator=torch.float32, dw_accumulator=torch.float32, plan=BF16_FAITHFUL)


# The article's schedule for the three PyPTO kernels: the one source of truth for their tile sizes
# and accumulator dtypes, read by the kernels and by the tiled golden. Numbers from the article
# (PyPTO-Gym fused_swiglu_grad): tile_m 1024 for b and x, 2048 for w (its [K,N] output makes fewer,
# wider tiles cheaper); db and dw accumulate in place into their zeroed BF16 outputs,
# ``out[:] = out + cast(partial, BF16)``.
ARTICLE = TiledSchedule(
    name="article",
    tile_m_b=1024, tile_m_w=2048, tile_m_x=1024,
    db_accumulator=torch.bfloat16, dw_accumulator=torch.bfloat16,
    plan=RoundingPlan(sigmoid="exp_ratio"),
)

# The hardened variant: stable sigmoid and FP32 accumulators for db and dw,
# rounded to BF16 once after the last tile.
HARDENED = TiledSchedule(
    name="hardened",
    tile_m_b=1024, tile_m_w=2048, tile_m_x=1024,
    db_accumulator=torch.float32, dw_accumulator=torch.float32,
    plan=RoundingPlan(sigmoid="stable"),
)


# PyTorch's dtype path, declared so its goldens replay it. Autograd of silu(g) * fc in BF16
# materialises dy*fc (the gradient reaching silu) and silu(g) (saved by the forward) as BF16
# tensors; dg/dfc are stored in BF16 and summed as stored for db; each matmul is rounded to
# BF16, so dx's two products are rounded before their (BF16) sum; one global FP32
# accumulation per reduction.
TORCH_BF16 = TiledSchedule(
    name="torch-bf16", tile_m_b=None, tile_m_w=None, tile_m_x=None,
    db_accumulator=torch.float32, dw_accumulator=torch.float32,
    plan=RoundingPlan(store={**BF16_FAITHFUL.store, "dy_fc": torch.bfloat16, "silu_g": torch.bfloat16,
                             "dx_product": torch.bfloat16}, db_input="stored", dg_order="torch"),
)

# Inductor fuses the elementwise backward into FP32 code that rounds once on store (no
# BF16 dy*fc or silu(g)); the bias sums read the stored BF16 dg/dfc (measured: db equals
# the FP32 sum of the stored dg bit for bit); matmuls are BF16, each rounded.
TORCH_COMPILE_BF16 = TiledSchedule(
    name="torch-compile-bf16", tile_m_b=None, tile_m_w=None, tile_m_x=None,
    db_accumulator=torch.float32, dw_accumulator=torch.float32,
    plan=RoundingPlan(store={**BF16_FAITHFUL.store, "dx_product": torch.bfloat16}, db_input="stored"),
)


def default_schedule() -> TiledSchedule:
    """The schedule of a backend that declares none: the article's (diagnosis only; the verdict
    never reads a declaration)."""
    return ARTICLE


def study_schedules() -> list[TiledSchedule]:
    """The schedules the drift study compares (``reports.drift_study``): the article's (BF16
    accumulators), the hardened one (FP32 accumulators) and PyTorch's path (one global FP32 sum)."""
    return [ARTICLE, HARDENED, TORCH_BF16]
