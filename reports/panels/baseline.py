"""The baseline diff: new failures, fixed ones, and records worse or better beyond noise."""
from __future__ import annotations

from reports import data as D
from reports.panels import Context, Panel


def baseline(context: Context) -> dict:
    return {"diff": context.diff, "baseline": None if context.baseline is None else str(context.baseline),
            "noise_ulp": D.NOISE_ULP_P99, "noise_abs": D.NOISE_MAX_ABS_FACTOR}


PANEL = Panel("baseline", baseline)
