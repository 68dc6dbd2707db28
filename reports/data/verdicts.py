"""The verdict matrix: one cell per case, backend and output, and the counts per backend."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contract.declared import present, unless_absent
from contract.records import Record
from reports.data.records import Index, VERDICT_STATUSES, metrics_of, slug


@dataclass
class Cell:
    status: str               # pass | fail | expected_failure | unexpected_pass | skipped | error | missing
    vacuous: bool = False     # the article's gate would accept an all-zero output here
    atol_capped: bool = False
    golden: str | None = None
    message: str = ""
    reason: str = ""
    anchor: str = ""
    origin: str = ""          # "host H, device D" in a merged run of many machines (runs.merge)

    @property
    def css(self) -> str:
        if self.status == "pass" and self.vacuous:
            return "pass-vacuous"
        return self.status.replace("_", "-")

    @property
    def symbol(self) -> str:
        base = {"pass": "✓", "fail": "✗", "expected_failure": "x", "unexpected_pass": "!",
                "skipped": "s", "error": "E", "missing": "·"}.get(self.status, "?")
        return base + ("⚠" if self.vacuous else "")


def row_anchor(case: str, backend: str, output: str) -> str:
    return "r-" + slug(case, backend, output)


def detail_anchor(backend: str, output: str) -> str:
    return "d-" + slug(backend, output)


def origin_of(rec: Record) -> str:
    """Where a merged run's record was produced (empty for a local run's)."""
    host, device = present(rec.host), present(rec.device)
    if host is None and device is None:
        return ""
    return f"host {host}, device {device}"


def verdict_cells(idx: Index) -> dict[tuple[str, str, str], Cell]:
    """(case, backend, output) -> Cell, for every case x backend x output of the matrix."""
    cells = {}
    for case in idx.cases:
        for backend in idx.backends:
            star = idx.cell_status.get((case, backend))
            for output in idx.outputs:
                anchor = row_anchor(case, backend, output)
                rec = idx.gated.get((case, backend, output))
                if rec is not None:
                    status = str(rec.status)
                    m = metrics_of(rec)
                    vacuous = bool(unless_absent(rec.vacuous_seed_gate, m.zero_passes_seed_gate))
                    cells[(case, backend, output)] = Cell(
                        status if status in VERDICT_STATUSES else "missing", vacuous,
                        bool(unless_absent(rec.atol_capped, m.atol_capped)), str(rec.golden),
                        str(unless_absent(rec.message, "")), str(present(rec.expected_reason, "")), anchor,
                        origin_of(rec))
                elif star is not None:
                    status = str(star.status)
                    cells[(case, backend, output)] = Cell(
                        status if status in ("skipped", "error") else "error",
                        message=str(unless_absent(star.message, "")), anchor=row_anchor(case, backend, "*"),
                        origin=origin_of(star))
                elif any(k[0] == case and k[1] == backend for k in idx.gated):
                    cells[(case, backend, output)] = Cell("missing", anchor=anchor)
    return cells


def status_counts(cells: Mapping[tuple[str, str, str], Cell], backends: Sequence[str]) -> dict[str, dict[str, int]]:
    """backend -> css class -> count (plus "total")."""
    counts: dict[str, dict[str, int]] = {b: defaultdict(int) for b in backends}
    for (_, backend, _), cell in cells.items():
        counts[backend][cell.css] += 1
        counts[backend]["total"] += 1
    return {b: dict(c) for b, c in counts.items()}
