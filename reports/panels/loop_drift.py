"""A row-local loop's drift against its number of blocks (attention's online softmax over key
blocks, ``cases.loop_drift``), when the run made one for the page's operator (``--report-dir``
with ``--drift-seeds``: ``RUN/drift/<operator>/loop_drift.json``) or the report's ``drift/`` holds one."""
from __future__ import annotations

import operators
from reports.drift_study_figures import load_loop_study
from reports.panels import Context, Panel, PlotJob
from reports.study_code import code_mismatch, of_run_code_first


def loop_drift(context: Context) -> dict | None:
    """The first study of the page's operator that ran the run's code (``reports.study_code``);
    where none did, the first, marked with why it may not be the run's."""
    found = []
    for folder in context.study_folders:
        study = load_loop_study(folder)
        if study is not None and study["operator"] == operators.key(context.op.one_head):
            found.append((folder, study, code_mismatch(study, context.results)))
    if not found:
        return None
    folder, study, stale = of_run_code_first(found)
    return {"study": study, "src": context.image("loop-drift"), "table": study["table"],
            "source": str(folder), "block": study["block"], "seeds": study["seeds"],
            "queries": study["queries"], "head_dim": study["head_dim"], "wall_s": study.get("wall_s"),
            "stale": stale}


def plots(context: Context, data: dict | None) -> list[PlotJob]:
    if data is None:
        return []
    return [("loop_drift", (data["study"],), context.out / data["src"])]


PANEL = Panel("loop_drift", loop_drift, plots)
