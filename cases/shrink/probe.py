"""One case judged in process by the matrix's own evaluation (``cases.evaluate.evaluate_case``):
the backend in its child process with a time limit (``kernels.isolated``), the goldens and the
gate here, the absolute gate alone (no dual benchmark to run beside it)."""
from __future__ import annotations

import time
from dataclasses import dataclass

from cases.evaluate import evaluate_case
from cases.shrink.failure import Failure, failure_of, same_failure
from cases.spec import CaseSpec
from kernels.registry import Backend


@dataclass(frozen=True)
class Probe:
    spec: CaseSpec
    failure: Failure | None      # the target output's failure there, None where it passed or did not run
    problem: str | None          # why no verdict: the case or the backend errored, crashed or timed out
    seconds: float

    def reproduces(self, target: Failure) -> bool:
        return same_failure(self.failure, target)

    def describe(self, target: Failure) -> str:
        if self.problem is not None:
            return self.problem
        if self.failure is None:
            return f"passes {target.output}"
        same = "same failure" if self.reproduces(target) else "another test first"
        return f"fails {self.failure.describe()}: {same}"


def probe(spec: CaseSpec, backend: Backend, output: str, *, timeout: float) -> Probe:
    """``backend`` at ``spec``: its ``output``'s failure; the backend's call has ``timeout`` seconds."""
    start = time.perf_counter()
    outcome = evaluate_case(spec, [backend], isolate=True, cell_timeout=timeout, benchmark=None)
    seconds = time.perf_counter() - start
    run = outcome.runs.get(backend.name)
    if outcome.error:
        return Probe(spec, None, outcome.error.splitlines()[0][:300], seconds)
    if run is None or backend.name not in outcome.verdicts:
        why = (f"skipped: {run.skipped}" if run.skipped else run.error or "no result") if run is not None \
            else f"backend {backend.name!r} did not run"
        return Probe(spec, None, why.splitlines()[0][:300], seconds)
    verdict = outcome.verdicts[backend.name][output]
    metrics = outcome.comparison["backends"][backend.name][output][verdict.golden]
    return Probe(spec, failure_of(verdict, metrics), None, seconds)
