"""A dtype path and loop schedule as plain data, for an operator whose schedule is no more than
that: its rounding points, the kernels that loop over M with their tiles and accumulators.

``Plan`` and ``Schedule`` satisfy ``goldens.schedule``'s protocol; ``Schedules`` builds the
reference schedules every operator needs from its points and kernels. The RMSNorm backward
declares its schedules with them (``operators/rmsnorm_backward/schedule.py``); the SwiGLU
backward has its own types, because its plan carries more than roundings (sigmoid form,
operation orders).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch

BF16 = torch.bfloat16


@dataclass(frozen=True)
class Plan:
    """``math``: the dtype the math runs in; ``store``: point -> the dtype it is stored in (a point
    not named stays in the math dtype); ``points``: every point the operator knows; ``loops``:
    row-local loops the math replays block by block (attention's online softmax over key blocks:
    ``{"key": 128}``); a loop not named is one global pass."""
    points: tuple[str, ...]
    math: torch.dtype = torch.float32
    store: Mapping[str, torch.dtype | None] = field(default_factory=dict)
    loops: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self):
        unknown = set(self.store) - set(self.points)
        if unknown:
            raise ValueError(f"unknown rounding points {sorted(unknown)}; known: {self.points}")

    def rounding(self, point: str) -> torch.dtype | None:
        return self.store.get(point)

    def with_store(self, **points: torch.dtype | None) -> "Plan":
        return replace(self, store={**self.store, **points})

    def loop(self, name: str) -> int | None:
        """The block size of a row-local loop the math replays, or None (one global pass)."""
        return self.loops.get(name)

    def with_loops(self, **loops: int) -> "Plan":
        for name, size in loops.items():
            if size < 1:
                raise ValueError(f"loop {name!r}: the block must be >= 1, got {size}")
        return replace(self, loops={**self.loops, **loops})


@dataclass(frozen=True)
class Schedule:
    """A kernel's loop over M: ``tiles`` kernel -> rows per tile (None: one global sum),
    ``accumulators`` kernel -> the dtype its tile partials are cast to and added in."""
    name: str
    plan: Plan
    tiles: Mapping[str, int | None] = field(default_factory=dict)
    accumulators: Mapping[str, torch.dtype] = field(default_factory=dict)

    def __post_init__(self):
        for kernel, tile in self.tiles.items():
            if tile is not None and tile < 1:
                raise ValueError(f"schedule {self.name!r}: the tile of kernel {kernel!r} must be >= 1 or None, got {tile}")

    def tile_m(self, kernel: str) -> int | None:
        return self.tiles.get(kernel)

    def accumulator(self, kernel: str) -> torch.dtype:
        return self.accumulators.get(kernel, self.plan.math)

    @property
    def is_global(self) -> bool:
        return all(t is None for t in self.tiles.values())

    def summed_globally(self, name: str) -> "Schedule":
        return replace(self, name=name, tiles={k: None for k in self.tiles}, accumulators={})

    def n_tiles(self, m: int, kernel: str) -> int:
        tile = self.tile_m(kernel)
        return 1 if tile is None else -(-m // tile)


class Schedules:
    """The reference schedules of an operator (``Operator.schedules``): ``FP64_GLOBAL`` (FP64 math,
    nothing stored, global sums), ``FAITHFUL_GLOBAL`` (FP32 math, the outputs stored in BF16),
    ``faithful_schedule(plan)``, ``default_schedule()`` and ``study_schedules()``."""

    TiledSchedule = Schedule

    def __init__(self, points: Sequence[str], kernels: Sequence[str], outputs: Sequence[str] | Mapping[str, torch.dtype]):
        """``outputs``: the store points of the operator's outputs, stored in BF16 by the faithful
        path (a mapping: each in its own dtype); ``set_default`` names the default and study
        schedules once they are declared."""
        self.points, self.kernels = tuple(points), tuple(kernels)
        stores = dict(outputs) if isinstance(outputs, Mapping) else dict.fromkeys(outputs, BF16)
        self.BF16_FAITHFUL = self.plan(**stores)
        self.FP64_IDEAL = Plan(self.points, torch.float64)
        self.FP64_GLOBAL = Schedule("fp64", self.FP64_IDEAL, {k: None for k in kernels})
        self.FAITHFUL_GLOBAL = Schedule("faithful", self.BF16_FAITHFUL, {k: None for k in kernels})
        self._default: Schedule | None = None
        self._study: tuple[Schedule, ...] = ()

    def plan(self, math: torch.dtype = torch.float32, **store: torch.dtype | None) -> Plan:
        return Plan(self.points, math, store)

    def schedule(self, name: str, plan: Plan | None = None, **tiles: tuple[int | None, torch.dtype]) -> Schedule:
        """``tiles``: kernel=(rows per tile, accumulator dtype); kernels not named sum globally."""
        return Schedule(name, plan or self.BF16_FAITHFUL, {k: tiles[k][0] if k in tiles else None for k in self.kernels},
                        {k: acc for k, (_, acc) in tiles.items()})

    def set_default(self, default: Schedule, study: Sequence[Schedule] = ()) -> None:
        self._default, self._study = default, tuple(study)

    def faithful_schedule(self, plan: Plan) -> Schedule:
        """The BF16-faithful golden of a dtype path: its roundings, one global sum in its math dtype
        (its row-local loops too: blocks are the tiled golden's, as tiles over M are)."""
        plan = replace(plan, loops={})
        differs = [p for p in self.points if plan.rounding(p) != self.BF16_FAITHFUL.rounding(p)]
        differs += [] if plan.math == self.BF16_FAITHFUL.math else [str(plan.math).replace("torch.", "")]
        name = "faithful" + (f"[{','.join(differs)}]" if differs else "")
        return Schedule(name, plan, {k: None for k in self.kernels})

    def default_schedule(self) -> Schedule:
        return self._default or self.FAITHFUL_GLOBAL

    def study_schedules(self) -> list[Schedule]:
        return list(self._study) or [self.default_schedule()]
