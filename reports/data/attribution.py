"""Where each failure's error comes from: BF16 storage, tile order or the kernel."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from contract.records import Attribution, AttributionNonfinite
from reports.data.records import GOLDENS, Index, finite, metrics_of, num


SOURCES = ("storage", "tile_order", "kernel")


@dataclass
class AttributionRow:
    backend: str
    output: str
    cases: int = 0
    max_part: dict = field(default_factory=dict)       # source -> max over cases of its max abs error
    mean_share: dict = field(default_factory=dict)     # source -> mean over cases of part / sum of parts
    dominant: dict = field(default_factory=dict)       # source -> number of cases it dominates
    max_total_vs_fp64: float | None = None             # max over cases of the kernel's max abs error vs FP64
    nonfinite_cases: int = 0                           # cases with NaN/Inf disagreements in tile order or kernel


def attribution_split(idx: Index) -> list[AttributionRow]:
    """Per backend x output, how the kernel's error against FP64 splits into BF16 storage
    (faithful - fp64), tile order (tiled - faithful) and the kernel (kernel - tiled). Each
    part is the max abs difference of its pair; a case's shares are part / sum of the
    three parts (the triangle inequality makes their sum an upper bound of kernel - fp64)."""
    rows = []
    for backend in idx.backends:
        for output in idx.outputs:
            row = AttributionRow(backend, output)
            shares = defaultdict(list)
            for case in idx.case_list():
                rec = idx.gated.get((case.id, backend, output))
                if rec is None:
                    rec = next((idx.by_golden[k] for g in GOLDENS
                                if (k := (case.id, backend, output, g)) in idx.by_golden), None)
                att = rec.attribution if rec is not None else None
                if not isinstance(att, Attribution):
                    continue
                parts = {s: finite(getattr(att, s)) for s in SOURCES}
                if all(v is None for v in parts.values()):
                    continue
                row.cases += 1
                for s, v in parts.items():
                    if v is not None:
                        row.max_part[s] = max(row.max_part.get(s, 0.0), v)
                total = sum(v for v in parts.values() if v is not None)
                if total > 0:
                    for s in SOURCES:
                        shares[s].append((parts[s] or 0.0) / total)
                dom = att.dominant
                if dom in SOURCES:
                    row.dominant[dom] = row.dominant.get(dom, 0) + 1
                nf = att.nonfinite
                if isinstance(nf, AttributionNonfinite) and any((num(v) or 0) > 0 for v in nf.to_json().values()):
                    row.nonfinite_cases += 1
                fp = finite(metrics_of(idx.by_golden.get((case.id, backend, output, "fp64"))).max_abs_err)
                if fp is not None:
                    row.max_total_vs_fp64 = max(row.max_total_vs_fp64 or 0.0, fp)
            row.mean_share = {s: (sum(v) / len(v) if v else 0.0) for s, v in ((s, shares[s]) for s in SOURCES)}
            if row.cases:
                rows.append(row)
    return rows
