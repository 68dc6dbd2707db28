"""The kernel's dtype path and loop schedule, declared as data.

Two records describe a kernel variant without new code:

* ``RoundingPlan`` says where the kernel rounds (stores) and to what dtype;
  ``None`` at a point means the value stays in the math dtype. The
  BF16-faithful golden and the tiled emulation both follow it.
* ``TiledSchedule`` adds the loop over M: tile_m per kernel and the dtype in
  which the cross-tile accumulation of db and dw happens (the output buffer's
  dtype when the kernel does ``out[:] = out + cast(partial)``).

A kernel's schedule lives next to the kernel (``kernels/pypto/schedule.py``
for the article's operator); goldens only read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

# The points where the operator's dtype path can round, in data-flow order.
ROUNDING_POINTS = (
    "dg",          # b kernel stores dg; w and x kernels read the stored value
    "dfc",         # likewise dfc
    "db",          # db_g / db_fc output store
    "dw",          # dw_g / dw_fc output store
    "dx_product",  # each of dg @ w_g^T and dfc @ w_fc^T before their sum
    "dx",          # dx output store
)
SIGMOID_FORMS = ("stable", "exp_ratio")


@dataclass(frozen=True)
class RoundingPlan:
    """Where values are rounded, and in which dtype the math runs.

    ``sigmoid``: ``"stable"`` (torch.sigmoid) or ``"exp_ratio"``
    (exp(g) / (1 + exp(g)), the article's form, NaN for g above ~88.7 in FP32).
    """
    math: torch.dtype = torch.float32
    store: dict = field(default_factory=lambda: {
        "dg": torch.bfloat16, "dfc": torch.bfloat16, "db": torch.bfloat16,
        "dw": torch.bfloat16, "dx_product": None, "dx": torch.bfloat16})
    sigmoid: str = "stable"

    def __post_init__(self):
        unknown = set(self.store) - set(ROUNDING_POINTS)
        if unknown:
            raise ValueError(f"unknown rounding points {sorted(unknown)}; known: {ROUNDING_POINTS}")
        if self.sigmoid not in SIGMOID_FORMS:
            raise ValueError(f"sigmoid must be one of {SIGMOID_FORMS}, got {self.sigmoid!r}")

    def rounding(self, point: str) -> torch.dtype | None:
        return self.store.get(point)

    def with_store(self, **points: torch.dtype | None) -> "RoundingPlan":
        return replace(self, store={**self.store, **points})


@dataclass(frozen=True)
class TiledSchedule:
    """The kernel's loop over M. Tile sizes in rows; accumulators are the dtypes
    the per-tile partials are cast to and added in, tile by tile in loop order."""
    tile_m_b: int = 1024
    tile_m_w: int = 2048
    tile_m_x: int = 1024
    db_accumulator: torch.dtype = torch.bfloat16
    dw_accumulator: torch.dtype = torch.bfloat16
    plan: RoundingPlan = field(default_factory=RoundingPlan)

    def __post_init__(self):
        for name in ("tile_m_b", "tile_m_w", "tile_m_x"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    def n_tiles(self, m: int, kernel: str) -> int:
        tile = {"b": self.tile_m_b, "w": self.tile_m_w, "x": self.tile_m_x}[kernel]
        return -(-m // tile)


BF16_FAITHFUL = RoundingPlan()
