"""The findings at the top of the page, one line each, from this run's records and its drift study:
how each backend fares at the operator's acceptance case (the reference schedules' emulations beside
the kernels), where the schedules' tiled sums cross the gate, and where the acceptance criterion's
own gate would pass an all-zero output. The terminal summary prints the same lines
(``runs.summary``); this block puts them on the report's first screen."""
from __future__ import annotations

from runs.summary import acceptance_outputs, drift_line, vacuity_line, verdict_parts
from reports.panels import Context, Panel
from reports.panels.drift_study import drift_study


# a skipped cell's reason is a paragraph; the block keeps its first words, the skipped cells' table all of it
REASON_CHARS = 160


def _short(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS].rsplit(" ", 1)[0] + " ..."


def findings(context: Context) -> dict:
    records = context.results.get("records") or []
    op = context.op
    case_id = op.acceptance_case_id
    emulated = set(op.acceptance_backends)
    rows = []
    if case_id is not None:
        for backend, by_status in acceptance_outputs(records, case_id).items():
            rows.append({"backend": backend, "emulated": backend in emulated,
                         "parts": [{"status": s.replace("_", "-"), "label": label, "names": [_short(n) for n in names]}
                                   for s, label, names in verdict_parts(by_status)]})
    study = drift_study(context)
    return {"case": case_id, "rows": rows, "drift": drift_line(study["study"]) if study else None,
            "drift_stale": study["stale"] if study else None,
            "vacuity": vacuity_line(records)}


PANEL = Panel("findings", findings)
