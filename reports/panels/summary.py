"""The summary: what the run lacks, the verdict counts per backend, and the baseline diff in one line."""
from __future__ import annotations

from reports.panels import Context, Panel


def summary(context: Context) -> dict:
    return {"run_info": context.run_info, "backends": list(context.counts), "counts": context.counts,
            "diff": context.diff}


PANEL = Panel("summary", summary)
