"""A kernel's dtype path and loop schedule, as the framework reads them.

An operator declares its own schedule type (``Operator.schedules``; SwiGLU backward's is
``operators.swiglu_backward.schedule``): its kernels, tiles and rounding points are its own.
The goldens, the gate and the reports read only this protocol:

* ``RoundingPlan``: ``math`` (the dtype the math runs in) and ``rounding(point)`` (the dtype a
  named point of the operator's data flow is stored in, ``None`` where the value stays in the
  math dtype); the operator's golden reads whatever else its plan carries;
* ``TiledSchedule``: ``name``, ``plan``, ``tile_m(kernel)`` (rows per tile of the kernel that
  reduces over M; ``None``: one global sum), ``accumulator(kernel)`` (the dtype its cross-tile
  accumulation adds in), ``n_tiles(m, kernel)``, ``is_global`` and ``summed_globally(name)``
  (the same dtype path with every reduction one sum in the math dtype).

* ``ScheduleSet`` (``Operator.schedules``): ``TiledSchedule`` (its concrete schedule type),
  ``FP64_GLOBAL`` (the reference: FP64 math from the BF16 inputs, nothing stored, global sums),
  ``FAITHFUL_GLOBAL``, ``faithful_schedule(plan)`` (the BF16-faithful golden of a dtype path),
  ``default_schedule()`` (a backend that declares none) and ``study_schedules()``.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class RoundingPlan(Protocol):
    math: torch.dtype

    def rounding(self, point: str) -> torch.dtype | None: ...


@runtime_checkable
class TiledSchedule(Protocol):
    name: str
    plan: RoundingPlan

    def tile_m(self, kernel: str) -> int | None: ...

    def accumulator(self, kernel: str) -> torch.dtype: ...

    def n_tiles(self, m: int, kernel: str) -> int: ...

    @property
    def is_global(self) -> bool: ...

    def summed_globally(self, name: str) -> "TiledSchedule": ...


@runtime_checkable
class ScheduleSet(Protocol):
    TiledSchedule: type
    FP64_GLOBAL: TiledSchedule
    FAITHFUL_GLOBAL: TiledSchedule

    def faithful_schedule(self, plan: RoundingPlan) -> TiledSchedule: ...

    def default_schedule(self) -> TiledSchedule: ...

    def study_schedules(self) -> list: ...
