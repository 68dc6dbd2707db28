"""Error reports: the merged results rendered into one self-contained HTML page with PNG plots.

    from reports import render
    render("results", "report")                      # -> Path("report/index.html")
    render("results", "report", baseline="results-prev")

or ``python -m reports RESULTS -o OUT [--baseline PREV]``. See docs/reports.md.
"""
from __future__ import annotations


def render(results_dir, out_dir, baseline=None, **options):
    """Render ``results_dir`` into ``out_dir/index.html`` (+ ``out_dir/plots/``); see ``reports.page.render``."""
    from reports.page import render as _render   # matplotlib is imported only when a report is made
    return _render(results_dir, out_dir, baseline, **options)


__all__ = ["render"]
