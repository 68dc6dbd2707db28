"""Error attribution: how much of each kernel's error comes from BF16 storage, tile order and the kernel."""
from __future__ import annotations

from reports import data as D
from reports.panels import Context, Panel, PlotJob


def attribution(context: Context) -> dict:
    rows = D.attribution_split(context.idx)
    backends = context.idx.backends
    # a backend without attribution rows has a table heading but no figure
    img = {b: context.image("attribution-" + D.slug(b)) for b in backends if any(r.backend == b for r in rows)}
    return {"rows": rows, "backends": backends, "img": img, "sources": D.SOURCES}


def plots(context: Context, data: dict) -> list[PlotJob]:
    return [("attribution", ([r for r in data["rows"] if r.backend == b], b), context.out / src)
            for b, src in data["img"].items()]


PANEL = Panel("attribution", attribution, plots)
