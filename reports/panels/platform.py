"""The platform: the run manifest that produced the verdicts, and where the known failures live."""
from __future__ import annotations

from pathlib import Path

from reports.panels import Context, Panel

PROJECT = Path(__file__).resolve().parents[2]


def expectations_dir(op) -> str | None:
    """Where the known failures of the operator live, relative to the project."""
    folder = op.expectations
    if folder is None:
        return None
    try:
        return str(Path(folder).resolve().relative_to(PROJECT)) + "/"
    except ValueError:      # an operator package outside the project
        return str(folder) + "/"


def platform(context: Context) -> dict:
    return {"platform": context.platform, "expectations_dir": expectations_dir(context.op)}


PANEL = Panel("platform", platform)
