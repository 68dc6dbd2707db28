"""The cells that have no verdict: skipped or errored, with their message."""
from __future__ import annotations

from contract.declared import unless_absent
from reports import data as D
from reports.panels import Context, Panel


def skipped(context: Context) -> list[dict]:
    idx = context.idx
    in_order = sorted(idx.cell_status.items(), key=lambda kv: (idx.cases[kv[0][0]].sort_key, kv[0][1]))
    return [{"case": idx.cases[c], "backend": b, "status": str(r.status),
             "message": str(unless_absent(r.message, "")), "anchor": D.row_anchor(c, b, "*")}
            for (c, b), r in in_order]


PANEL = Panel("skipped", skipped)
