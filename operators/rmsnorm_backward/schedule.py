"""RMSNorm backward's dtype path and loop schedule as data (the protocol of ``goldens.schedule``).

Rounding points, in data-flow order: ``rstd`` (a kernel that keeps rstd in a narrower dtype),
``xhat`` (the normalised x, stored by a forward that saves it), ``g`` (dy * w), ``dw_term``
(dy * xhat before dw sums it), and the two output stores ``dw`` and ``dx``. One kernel loops
over M with a tile: ``w`` (dw's cross-tile accumulation, in its accumulator dtype); dx is per row.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

ROUNDING_POINTS = ("rstd", "xhat", "g", "dw_term", "dw", "dx")
KERNELS = ("w",)


@dataclass(frozen=True)
class RoundingPlan:
    math: torch.dtype = torch.float32
    store: dict = field(default_factory=lambda: {"rstd": None, "xhat": None, "g": None, "dw_term": None,
                                                 "dw": torch.bfloat16, "dx": torch.bfloat16})

    def __post_init__(self):
        unknown = set(self.store) - set(ROUNDING_POINTS)
        if unknown:
            raise ValueError(f"unknown rounding points {sorted(unknown)}; known: {ROUNDING_POINTS}")

    def rounding(self, point: str) -> torch.dtype | None:
        return self.store.get(point)

    def with_store(self, **points: torch.dtype | None) -> "RoundingPlan":
        return replace(self, store={**self.store, **points})


@dataclass(frozen=True)
class TiledSchedule:
    """dw's loop over M: ``tile_m_w`` rows per tile (None: one global sum), partials cast to
    ``dw_accumulator`` and added tile by tile."""
    name: str = "tiled"
    tile_m_w: int | None = 1024
    dw_accumulator: torch.dtype = torch.bfloat16
    plan: RoundingPlan = field(default_factory=RoundingPlan)

    def __post_init__(self):
        if self.tile_m_w is not None and self.tile_m_w < 1:
            raise ValueError(f"tile_m_w must be >= 1 or None (global), got {self.tile_m_w}")

    def tile_m(self, kernel: str) -> int | None:
        return {"w": self.tile_m_w}.get(kernel)

    def accumulator(self, kernel: str) -> torch.dtype:
        return self.dw_accumulator if kernel == "w" else self.plan.math

    @property
    def is_global(self) -> bool:
        return self.tile_m_w is None

    def summed_globally(self, name: str) -> "TiledSchedule":
        return replace(self, name=name, tile_m_w=None, dw_accumulator=self.plan.math)

    def n_tiles(self, m: int, kernel: str) -> int:
        tile = self.tile_m(kernel)
        return 1 if tile is None else -(-m // tile)


BF16_FAITHFUL = RoundingPlan()
FP64_IDEAL = RoundingPlan(math=torch.float64, store={p: None for p in ROUNDING_POINTS})
FP64_GLOBAL = TiledSchedule(name="fp64", tile_m_w=None, dw_accumulator=torch.float64, plan=FP64_IDEAL)
FAITHFUL_GLOBAL = TiledSchedule(name="faithful", tile_m_w=None, dw_accumulator=torch.float32, plan=BF16_FAITHFUL)
# A fused kernel's usual loop: dw accumulated over tiles of 1024 rows in its BF16 output buffer
TILED_BF16 = TiledSchedule(name="tiled-bf16", tile_m_w=1024, dw_accumulator=torch.bfloat16)
TILED_FP32 = TiledSchedule(name="tiled-fp32", tile_m_w=1024, dw_accumulator=torch.float32)
# PyTorch's autograd of F.rms_norm: FP32 math from the BF16 inputs, each output stored once,
# dw one global FP32 sum (measured: the graph is ToCopy, Mul, Rsqrt, Mean, Pow in FP32)
TORCH_FP32 = TiledSchedule(name="torch-fp32", tile_m_w=None, dw_accumulator=torch.float32)


def faithful_schedule(plan: RoundingPlan) -> TiledSchedule:
    """The BF16-faithful golden of a dtype path: its roundings, one global sum in its math dtype."""
    differs = [p for p in ROUNDING_POINTS if plan.rounding(p) != BF16_FAITHFUL.rounding(p)]
    differs += [] if plan.math == BF16_FAITHFUL.math else [str(plan.math).replace("torch.", "")]
    name = "faithful" + (f"[{','.join(differs)}]" if differs else "")
    return TiledSchedule(name=name, tile_m_w=None, dw_accumulator=plan.math, plan=plan)


def default_schedule() -> TiledSchedule:
    """A backend that declares none is diagnosed against the tiled BF16 loop (never gated on it)."""
    return TILED_BF16


def study_schedules() -> list[TiledSchedule]:
    """The drift study's schedules: BF16 and FP32 cross-tile accumulation, PyTorch's global sum."""
    return [TILED_BF16, TILED_FP32, TORCH_FP32]
