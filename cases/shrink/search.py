"""The order a failing case is shrunk in, one evaluation at a time, under a time budget.

1. M, the other sizes kept: the operator's M edges below the failing M, smallest first (a failure
   need not be monotone in M, and a bug in a tail shows at an edge, 2049 or 65537, that a
   bisection can step over), then a bisection between 1 and the smallest M found failing, its
   lower end raised to the largest edge below that M that did not fail (below a passing M a
   monotone failure has nothing to find: bisecting from 1 before trying the edges took 21
   evaluations instead of 11 for a dx wrong from row 2048 at M=4097).
2. Each other dimension in the operator's order (SwiGLU: K, then N): the values its declared
   shapes give that dimension below the failing one, smallest first.
3. The scale profile: the simplest, ``unit``, then ``seed``; the failing one where neither fails.
4. The seed: 0.

A candidate is taken when it fails the same output by the same first test (``failure``); each
evaluation's backend call has ``case_timeout`` seconds, or what is left of the budget when less.
When the budget is spent, the search stops at the smallest case it found failing so far.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from typing import TextIO

from cases.shrink.cell import FailingCell
from cases.shrink.probe import Probe, probe
from cases.spec import CaseSpec
from kernels.registry import Backend

SIMPLEST_SCALES = ("unit", "seed")


class BudgetSpent(Exception):
    """No time left for another evaluation."""


@dataclass(frozen=True)
class Shrunk:
    cell: FailingCell
    original: Probe              # the failing cell's case, judged here first
    smallest: CaseSpec           # the smallest case found failing the same way (the original's where none)
    verified: Probe | None       # the smallest case judged once more at the end (None: it is the original)
    evaluations: int             # cases judged, the re-verification included
    seconds: float
    cut: bool                    # the budget ran out before the search ended

    @property
    def reproduced(self) -> bool:
        return self.original.reproduces(self.cell.failure)

    @property
    def smaller(self) -> bool:
        return self.smallest != self.cell.spec


class Search:
    """The evaluations made so far (each case once) and the smallest failing case among them."""

    def __init__(self, cell: FailingCell, backend: Backend, *, budget: float, case_timeout: float,
                 stream: TextIO | None = None):
        self.cell, self.backend = cell, backend
        self.stream = sys.stderr if stream is None else stream     # read when called: a redirected stderr too
        self.budget, self.case_timeout = budget, case_timeout
        self.start = time.perf_counter()
        self.probes: dict[str, Probe] = {}
        self.evaluations = 0
        self.best = cell.spec

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def evaluate(self, spec: CaseSpec, *, timeout: float) -> Probe:
        """``spec`` judged now (never from what was judged before), its line on the progress stream."""
        result = probe(spec, self.backend, self.cell.failure.output, timeout=timeout)
        self.evaluations += 1
        print(f"step {self.evaluations}, {spec.id}, {result.describe(self.cell.failure)}, {result.seconds:.1f} s "
              f"(elapsed {self.elapsed():.0f} s)", file=self.stream, flush=True)
        return result

    def fails(self, spec: CaseSpec) -> bool:
        """Whether ``spec`` fails the cell's way (judged once per case); a case that does becomes the best."""
        if spec.id not in self.probes:
            left = self.budget - self.elapsed()
            if left <= 0:
                raise BudgetSpent
            self.probes[spec.id] = self.evaluate(spec, timeout=min(self.case_timeout, left))
        if self.probes[spec.id].reproduces(self.cell.failure):
            self.best = spec
            return True
        return False


def with_size(spec: CaseSpec, axis: int, value: int) -> CaseSpec:
    return replace(spec, sizes=spec.sizes[:axis] + (value,) + spec.sizes[axis + 1:])


def shrink_m(search: Search, spec: CaseSpec) -> CaseSpec:
    passing, failing = 0, spec.sizes[0]        # M=0 is no case: the bisection's lower end, never judged
    for edge in sorted(e for e in spec.declaration.m_edges if e < failing):
        if search.fails(with_size(spec, 0, edge)):
            failing = edge
            break
        passing = edge
    while failing - passing > 1:               # a failing midpoint becomes the upper end
        middle = (passing + failing) // 2
        if search.fails(with_size(spec, 0, middle)):
            failing = middle
        else:
            passing = middle
    return with_size(spec, 0, failing)


def shrink_other_dims(search: Search, spec: CaseSpec) -> CaseSpec:
    shapes = spec.declaration.shapes     # the sizes of the dimensions after M
    for axis in range(1, len(spec.sizes)):
        for value in sorted({shape[axis - 1] for shape in shapes if shape[axis - 1] < spec.sizes[axis]}):
            if search.fails(with_size(spec, axis, value)):
                spec = with_size(spec, axis, value)
                break
    return spec


def shrink_scale(search: Search, spec: CaseSpec) -> CaseSpec:
    for scale in SIMPLEST_SCALES:
        if scale == spec.scale:
            break
        if scale in spec.declaration.scales and search.fails(replace(spec, scale=scale)):
            return replace(spec, scale=scale)
    return spec


def shrink_seed(search: Search, spec: CaseSpec) -> CaseSpec:
    if spec.seed != 0 and search.fails(replace(spec, seed=0)):
        return replace(spec, seed=0)
    return spec


STAGES = (shrink_m, shrink_other_dims, shrink_scale, shrink_seed)


def shrink(cell: FailingCell, backend: Backend, *, budget: float, case_timeout: float,
           stream: TextIO | None = None) -> Shrunk:
    """The smallest case at which ``backend`` fails ``cell``'s output by the same first test."""
    search = Search(cell, backend, budget=budget, case_timeout=case_timeout, stream=stream)
    original = search.evaluate(cell.spec, timeout=min(case_timeout, budget))
    search.probes[cell.spec.id] = original
    if not original.reproduces(cell.failure):
        return Shrunk(cell, original, cell.spec, None, search.evaluations, search.elapsed(), False)
    cut = False
    spec = cell.spec
    try:
        for stage in STAGES:
            spec = stage(search, spec)
    except BudgetSpent:
        cut = True
    verified = None
    if search.best != cell.spec:
        verified = search.evaluate(search.best, timeout=case_timeout)
    return Shrunk(cell, original, search.best, verified, search.evaluations, search.elapsed(), cut)
