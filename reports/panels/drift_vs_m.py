"""Drift against M, per case of the run: one figure per reduction and shape, the scale profiles as series."""
from __future__ import annotations

from reports import data as D
from reports.panels import Context, Panel, PlotJob


def tile_rows(op) -> dict[str, int | None]:
    """Each reduction's tile under the operator's default schedule (the drift figures' top axis)."""
    try:
        sched = op.schedules.default_schedule()
        return {o: sched.tile_m(op.output(o).kernel) for o in op.reduction_outputs}
    except Exception:   # noqa: BLE001 - the figures lose their tile axis, nothing else
        return {}


def drift_vs_m(context: Context) -> dict:
    by_figure: dict[tuple, list] = {}
    for p in D.drift_panels(context.idx):
        by_figure.setdefault((p.output, p.shape), []).append(p)
    figures = []
    for (output, shape), panels in by_figure.items():
        panels = [p for p in panels if any(s.points for s in p.series)]    # a panel with no point says nothing
        if panels:
            figures.append({"output": output, "shape": ", ".join(f"{d}={v}" for d, v in shape), "panels": panels,
                            "src": context.image("drift-" + D.slug(output, *(v for _, v in shape)))})
    return {"tiles": tile_rows(context.op), "figures": figures}


def _title(figure: dict) -> str:
    return f"{figure['output']} at {figure['shape']}: max |error| / rms(golden) vs M, per scale profile (max over seeds)"


def plots(context: Context, data: dict) -> list[PlotJob]:
    return [("drift", (f["panels"], _title(f), data["tiles"].get(f["output"])), context.out / f["src"])
            for f in data["figures"]]


PANEL = Panel("drift_vs_m", drift_vs_m, plots)
