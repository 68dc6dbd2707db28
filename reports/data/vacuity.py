"""Where the article's absolute gate would accept an all-zero output."""
from __future__ import annotations

from dataclasses import dataclass, field

from contract.declared import ABSENT, unless_absent
from reports.data.records import Index, metrics_of, num


@dataclass
class VacuityRow:
    output: str
    cases: int = 0
    vacuous: list = field(default_factory=list)     # [(Case, max |golden|)]
    checked: list = field(default_factory=list)     # [(Case, max |golden|)]


def vacuity(idx: Index) -> tuple[list[VacuityRow], dict[tuple[str, str], tuple[bool, float | None]]]:
    """Where the article's gate (rtol 1/128, atol 1e-4) accepts an all-zero output: every
    |golden| <= atol / (1 - rtol). Read from the gated records (``vacuous_seed_gate``, else
    ``zero_passes_seed_gate``), or from the golden records when a case has no backend record.
    Returns one row per output and the (case, output) -> (vacuous, max |golden|) table."""
    table: dict[tuple[str, str], tuple[bool, float | None]] = {}
    for (case, backend, output), rec in idx.gated.items():
        if (case, output) in table:
            continue
        m = metrics_of(rec)
        v = unless_absent(rec.vacuous_seed_gate, m.zero_passes_seed_gate)
        if v is None or v is ABSENT:
            continue
        table[(case, output)] = (bool(v), num(m.golden_max_abs))
    for (case, layer, output, ref), rec in idx.goldens.items():
        # golden records: the reference layer's magnitude; use them only where no backend record says
        if (case, output) in table or ref != "fp64":
            continue
        m = metrics_of(rec)
        if m.given("zero_passes_seed_gate"):
            table[(case, output)] = (bool(m.zero_passes_seed_gate), num(m.golden_max_abs))
    rows = []
    for output in idx.outputs:
        row = VacuityRow(output)
        for case in idx.case_list():
            if (case.id, output) not in table:
                continue
            vac, mx = table[(case.id, output)]
            row.cases += 1
            (row.vacuous if vac else row.checked).append((case, mx))
        rows.append(row)
    return rows, table
