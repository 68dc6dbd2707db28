"""The failing cell of a run: its case, backend, operator and the failure it is shrunk for.

The failure is the gate's verdict rebuilt from the cell's records (``accuracy.gate.gated_verdicts``
over each output's metrics against every golden, as the run computed them), so the tests it names
are the run's own, not a re-reading of its message.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import operators
from accuracy.gate import gated_verdicts
from cases.shrink.failure import Failure, failure_of
from cases.spec import FILE_SCALE_PREFIX, CaseSpec
from contract.operator import Operator
from contract.records import GOLDEN_PREFIX, parse
from runs.results import ResultsNotFound, from_json_number, load_results


class CellError(ValueError):
    """A RESULTS or CELL that names no cell that failed the gate: exit 2, one line."""


@dataclass(frozen=True)
class FailingCell:
    spec: CaseSpec
    backend: str                # the name its records carry (a registered name or package.module:callable)
    failure: Failure            # the output it is shrunk for, as the run's gate failed it
    other_failures: tuple[Failure, ...] = ()    # the cell's other failing outputs

    @property
    def id(self) -> str:
        return f"{self.spec.id}:{self.backend}"


# the gated records' statuses of an output the gate failed (a known failure's too: its numbers failed)
GATE_FAILED = ("fail", "expected_failure")
# a cell's one record where it did not run to a verdict, and how that reads
NOT_RUN = {"error": "raised an error", "crashed": "crashed", "timed_out": "timed out", "skipped": "was skipped"}


def split_cell(text: str) -> tuple[str, str | None]:
    """``CASE_ID:BACKEND`` or ``CASE_ID`` (a case id has no ``:``; a backend path may have one)."""
    case, sep, backend = text.partition(":")
    if parse(case) is None or (sep and not backend):
        raise CellError(f"cell {text!r}: expected CASE_ID:BACKEND or CASE_ID, e.g. M4097-K96-N200-seed-s0:pypto")
    return case, backend or None


def _numbers(value):
    """A record's metrics with the strict-JSON spellings of non-finite floats ("nan", "inf") read back."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if value in ("nan", "inf", "-inf"):
        return from_json_number(value)
    return value


def _operator_key(results: Mapping, case: str) -> str:
    """The operator the run judged ``case`` as: its manifest's, or the default for a run without one."""
    selection = (results.get("manifest") or {}).get("selection") or {}
    per_case = selection.get("case_operators") or {}
    if case in per_case:
        return per_case[case]
    named = selection.get("operator", operators.DEFAULT)
    return named if isinstance(named, str) else operators.DEFAULT


def _failures(operator: Operator, case: str, backend: str, records: Sequence[Mapping]) -> list[Failure]:
    """The cell's failing outputs, in the operator's output order, from its verdicts rebuilt."""
    metrics: dict[str, dict[str, dict]] = {}
    attribution: dict[str, dict] = {}
    for r in records:
        metrics.setdefault(r["output"], {})[r["golden"]] = _numbers(r.get("metrics") or {})
        if r.get("attribution") is not None:
            attribution[r["output"]] = _numbers(r["attribution"])
    failed = [r["output"] for r in records if r.get("gated") and
              r.get("absolute_status", r["status"]) in GATE_FAILED]
    if not failed or set(metrics) != set(operator.output_names):
        return []
    verdicts = gated_verdicts(operator, metrics, case=case, backend=backend,
                              attribution=attribution if set(attribution) == set(metrics) else None)
    return [f for o in operator.output_names if o in failed
            for f in [failure_of(verdicts[o], metrics[o][verdicts[o].golden])] if f is not None]


def failing_cell(results_path: str | os.PathLike, cell: str, output: str | None = None) -> FailingCell:
    """The cell ``cell`` of the run at ``results_path``, which must have failed the gate (``output``:
    the failing output to shrink for; default its first in the operator's order)."""
    case, backend = split_cell(cell)
    try:
        results = load_results(results_path)
    except ResultsNotFound as exc:
        raise CellError(f"RESULTS {results_path}: {exc}") from None
    records = [r for r in results["records"] if r.get("case") == case
               and not str(r.get("backend", "")).startswith(GOLDEN_PREFIX)]
    by_backend: dict[str, list[dict]] = {}
    for r in records:
        by_backend.setdefault(r["backend"], []).append(r)
    key = _operator_key(results, case)
    try:
        operator = operators.get(key)
    except operators.OperatorNotFound as exc:
        raise CellError(f"cell {cell!r}: {exc}") from None
    failing = {b: f for b, rs in by_backend.items() for f in [_failures(operator, case, b, rs)] if f}
    if backend is None:
        if len(failing) > 1:
            raise CellError(f"case {case} failed for several backends ({', '.join(sorted(failing))}) in "
                            f"{results['source']}: name one, e.g. {case}:{sorted(failing)[0]}")
        if not failing:
            raise CellError(_not_failed(case, None, by_backend, results["source"]))
        backend = next(iter(failing))
    if backend not in failing:
        raise CellError(_not_failed(case, backend, by_backend, results["source"]))
    sizes, scale, seed = parse(case)
    if scale.startswith(FILE_SCALE_PREFIX):
        raise CellError(f"cell {case}:{backend}: its inputs are a file (--inputs), not drawn from the case id; "
                        f"only a generated case can be shrunk")
    if list(sizes) != list(operator.dims):
        raise CellError(f"cell {case}:{backend}: its dimensions {', '.join(sizes)} are not those of operator "
                        f"{operator.name!r} ({', '.join(operator.dims)})")
    failures = failing[backend]
    chosen = failures[0] if output is None else next((f for f in failures if f.output == output), None)
    if chosen is None:
        raise CellError(f"cell {case}:{backend}: output {output!r} did not fail the gate there (failing: "
                        f"{', '.join(f.output for f in failures)})")
    spec = CaseSpec(*sizes.values(), scale, seed, operator=key)
    return FailingCell(spec, backend, chosen, tuple(f for f in failures if f is not chosen))


def _not_failed(case: str, backend: str | None, by_backend: Mapping[str, list], source: str) -> str:
    """Why a cell is not one to shrink, in one line."""
    if not by_backend:
        return f"unknown cell: {source} has no record of case {case}"
    if backend is not None and backend not in by_backend:
        return (f"unknown cell: {source} has no record of backend {backend!r} at case {case} "
                f"(backends there: {', '.join(sorted(by_backend))})")
    names = [backend] if backend is not None else sorted(by_backend)
    for name in names:
        not_run = [r for r in by_backend[name] if r.get("output") == "*" and r.get("status") in NOT_RUN]
        if not_run and backend is not None:
            first = str(not_run[0].get("message") or "").splitlines()[:1]
            return (f"cell {case}:{name} did not fail the gate: it {NOT_RUN[not_run[0]['status']]}"
                    f"{': ' + first[0][:200] if first else ''}; only a gate failure can be shrunk")
    what = f"cell {case}:{backend}" if backend is not None else f"case {case}"
    return f"{what} did not fail the gate in {source}: nothing to shrink"
