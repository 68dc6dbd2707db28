"""The notes: what the goldens and the ULP distance are, and the render's timings."""
from __future__ import annotations

from reports.panels import Context, Panel


def notes(context: Context) -> None:
    """Nothing of its own: the block is fixed text and the page's ``timings``, which are complete only
    once every panel's data and plots are made."""


PANEL = Panel("notes", notes)
