"""A drift study's figures from its JSON alone (``python -m cases.drift_study`` writes it with its
axes and crossing table): one PNG per reduction family (``reports.plots.drift_study``)."""
from __future__ import annotations

import json
from pathlib import Path

from reports import plots

REQUIRED = ("config", "axes", "summary", "table")


class StudyUnreadable(ValueError):
    """A drift.json that is missing, not JSON, or written before the study recorded its axes."""


def load_study(folder) -> dict:
    path = Path(folder) / "drift.json"
    try:
        study = json.loads(path.read_text())
    except FileNotFoundError:
        raise StudyUnreadable(f"no drift study at {folder} (expected {path}; make one with "
                              f"python -m cases.drift_study -o {folder})") from None
    except ValueError as exc:
        raise StudyUnreadable(f"{path}: not JSON ({exc})") from None
    missing = [k for k in REQUIRED if k not in study]
    if missing:
        raise StudyUnreadable(f"{path}: a drift study without {', '.join(missing)} (written before the study "
                              f"recorded them); run python -m cases.drift_study -o {folder} again")
    return study


def figure_names(study: dict) -> dict[str, str]:
    """One PNG per reduction family."""
    return {fam: f"drift-{fam}.png" for fam in study["axes"]["families"]}


LOOP_STUDY = "loop_drift.json"
LOOP_FIGURE = "loop-drift.png"


def load_loop_study(folder) -> dict | None:
    """A row-local loop's drift study (``cases.loop_drift``) in ``folder``, or None."""
    path = Path(folder) / LOOP_STUDY
    if not path.is_file():
        return None
    try:
        study = json.loads(path.read_text())
    except ValueError as exc:
        raise StudyUnreadable(f"{path}: not JSON ({exc})") from None
    if "summary" not in study or "table" not in study:
        raise StudyUnreadable(f"{path}: a loop drift study without its summary and table")
    return study


def draw_loop(study: dict, out) -> Path:
    path = Path(out) / LOOP_FIGURE
    plots.loop_drift(study, path)
    return path


def draw(study: dict, out) -> dict[str, Path]:
    """Every family's figure in ``out``; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for fam, name in figure_names(study).items():
        paths[fam] = out / name
        plots.drift_study(study, fam, paths[fam])
    return paths
