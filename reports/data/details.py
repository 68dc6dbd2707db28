"""Per-output details: each backend's worst elements, ULP histograms and metrics per golden."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from contract.declared import Declared, unless_absent
from contract.metric_table import Column, detail_columns
from contract.records import Metrics
from reports.data.records import Case, FAILING, GOLDENS, Index, metrics_of, num
from reports.data.verdicts import detail_anchor, row_anchor


# the detail table's metric columns in their order, each with the path of the key it shows
DETAIL_COLUMNS = detail_columns()


def _detail_values(m: Metrics) -> dict:
    """The detail table's numbers of one record, by key: the metrics its columns show and their
    bands (the fitted scale and its allowed band, where the gate made them)."""
    values = {}
    for path, column in DETAIL_COLUMNS:
        record = m
        for key in path[:-1]:
            nested = getattr(record, key)
            record = nested if isinstance(nested, Declared) else type(record).NESTED[key]()
        for key in (path[-1], column.band):
            if key is not None:
                values[key] = num(getattr(record, key))
    return values


@dataclass(frozen=True)
class DetailCell:
    """One metric column of a case's row: its value, the band shown beside it, and whether it is flagged."""
    column: Column
    value: float | None
    band: float | None = None

    @property
    def bad(self) -> bool:
        c = self.column
        if c.band is not None:
            return self.value is not None and self.band is not None and abs(self.value) > self.band
        return c.bad_above is not None and (self.value or 0) > c.bad_above


@dataclass
class DetailRow:
    case: Case
    status: str
    anchor: str
    golden: str
    values: dict                      # metric -> float | None (gated golden)
    fp64: dict                        # the same metrics vs FP64
    worst: list                       # worst elements of the gated record
    message: str = ""

    @property
    def cells(self) -> list[DetailCell]:
        """The row's metric columns, in the table's order."""
        out = []
        for path, column in DETAIL_COLUMNS:
            values = self.fp64 if column.golden == "fp64" else self.values
            out.append(DetailCell(column, values.get(path[-1]), values.get(column.band) if column.band else None))
        return out


@dataclass
class Detail:
    backend: str
    output: str
    anchor: str
    rows: list[DetailRow] = field(default_factory=list)
    hist: dict = field(default_factory=dict)    # golden -> {"ulp": counts, "log10_abs_err": counts, "exact": n}

    @property
    def worst_rows(self) -> list[DetailRow]:
        """Failing rows first, then the largest ULP distance: where to look first."""
        def key(r):
            v = r.values.get("ulp_max")
            return (r.status not in FAILING, -(v if v is not None and not math.isnan(v) else math.inf))
        return sorted((r for r in self.rows if r.worst), key=key)


def _add(acc: list | None, counts) -> list | None:
    if not isinstance(counts, list) or not all(isinstance(c, (int, float)) for c in counts):
        return acc
    if acc is None:
        return [int(c) for c in counts]
    if len(acc) != len(counts):
        return acc           # a record from another histogram layout: not mixable
    return [a + int(c) for a, c in zip(acc, counts)]


def details(idx: Index) -> list[Detail]:
    out = []
    for backend in idx.backends:
        for output in idx.outputs:
            d = Detail(backend, output, detail_anchor(backend, output))
            for case in idx.case_list():
                rec = idx.gated.get((case.id, backend, output))
                hist_recs = {g: idx.by_golden.get((case.id, backend, output, g)) for g in GOLDENS}
                for g, hr in hist_recs.items():
                    if hr is None:
                        continue
                    m = metrics_of(hr)
                    h = d.hist.setdefault(g, {"ulp": None, "log10_abs_err": None, "exact": 0, "cases": 0})
                    h["ulp"] = _add(h["ulp"], m.ulp_hist)
                    h["log10_abs_err"] = _add(h["log10_abs_err"], m.log10_abs_err_hist)
                    h["exact"] += int(num(m.exact_elements) or 0)
                    h["cases"] += 1
                if rec is None:
                    continue
                m = metrics_of(rec)
                fp = metrics_of(hist_recs["fp64"])
                worst = [w for w in (m.worst or []) if isinstance(w, Mapping)]
                d.rows.append(DetailRow(
                    case, str(rec.status), row_anchor(case.id, backend, output), str(rec.golden),
                    _detail_values(m), _detail_values(fp), worst, str(unless_absent(rec.message, ""))))
            if d.rows or d.hist:
                out.append(d)
    return out
