"""A declared schedule replayed by the tiled golden, as a kernel: ``ScheduleEmulation``.

Its outputs are the golden pass's tiled layer of its schedule, each stored once in the operator's
dtype. A pass over a case computes that layer anyway wherever a backend declares the schedule
(the layer that attributes a backend's error to storage, tile order or kernel), with the same
bits: one stream, canonical row blocks, the goldens' fixed threads (``goldens.stream``). So a case
evaluation serves an emulation from its own golden pass instead of calling it
(``cases.evaluate``; ``served_schedule`` says which): at the article's case the two reference
schedules' emulations otherwise cost two calls of 33 s each on a busy 2-core worker, twice
1.1 GB of outputs held through the pass, and their tiled layers computed twice. Served or called,
its numbers are the same (``tests/core/test_served_emulation.py`` compares the records).

Only an object whose type is exactly ``ScheduleEmulation`` and whose operator is the case's is
served: a subclass could change what a call returns, and a served kernel is never called.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from contract.operator import Operator
from contract.schedule import TiledSchedule
from goldens.stream import materialize


class ScheduleEmulation:
    """``schedule`` of ``operator`` replayed by the tiled golden; called with the operator's inputs
    by keyword, it returns every output as a full tensor in the operator's dtype."""

    __slots__ = ("operator", "schedule", "__name__", "__qualname__")

    def __init__(self, operator: Operator, schedule: TiledSchedule, name: str):
        self.operator, self.schedule = operator, schedule
        self.__name__ = self.__qualname__ = name

    def __call__(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        return served_outputs(self.operator, materialize(self.operator, inputs, self.schedule))

    def __repr__(self) -> str:
        return f"ScheduleEmulation({self.operator.name!r}, {self.schedule.name!r})"


def served_schedule(fn, operator: Operator) -> TiledSchedule | None:
    """The schedule whose tiled layer gives ``fn``'s outputs at a case of ``operator``, or None when
    ``fn`` must be called."""
    if type(fn) is ScheduleEmulation and fn.operator is operator and isinstance(fn.schedule, TiledSchedule):
        return fn.schedule
    return None


def served_outputs(operator: Operator, layer: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A served emulation's outputs from its tiled layer's values (rows of a block, or the
    reductions), stored as ``ScheduleEmulation.__call__`` stores them."""
    return {o: t.to(operator.output_dtype(o)) for o, t in layer.items() if o in operator.output_names}
