"""The dual-benchmark tables: msprobe's error ratios to the benchmark backend."""
from __future__ import annotations

from dataclasses import dataclass

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
                dual = rec.get("dual")
                if not dual:
                    if rec.get("dual_missing") and rec["dual_missing"] not in missing:
                        missing.append(rec["dual_missing"])
                    continue
                rows.append(DualRow(case, backend, str(dual.get("benchmark")), dict(dual.get("ratios") or {}),
                                    dual.get("ulp_share"), bool(dual.get("passed")), list(dual.get("failed") or []),
                                    str(dual.get("message", "")), bool(dual.get("vacuous"))))
        if rows or missing:
            tables.append(DualTable(output, rows, missing))
    return tables
