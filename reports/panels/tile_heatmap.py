"""Where the drift accumulates, tile by tile: the default schedule's per-tile drift at one case, as the
golden pass recorded it (``reports.tile_drift``; nothing is recomputed)."""
from __future__ import annotations

import time

from reports import plots as P
from reports import tile_drift
from reports.panels import Context, Panel


def tile_heatmap(context: Context) -> dict:
    """``td``: the drift (None without one), ``why``: which case and why it, or why there is none."""
    td, why, img = None, "", None
    if not context.heatmap:
        return {"td": td, "why": why, "img": img}
    try:
        td, why = tile_drift.from_records(context.idx, context.op.schedules.default_schedule().name, context.op)
        if td is not None:
            # drawn here, not in the page's pool: a failure to draw is said in this panel, and the page still renders
            t0 = time.perf_counter()
            src = context.image("tile-drift-heatmap")
            P.heatmap(td, context.out / src)
            img = src
            context.timings["heatmap plot"] = time.perf_counter() - t0
    except Exception as exc:   # noqa: BLE001 - the rest of the page is still worth having
        td, why = None, f"the tile drift heatmap failed: {type(exc).__name__}: {exc}"
    return {"td": td, "why": why, "img": img}


PANEL = Panel("tile_heatmap", tile_heatmap)
