"""Which of the gate's tests an output fails, named, and when two failures are the same.

The gate (``accuracy.gate.Verdict``) keeps one flag per test; a non-finite disagreement is not a
flag of its own but is counted among the element-wise mismatches (``accuracy.metrics``:
``mismatches = beyond tolerance + nonfinite_disagreements``), so it is read from the metrics.

Two failures are the same when they are of the same output and their first failing test, in
``TESTS`` order, is the same. Not the whole set: the aggregate tests dilute with the case's size.
A wrong dx from row 2048 on fails element-wise, the fitted scale and a row window at M=4097
(2049 of 4097 rows off by 5%: beta 0.025, allowed 1.7e-4), but at M=2049 not the fitted scale
(one row in 2049: beta 3.6e-5, allowed 2.0e-4): the bug is the same, the set is not. The order
is most specific first: a NaN where the reference has a number is also an element-wise mismatch,
and a shrink that kept only the mismatch would have lost the NaN.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from accuracy.gate import Verdict

NON_FINITE = "non-finite"
ELEMENT_WISE = "element-wise"
TESTS = (NON_FINITE, ELEMENT_WISE, "fitted scale", "rounding direction", "localized window", "excess variance",
         "own upstream")


@dataclass(frozen=True)
class Failure:
    """An output the gate failed and every test it failed there, in ``TESTS`` order."""
    output: str
    tests: tuple[str, ...]

    @property
    def first(self) -> str:
        """The test that names the failure (``same_failure``)."""
        return self.tests[0]

    def describe(self) -> str:
        others = [t for t in self.tests if t != self.first]
        return f"{self.output} by {self.first}" + (f" (also {', '.join(others)})" if others else "")


def failure_of(verdict: Verdict, metrics: Mapping) -> Failure | None:
    """The failure of one gated output (``metrics``: its gated golden's), None where it passed."""
    if verdict.passed:
        return None
    failed = {NON_FINITE: bool(metrics.get("nonfinite_disagreements")),
              ELEMENT_WISE: not verdict.elementwise_passed,
              "fitted scale": verdict.scale_passed is False,
              "rounding direction": verdict.direction_passed is False,
              "localized window": verdict.localized_passed is False,
              "excess variance": verdict.variance_passed is False,
              "own upstream": verdict.own_passed is False}
    return Failure(verdict.output, tuple(t for t in TESTS if failed[t]))


def same_failure(a: Failure | None, b: Failure | None) -> bool:
    return a is not None and b is not None and a.output == b.output and a.first == b.first
