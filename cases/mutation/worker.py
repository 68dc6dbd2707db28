"""The child process that runs mutants: one case at a time, the mutants still alive in batches of
one golden pass each, the unmutated kernel first.

It announces each kernel call (``Start``) and its end (``End``) to the parent, which holds the
clock: a call that does not end in time is the parent's to kill (``cases.mutation.judge``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cases.evaluate import evaluate_case
from cases.mutation.source import read_kernel
from cases.spec import CaseSpec
from kernels.registry import Backend

BASELINE = -1       # the unmutated kernel's index in messages


@dataclass(frozen=True)
class Start:
    index: int


@dataclass(frozen=True)
class End:
    index: int


@dataclass
class CaseResult:
    """One kernel (a mutant or the unmutated one) at one case."""
    error: str | None = None                 # raised, broke the contract or could not run here
    failed: tuple[str, ...] = ()             # outputs the gate failed
    identical: bool = False                  # bit-identical to the unmutated kernel's outputs
    ulp_from_baseline: float = 0.0           # p99 over elements of |mutant - unmutated| in BF16 ULPs, worst output
    fp64: dict[str, dict[str, float]] = field(default_factory=dict)   # output -> error against FP64


@dataclass
class CaseDone:
    case: str
    results: dict[int, CaseResult]           # BASELINE included when it ran in this pass


@dataclass
class CaseFailed:
    """The case itself could not be evaluated (inputs, goldens): no kernel is judged by it."""
    case: str
    error: str


FP64_FIELDS = ("ulp_max", "ulp_p99", "max_abs_err", "max_rel_err")


def same_bits(a, b: dict) -> bool:
    try:
        return isinstance(a, dict) and set(a) == set(b) and all(
            a[k].shape == b[k].shape and a[k].dtype == b[k].dtype
            and torch.equal(a[k].contiguous().view(torch.uint8), b[k].contiguous().view(torch.uint8)) for k in b)
    except Exception:   # noqa: BLE001 - a mutant's outputs may be anything
        return False


def p99_ulp(a, b: dict) -> float:
    """The largest, over outputs, 99th percentile of |a - b| in BF16 ULPs of b (the maximum alone is
    dominated by elements of a cancelling sum near zero)."""
    worst = 0.0
    for k in b:
        try:
            diff = (a[k].double() - b[k].double()).abs()
            spacing = torch.where(b[k].double() == 0, torch.tensor(2.0 ** -133, dtype=torch.float64),
                                  2.0 ** (torch.floor(torch.log2(b[k].double().abs())) - 7))
            ulps = (diff / spacing).nan_to_num(float("inf")).flatten()
            worst = max(worst, float(torch.quantile(ulps[:1 << 24], 0.99)))
        except Exception:   # noqa: BLE001
            return float("inf")
    return worst


class Worker:
    """Holds the kernel's mutants compiled once; ``evaluate`` judges some of them at one case."""

    def __init__(self, address: str, sources: dict[int, str], conn, batch: int):
        self.kernel = read_kernel(address)
        self.original = self.kernel.original
        self.sources, self.conn, self.batch = sources, conn, batch
        self.compiled: dict[int, object] = {}

    def _fn(self, index: int):
        if index == BASELINE:
            return self.original
        if index not in self.compiled:
            self.compiled[index] = self.kernel.compile(self.sources[index])
        return self.compiled[index]

    def _announced(self, index: int, captured: dict):
        fn, conn = self._fn(index), self.conn

        def call(**inputs):
            conn.send(Start(index))
            try:
                out = fn(**inputs)
            finally:
                conn.send(End(index))
            captured[index] = out
            return out
        call.__dict__.update(fn.__dict__)
        return call

    def evaluate(self, spec: CaseSpec, indices: list[int]):
        results: dict[int, CaseResult] = {}
        compiled = []
        for i in indices:
            try:
                self._fn(i)
                compiled.append(i)
            except Exception as exc:   # noqa: BLE001 - an edit that does not compile is the contract's
                results[i] = CaseResult(error=f"does not compile: {type(exc).__name__}: {exc}")
        order = [BASELINE] + compiled
        reference = None
        for first in range(0, len(order), self.batch):
            chunk = order[first:first + self.batch]
            captured: dict[int, object] = {}
            backends = [Backend(f"mutant{i}", self._announced(i, captured)) for i in chunk]
            outcome = evaluate_case(spec, backends, isolate=False, benchmark=None)
            if outcome.error:
                return CaseFailed(spec.id, outcome.error)
            if BASELINE in captured:
                reference = captured[BASELINE]
            for i, b in zip(chunk, backends):
                run = outcome.runs[b.name]
                result = CaseResult()
                if run.error or run.skipped:
                    result.error = (run.error or run.skipped).splitlines()[0][:300]
                else:
                    verdicts = outcome.verdicts.get(b.name, {})
                    result.failed = tuple(sorted(o for o, v in verdicts.items() if not v.passed))
                    metrics = outcome.comparison["backends"].get(b.name, {})
                    result.fp64 = {o: {f: m["fp64"][f] for f in FP64_FIELDS if f in m.get("fp64", {})}
                                   for o, m in metrics.items()}
                if reference is not None and i in captured:
                    result.identical = same_bits(captured[i], reference)
                    result.ulp_from_baseline = 0.0 if result.identical else p99_ulp(captured[i], reference)
                results[i] = result
            del captured
        return CaseDone(spec.id, results)


def serve(conn, address: str, sources: dict[int, str], batch: int) -> None:
    """The child's loop: ``(spec, indices)`` in, ``CaseDone`` or ``CaseFailed`` out; ``None`` ends it."""
    worker = Worker(address, sources, conn, batch)
    while True:
        task = conn.recv()
        if task is None:
            return
        conn.send(worker.evaluate(*task))
