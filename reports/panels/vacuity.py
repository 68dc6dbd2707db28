"""Gate vacuity: where the article's acceptance gate would accept an all-zero output."""
from __future__ import annotations

from reports import data as D
from reports.panels import Context, Panel, PlotJob


def vacuity(context: Context) -> dict:
    rows, _ = D.vacuity(context.idx)
    # no case at all: nothing to plot
    img = context.image("vacuity") if any(r.cases for r in rows) else None
    return {"rows": rows, "img": img, "rtol": D.ACCEPTANCE_RTOL, "atol": D.ACCEPTANCE_ATOL}


def plots(context: Context, data: dict) -> list[PlotJob]:
    return [] if data["img"] is None else [("vacuity", (data["rows"],), context.out / data["img"])]


PANEL = Panel("vacuity", vacuity, plots)
