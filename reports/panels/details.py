"""Details per backend and output: summed error histograms, a row per case, and the worst elements."""
from __future__ import annotations

from accuracy.metrics import histogram_edges
from reports import data as D
from reports.panels import Context, Panel, PlotJob


def details(context: Context) -> dict:
    rows = D.details(context.idx)
    return {"details": rows, "columns": [column for _, column in D.DETAIL_COLUMNS],
            "img": {d.anchor: context.image("hist-" + D.slug(d.backend, d.output)) for d in rows}}


def _edges() -> dict:
    try:
        return histogram_edges()
    except Exception:   # noqa: BLE001 - the report still renders without histograms
        return {}


def plots(context: Context, data: dict) -> list[PlotJob]:
    edges = _edges()
    return [("histograms", (d, edges), context.out / data["img"][d.anchor]) for d in data["details"]]


PANEL = Panel("details", details, plots)
