"""The drift study at the head of the drift section: its figures (drawn from its JSON) and its crossing
table, when there is a study of the page's operator."""
from __future__ import annotations

from pathlib import Path

import operators
from reports.drift_study_figures import StudyUnreadable, figure_names, load_study
from reports.panels import Context, Panel, PlotJob
from reports.plots import study_shape_label
from runs.results import DRIFT_STUDIES


def _study_folder(context: Context) -> Path:
    """The study named, else ``OUT/drift``, else the run's own (made beside its cells for its report,
    ``RUN/drift/<operator>``)."""
    if context.drift_study is not None:
        return Path(context.drift_study)
    folder = context.out / "drift"
    results_file = context.results.get("source")
    if not (folder / "drift.json").is_file() and results_file:
        folder = Path(results_file).parent / DRIFT_STUDIES / operators.key(context.op.one_head)
    return folder


def drift_study(context: Context) -> dict | None:
    """None without a study of the operator; a study of another operator is left out, or refused
    where ``context.study_strict`` (one asked for by name on a page of one operator)."""
    folder = _study_folder(context)
    if context.drift_study is None and not (folder / "drift.json").is_file():
        return None
    try:
        study = load_study(folder)
    except StudyUnreadable as exc:
        raise FileNotFoundError(str(exc)) from None
    owner, mine = study["axes"]["operator"], operators.key(context.op.one_head)
    if owner != mine:
        if context.study_strict:
            raise FileNotFoundError(f"{folder}: a drift study of operator {owner!r}, not of {mine!r}")
        return None
    figures = [{"family": fam, "src": context.image(f"study-{fam}")} for fam in figure_names(study)]
    cfg = study["config"]
    return {"figures": figures, "table": study["table"], "config": cfg, "shape": study_shape_label(study, cfg["shape"]),
            "wall_s": study.get("wall_s"), "source": str(folder), "shape_check": study.get("shape_check"),
            "run": study.get("run"), "study": study}


def plots(context: Context, data: dict | None) -> list[PlotJob]:
    if data is None:
        return []
    return [("drift_study", (data["study"], f["family"]), context.out / f["src"]) for f in data["figures"]]


PANEL = Panel("drift_study", drift_study, plots)
