"""The report's panels: one module per panel of the page, rendered in one loop (``reports.page``).

A panel module holds ``PANEL = Panel(name, data, plots)``:

* ``data(context)`` computes what its block shows from the page's ``Context`` (the records' index,
  the operator, the loaded results, the render options);
* ``plots(context, data)`` lists the figures it wants as ``PlotJob``s; the page runs the jobs of every
  panel in one pool, so a panel's data names its images (``context.image``) before they exist;
* its template block, ``reports/templates/panels/<name>.html.j2``, sees its data as ``data``.

The page's panels, top to bottom, are listed in ``reports.panels.order``: adding a panel is a
module here, its block, and its entry there.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import operators
from reports import data as D
from runs.results import DRIFT_STUDIES

PLOTS = "plots"     # the page's image folder, next to index.html and linked relatively

# (a ``reports.plots`` function's name, its arguments before the path, the PNG to write): picklable,
# so a pool of ``python -m reports.plots`` workers can run it
PlotJob = tuple[str, tuple, Path]


def no_plots(context: Context, data: Any) -> list[PlotJob]:
    return []


@dataclass(frozen=True)
class Panel:
    """One panel of the page: its data, its plot jobs, and its template block (named after it)."""
    name: str
    data: Callable[[Context], Any]
    plots: Callable[[Context, Any], list[PlotJob]] = no_plots

    @property
    def template(self) -> str:
        return f"panels/{self.name}.html.j2"


@dataclass
class Context:
    """What every panel's data is computed from, built once per page. What several panels show (the
    verdict cells, the baseline diff, the platform) is computed once, here, on first use."""
    idx: D.Index
    op: Any                                   # contract.operator.Operator
    results: Mapping                          # the loaded results: records, manifest, run facts
    out: Path                                 # the page's folder
    baseline: str | os.PathLike | None = None
    baseline_records: list | None = None      # the baseline's records of the same operator
    heatmap: bool = True
    drift_study: str | os.PathLike | None = None
    study_strict: bool = False                # a study of another operator is an error, not left out
    timings: dict[str, float] = field(default_factory=dict)   # what a panel times itself (its own drawing)
    shared: dict[str, Any] = field(default_factory=dict)      # ``once``'s results

    def image(self, name: str) -> str:
        """The page-relative path of the PNG named ``name``; ``out / image(name)`` is where it is drawn."""
        return f"{PLOTS}/{name}.png"

    @cached_property
    def cells(self) -> dict:
        return D.verdict_cells(self.idx)

    @cached_property
    def counts(self) -> dict:
        """backend -> status -> cells (case x backend x output), the records' backends first; a
        planned cell with no record at all (a worker killed; ``runs.results`` checked the list's
        names) counts as missing for each of the operator's outputs."""
        counts = D.status_counts(self.cells, self.idx.backends)
        recorded = {(case, backend) for case, backend, _ in self.cells}
        n = len(self.op.output_names)
        for c in self.run_info["missing"]:
            if (c["case"], c["backend"]) not in recorded:
                mine = counts.setdefault(c["backend"], {})
                mine["missing"] = mine.get("missing", 0) + n
                mine["total"] = mine.get("total", 0) + n
        return counts

    @cached_property
    def study_folders(self) -> list[Path]:
        """Where a page looks for the drift studies of its operator: the report's ``drift/`` (made
        apart, ``python -m cases.drift_study -o OUT/drift``), then the run's own (``RUN/drift/<operator>``)."""
        folders = [self.out / "drift"]
        results_file = self.results.get("source")
        if results_file:
            folders.append(Path(results_file).parent / DRIFT_STUDIES / operators.key(self.op.one_head))
        return folders

    def once(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` the first time ``name`` is asked for on this page, its result after: what two
        panels show (the drift study heads the drift section and is a line of the findings)."""
        if name not in self.shared:
            self.shared[name] = compute()
        return self.shared[name]

    @cached_property
    def diff(self) -> D.BaselineDiff | None:
        if self.baseline_records is None:
            return None
        return D.baseline_diff(self.idx, D.index(self.baseline_records, self.op))

    @cached_property
    def platform(self) -> D.PlatformSummary | None:
        return D.platform_summary(self.results.get("manifest"))

    @cached_property
    def run_info(self) -> dict:
        """Which file and run the page shows, and what the run lacks (missing cells, unreadable shards)."""
        return {"source": self.results.get("source"), "run": self.results.get("run"),
                "missing": self.results.get("missing") or [], "unreadable": self.results.get("unreadable_shards") or []}
