"""The dual-benchmark tables: msprobe's error ratios to the benchmark backend."""
from __future__ import annotations

from dataclasses import dataclass

from contract.declared import present, unless_absent
from contract.records import DualVerdict
from reports.data.records import Case, Index


@dataclass
class DualRow:
    case: Case
    backend: str
    benchmark: str
    ratios: dict
    ulp_share: float | None
    passed: bool
    failed: list
    message: str
    vacuous: bool = False     # an all-zero output would pass here (msprobe's absolute thresholds)


@dataclass
class DualTable:
    output: str
    rows: list[DualRow]
    missing: list[str]       # cases without a dual verdict, and why


def dual_tables(idx: Index) -> list[DualTable]:
    """Per output: every (case, backend) with its dual-benchmark ratios (``accuracy.dual``)."""
    tables = []
    for output in idx.outputs:
        rows, missing = [], []
        for case in idx.case_list():
            for backend in idx.backends:
                rec = idx.gated.get((case.id, backend, output))
                if rec is None:
                    continue
                dual = rec.dual
                if not isinstance(dual, DualVerdict):
                    if rec.dual_missing and rec.dual_missing not in missing:
                        missing.append(rec.dual_missing)
                    continue
                rows.append(DualRow(case, backend, str(present(dual.benchmark)), dict(dual.ratios or {}),
                                    present(dual.ulp_share), bool(dual.passed), list(dual.failed or []),
                                    str(unless_absent(dual.message, "")), bool(dual.vacuous)))
        if rows or missing:
            tables.append(DualTable(output, rows, missing))
    return tables
