"""An operator with its own golden and schedule types, judged by the allowances its math derives
(``accuracy.derived``): the SwiGLU and RMSNorm backwards, whose hand models came first.

The verdict reads the FP64 reference and each element's allowance, nothing else
(``accuracy.gate``): both come from the derived math's pass (the reference, its rounding model,
the reductions' term sums, the bias paths). Every other plan a run evaluates is served by the
operator's own golden under the operator's own schedule: the faithful golden of a backend's
declared path, its tiled emulation, and the reference schedules' emulations a run serves as
backends (SwiGLU's ``article-schedule-emulated``). Those schedules carry forms that the derived
math's generic plans do not: SwiGLU's sigmoid form, dg's multiplication order, and whether db sums
dg as computed (the article's b kernel) or as stored while dw and dx read it stored. The
diagnosis layers therefore replay a kernel's declared path exactly as under the hand gate, and
a backend declares the same schedule under either gate.

The diagnosis bound (``_Gate.bound``) reads the derived math's points under the operator's plan:
``rounding_in(plan, point, output)`` is the dtype the point is stored in for the output that
reads it (default: the plan's rounding of a point of the same name).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from accuracy.derived import DerivedMath, _Frozen, _Gate
from contract.operator import ChunkGolden

RoundingIn = Callable[[object, str, str], "torch.dtype | None"]


def same_names(plan, point: str, output: str) -> torch.dtype | None:
    """A plan whose points carry the derived math's names (RMSNorm's ``Plan``)."""
    return plan.rounding(point)


class _PlanAsRead:
    """The operator's plan as one output reads it: the derived math's points by ``rounding_in``."""

    def __init__(self, plan, output: str, rounding_in: RoundingIn):
        self.math = plan.math
        self._plan, self._output, self._rounding_in = plan, output, rounding_in

    def rounding(self, point: str) -> torch.dtype | None:
        return self._rounding_in(self._plan, point, self._output)


class _ScheduleAsRead:
    """The operator's schedule with its plan as one output reads it: what ``accuracy.bounds.
    reduction_bound`` reads (its tiles' count and accumulators as declared)."""

    def __init__(self, sched, output: str, rounding_in: RoundingIn):
        self.plan, self._sched = _PlanAsRead(sched.plan, output, rounding_in), sched

    def accumulator(self, kernel: str) -> torch.dtype:
        return self._sched.accumulator(kernel)

    def n_tiles(self, m: int, kernel: str) -> int:
        return self._sched.n_tiles(m, kernel)


class _GateUnderOwnSchedules(_Gate):
    """The derived gate, its diagnosis bound read through the operator's own plans."""

    def __init__(self, derived: DerivedMath, rounding_in: RoundingIn):
        object.__setattr__(self, "rounding_in", rounding_in)
        super().__init__(derived)

    def bound(self, output: str, exact: torch.Tensor, abs_terms, sched, sizes) -> torch.Tensor:
        return super().bound(output, exact, abs_terms, _ScheduleAsRead(sched, output, self.rounding_in), sizes)


class _ReferenceByMath(_Frozen):
    """``Operator.golden``: the FP64 reference's pass (and its term sums) by the derived math, every
    other plan by the operator's own golden."""

    def __init__(self, derived: DerivedMath, own_golden, reference_plan):
        self.derived = derived
        self.own_golden = own_golden
        self.reference_plan = reference_plan
        self.max_chunk_rows = derived.golden.max_chunk_rows
        self._freeze()

    def term_sums(self, inputs):
        return self.derived.golden.term_sums(inputs)

    def chunk(self, rows, weights, plan, *, want_rows: bool, terms=None, raw=None, block: int = 1024,
              start: int = 0) -> ChunkGolden:
        if plan == self.reference_plan:
            return self.derived.golden.chunk(rows, weights, self.derived.schedules.FP64_IDEAL, want_rows=want_rows,
                                             terms=terms, raw=raw, block=block, start=start)
        if terms is not None:
            raise ValueError("the term sums follow the FP64 reference's pass, not a schedule's plan")
        return self.own_golden.chunk(rows, weights, plan, want_rows=want_rows, raw=raw, block=block, start=start)


def with_derived(operator, derived: DerivedMath, *, rounding_in: RoundingIn = same_names, name: str | None = None):
    """``operator`` judged by ``derived``'s reference and allowances; its own schedules and golden
    serve every other plan (the module's docstring). ``name``: the judged operator's name (its
    records say which gate judged them)."""
    return replace(operator, name=name or operator.name,
                   golden=_ReferenceByMath(derived, operator.golden, operator.schedules.FP64_GLOBAL.plan),
                   gate=_GateUnderOwnSchedules(derived, rounding_in))
