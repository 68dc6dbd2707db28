"""Known failures as data: the operator's ``expectations/*.toml`` (``Operator.expectations``; SwiGLU's
in ``operators/swiglu_backward/expectations/``), strict, conditioned and bounded.

An entry names a backend (exactly, or by a pattern that only the operator's registered backend
names can match), a case-id pattern (fnmatch), an output pattern and a
golden layer, gives the measured cause, and

* ``when``: the platform facts it holds under (``runs.platform_facts``,
  measured at the start of every run), e.g. ``when = { bf16_gemm_keeps_subnormals = false }``;
  where a fact has another value the entry does not apply, and the message says so;
* ``device``: "cpu", "cuda" or "*" (default), where the inputs live;
* ``bound.<output>``: the failure's size as measured, per output, by
  ``python -m cases.expectations update RESULTS`` (never by hand):
  ``mismatches`` (elements beyond the gate), ``nonfinite`` (NaN/Inf where the
  golden disagrees) and ``err_rms`` (max |kernel - golden| over the finite
  pairs, in units of rms(golden)).

A failure is expected only on an output with a bound and only within its
allowance (``allowance`` below: the measured size plus a stated margin for
seed-to-seed variation). A failure larger than the allowance, or on an output
without a bound, fails its cell and says by how much it exceeds the entry; an
expected failure that passes fails its cell too ("remove the entry"), so the
files track the truth.
"""
from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from runs.platform_facts import FACT_VALUES
from contract.operator import Operator

REQUIRED = ("backend", "case", "output", "golden", "reason")
OPTIONAL = ("device", "when", "bound")
QUANTITIES = ("mismatch_share", "nonfinite_share", "err_rms")

# Margins for seed-to-seed variation, from two models:
# - counts (mismatches, nonfinite): each element fails independently with a small
#   probability, so the count at a case of n elements is close to Poisson with mean
#   share x n; the allowance is its 3-sigma upper bound, mean + 3 sqrt(mean) (a share of
#   0 stays 0: an output that measured no NaN allows none). One-sided false-alarm rate
#   per output ~0.1% when the measured share is the mean. Shares, not counts, so one
#   entry serves cases of every size its pattern matches.
# - size (err_rms): BF16 errors come in ULP steps, and the worst element's ULP doubles
#   when its value crosses a power of two from one seed to another; the allowance is 2x
#   (one binade). Measured: torch's flushing GEMM at M2048-K96-N200-tiny varies by 1.2x
#   in err_rms over seeds 0-2 (benchmarks/bf16_isa_emulation.py).
COUNT_SIGMAS = 3.0
SIZE_FACTOR = 2.0


def backend_matches(entry: str, backend: str, registered: tuple[str, ...] = ()) -> bool:
    """An entry names a backend exactly; a pattern (``torch-*``) matches only the operator's own
    ``registered`` names, never a user's import path: ``torch-mine:zero_dx`` is somebody's kernel
    whose failures nothing here has measured."""
    if entry == backend:
        return True
    return backend in registered and fnmatch.fnmatchcase(backend, entry)


def _count_allowance(share: float, n: int) -> float:
    mean = share * n
    return mean + COUNT_SIGMAS * math.sqrt(mean)


@dataclass(frozen=True)
class Bound:
    """The measured size of a known failure on one output: shares of the output's elements
    beyond the gate and non-finite against a finite golden, and the largest finite error in
    units of rms(golden)."""
    mismatch_share: float
    nonfinite_share: float
    err_rms: float

    def allowance(self, numel: int) -> dict[str, float]:
        """What a failure on an output of ``numel`` elements may reach (counts, and err_rms)."""
        return {"mismatch_share": _count_allowance(self.mismatch_share, numel),
                "nonfinite_share": _count_allowance(self.nonfinite_share, numel),
                "err_rms": self.err_rms * SIZE_FACTOR}


def measured_size(metrics: Mapping) -> Bound:
    """The size of one output's failure, from its gated metrics record."""
    n = max(int(metrics["numel"]), 1)
    rms = metrics.get("golden_rms")
    err = metrics.get("max_abs_err") or 0.0
    if isinstance(rms, (int, float)) and math.isfinite(rms) and rms > 0:
        err_rms = float(err) / rms
    else:   # a golden that is all zero (or non-finite): any error is infinitely many rms
        err_rms = 0.0 if not err else math.inf
    return Bound(_mismatch_count(metrics) / n, int(metrics.get("nonfinite_disagreements", 0)) / n, err_rms)


def _mismatch_count(metrics: Mapping) -> int:
    return int(metrics["mismatches"] if metrics.get("mismatches_exact", True) else metrics["mismatches_upper"])


@dataclass(frozen=True)
class Excess:
    """One quantity of a failure beyond its entry's allowance."""
    quantity: str
    value: float
    allowed: float
    measured: float

    def text(self) -> str:
        ratio = self.value / self.allowed if self.allowed else math.inf
        return (f"{self.quantity} {self.value:.4g} > allowed {self.allowed:.4g} ({ratio:.3g}x; "
                f"measured {self.measured:.4g})")


@dataclass(frozen=True)
class Expectation:
    backend: str
    case: str
    output: str
    golden: str
    reason: str
    source: str
    device: str = "*"
    when: Mapping[str, bool | str] = field(default_factory=dict)
    bounds: Mapping[str, Bound] = field(default_factory=dict)
    registered: tuple[str, ...] = ()    # the operator's registered backend names, which a pattern may match

    def matches(self, backend: str, case: str, output: str, golden: str, device: str = "cpu") -> bool:
        """Patterns only: backend, case, output, golden layer and device."""
        return (backend_matches(self.backend, backend, self.registered) and fnmatch.fnmatchcase(case, self.case)
                and fnmatch.fnmatchcase(output, self.output) and fnmatch.fnmatchcase(golden, self.golden)
                and fnmatch.fnmatchcase(device.split(":")[0], self.device))

    def holds_on(self, facts: Mapping[str, object]) -> bool:
        """Every condition of ``when`` equals the measured fact (a fact not measured fails it)."""
        return all(k in facts and facts[k] == v for k, v in self.when.items())

    def condition_text(self) -> str:
        if not self.when:
            return "every platform"
        return " and ".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in self.when.items())

    def exceeded(self, output: str, metrics: Mapping) -> list[Excess]:
        """The quantities of this failure beyond the entry's allowance for ``output``
        (counts compared as counts: the allowance of a share at this output's size)."""
        bound = self.bounds[output]
        n = int(metrics["numel"])
        allowed = bound.allowance(n)
        seen = {"mismatch_share": _mismatch_count(metrics),
                "nonfinite_share": int(metrics.get("nonfinite_disagreements", 0)),
                "err_rms": measured_size(metrics).err_rms}
        names = {"mismatch_share": "mismatched elements", "nonfinite_share": "non-finite disagreements",
                 "err_rms": "max |error| / rms(golden)"}
        recorded = {"mismatch_share": bound.mismatch_share * n, "nonfinite_share": bound.nonfinite_share * n,
                    "err_rms": bound.err_rms}
        return [Excess(names[q], seen[q], allowed[q], recorded[q]) for q in QUANTITIES if seen[q] > allowed[q] + 1e-9]


def _bound(path: Path, i: int, output: str, raw) -> Bound:
    if not isinstance(raw, Mapping) or set(raw) != set(QUANTITIES):
        raise ValueError(f"{path.name}: entry {i}: bound.{output} must give exactly {QUANTITIES} "
                         f"(written by python -m cases.expectations update)")
    return Bound(*(float(raw[q]) for q in QUANTITIES))


def parse(text: str, path: Path, registered: tuple[str, ...] = ()) -> list[Expectation]:
    entries = []
    for i, raw in enumerate(tomllib.loads(text).get("expected", [])):
        missing = [k for k in REQUIRED if not str(raw.get(k, "")).strip()]
        if missing:
            raise ValueError(f"{path.name}: entry {i} lacks {missing}; every known failure needs all of {REQUIRED}")
        unknown = set(raw) - set(REQUIRED) - set(OPTIONAL)
        if unknown:
            raise ValueError(f"{path.name}: entry {i} has unknown keys {sorted(unknown)}")
        when = dict(raw.get("when", {}))
        for fact, value in when.items():
            if fact not in FACT_VALUES or value not in FACT_VALUES[fact]:
                raise ValueError(f"{path.name}: entry {i}: when.{fact} = {value!r} is not a measured platform "
                                 f"fact and value (known: {FACT_VALUES})")
        bounds = {o: _bound(path, i, o, b) for o, b in raw.get("bound", {}).items()}
        entry = Expectation(*(str(raw[k]) for k in REQUIRED), source=f"{path.name}#{i}",
                            device=str(raw.get("device", "*")), when=when, bounds=bounds, registered=registered)
        stray = [o for o in bounds if not fnmatch.fnmatchcase(o, entry.output)]
        if stray:
            raise ValueError(f"{path.name}: entry {i}: bound for {stray} outside its output pattern {entry.output!r}")
        entries.append(entry)
    return entries


def load(operator: Operator, directory: Path | None = None) -> list[Expectation]:
    """The entries of every ``*.toml`` in the operator's expectations folder (or ``directory``;
    none for an operator without the folder)."""
    directory = operator.expectations if directory is None else directory
    registered = tuple(operator.backends)
    entries = []
    for path in sorted(directory.glob("*.toml")) if directory is not None else ():
        entries.extend(parse(path.read_text(), path, registered))
    return entries


def find(entries: list[Expectation], backend: str, case: str, output: str, golden: str,
         device: str = "cpu", facts: Mapping[str, object] | None = None) -> Expectation | None:
    """The entry that expects this output to fail here: its patterns match, its condition
    holds on ``facts`` and it has a measured bound for ``output``."""
    facts = {} if facts is None else facts
    return next((e for e in entries if e.matches(backend, case, output, golden, device)
                 and e.holds_on(facts) and output in e.bounds), None)


def not_applying(entries: list[Expectation], backend: str, case: str, output: str, golden: str,
                 device: str, facts: Mapping[str, object]) -> list[Expectation]:
    """Entries whose patterns match but whose platform condition does not hold here (for messages)."""
    return [e for e in entries if e.matches(backend, case, output, golden, device) and not e.holds_on(facts)]


@dataclass(frozen=True)
class Judgement:
    """The status of one gated output under the expectations."""
    status: str                       # pass | fail | expected_failure | unexpected_pass
    entry: Expectation | None = None
    excess: tuple[Excess, ...] = ()
    note: str | None = None           # appended to the verdict's message

    @property
    def exceeds_entry(self) -> bool:
        return bool(self.excess)


def judge(entry: Expectation | None, output: str, passed: bool, metrics: Mapping,
          inactive: list[Expectation] = ()) -> Judgement:
    """Combine the gate's verdict on one output with the entry that expects it to fail (if any)."""
    if entry is None:
        note = None
        if not passed and inactive:
            note = "\n".join(f"Known failure {e.source} does not apply here: it holds where {e.condition_text()}, "
                             f"which this platform's measured facts do not satisfy" for e in inactive)
        return Judgement("pass" if passed else "fail", note=note)
    if passed:
        return Judgement("unexpected_pass", entry)
    excess = tuple(entry.exceeded(output, metrics))
    if excess:
        note = (f"Exceeds known failure {entry.source} ({entry.condition_text()}): "
                + "; ".join(x.text() for x in excess))
        return Judgement("fail", entry, excess, note)
    return Judgement("expected_failure", entry)


def judge_output(entries: list[Expectation], backend: str, case: str, output: str, golden: str,
                 passed: bool, metrics: Mapping, *, device: str = "cpu",
                 facts: Mapping[str, object]) -> Judgement:
    """The one place a gated output's status is decided: the gate's verdict, the entry (if any)
    whose patterns, platform condition and bound cover it, and the entries that do not apply here."""
    entry = find(entries, backend, case, output, golden, device, facts)
    inactive = [] if entry else not_applying(entries, backend, case, output, golden, device, facts)
    return judge(entry, output, passed, metrics, inactive)


if __name__ == "__main__":   # python -m cases.expectations update RESULTS [--allow-widen] [--dry-run]
    import sys

    from cases.expectation_update import main as _update
    if sys.argv[1:2] != ["update"]:
        sys.exit("usage: python -m cases.expectations update RESULTS [--allow-widen] [--dry-run]")
    sys.exit(_update(sys.argv[2:]))
