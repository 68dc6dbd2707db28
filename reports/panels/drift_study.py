"""The drift study at the head of the drift section: its figures (drawn from its JSON) and its crossing
table, when there is a study of the page's operator; one of other code than the run's is named so."""
from __future__ import annotations

from pathlib import Path

import operators
from reports.drift_study_figures import StudyUnreadable, figure_names, load_study
from reports.panels import Context, Panel, PlotJob
from reports.plots import study_shape_label
from reports.study_code import code_mismatch, of_run_code_first


def _candidates(context: Context) -> list[Path]:
    """The study named, else the page's study folders that hold one."""
    if context.drift_study is not None:
        return [Path(context.drift_study)]
    return [f for f in context.study_folders if (f / "drift.json").is_file()]


def drift_study(context: Context) -> dict | None:
    """Loaded once a page (``Context.once``: the findings show it too)."""
    return context.once("drift_study", lambda: _drift_study(context))


def _drift_study(context: Context) -> dict | None:
    """None without a study of the operator; a study of another operator is left out, or refused
    where ``context.study_strict`` (one asked for by name on a page of one operator). Of the
    studies found, the first that ran the run's code (``reports.study_code``); where none did, the
    first, marked with why it may not be the run's."""
    mine = operators.key(context.op.one_head)
    found = []
    for folder in _candidates(context):
        try:
            study = load_study(folder)
        except StudyUnreadable as exc:
            raise FileNotFoundError(str(exc)) from None
        owner = study["axes"]["operator"]
        if owner != mine:
            if context.study_strict:
                raise FileNotFoundError(f"{folder}: a drift study of operator {owner!r}, not of {mine!r}")
            continue
        found.append((folder, study, code_mismatch(study, context.results)))
    if not found:
        return None
    folder, study, stale = of_run_code_first(found)
    left_out = [{"source": str(f), "why": why} for f, _, why in found if why is not None and f != folder]
    figures = [{"family": fam, "src": context.image(f"study-{fam}")} for fam in figure_names(study)]
    cfg = study["config"]
    return {"figures": figures, "table": study["table"], "config": cfg, "shape": study_shape_label(study, cfg["shape"]),
            "wall_s": study.get("wall_s"), "source": str(folder), "shape_check": study.get("shape_check"),
            "run": study.get("run"), "own": stale is None and study.get("run") is not None and study.get("run") == context.results.get("run"),
            "study": study, "stale": stale, "left_out": left_out}


def plots(context: Context, data: dict | None) -> list[PlotJob]:
    if data is None:
        return []
    return [("drift_study", (data["study"], f["family"]), context.out / f["src"]) for f in data["figures"]]


PANEL = Panel("drift_study", drift_study, plots)
