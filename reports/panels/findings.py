"""The findings at the top of the page, one line each, from this run's records and its drift study:
how each backend fares at the operator's acceptance case (a reference schedule's emulation, served
by the golden pass, named as one), where the schedules' tiled sums cross the gate, and where the
acceptance criterion's own gate would pass an all-zero output. The terminal summary prints the
same lines (``runs.summary``); this block puts them on the report's first screen."""
from __future__ import annotations

import operators
from reports.panels import Context, Panel
from reports.panels.drift_study import drift_study
from contract.records import typed
from runs.summary import acceptance_outputs, drift_line, emulations, vacuity_line, verdict_parts

# a skipped cell's reason is a paragraph; the block keeps its first words, the skipped cells' table all of it
REASON_CHARS = 160


def _short(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS].rsplit(" ", 1)[0] + " ..."


def _command(context: Context) -> str:
    """The command whose run holds the operator's acceptance case (README's main command for the default)."""
    key = operators.key(context.op)
    return "pytest -n auto cases/" + ("" if key == operators.DEFAULT else f" --operator {key}")


def findings(context: Context) -> dict:
    records = typed(context.results.get("records") or [])      # once, for every line below
    case_id = context.op.acceptance_case_id
    rows = []
    if case_id is not None:
        served = emulations(records, case_id)
        for backend, by_status in acceptance_outputs(records, case_id, context.run_info["missing"]).items():
            rows.append({"backend": backend, "served": served.get(backend),
                         "parts": [{"status": s.replace("_", "-"), "label": label, "names": [_short(n) for n in names]}
                                   for s, label, names in verdict_parts(by_status)]})
    study = drift_study(context)
    return {"case": case_id, "rows": rows, "command": _command(context),
            "drift": drift_line(study["study"]) if study else None,
            "drift_own": bool(study and study["own"]), "drift_source": study["source"] if study else None,
            "drift_stale": study["stale"] if study else None, "vacuity": vacuity_line(records, case_id)}


PANEL = Panel("findings", findings)
