"""The dual benchmark (msprobe's standard): each kernel's error over the benchmark kernel's, per output."""
from __future__ import annotations

from accuracy.dual import RATIO_LIMITS
from reports import data as D
from reports.panels import Context, Panel


def dual(context: Context) -> dict:
    return {"tables": D.dual_tables(context.idx), "limits": RATIO_LIMITS}


PANEL = Panel("dual", dual)
