"""The data behind every table and plot of the report, as plain Python (no matplotlib, no HTML):
one module per idea (``records``: numbers, cases and the index; ``verdicts``, ``details``,
``attribution``, ``vacuity``, ``drift``, ``baseline``, ``platform``, ``dual``: one table or plot
each), re-exported here.

Everything here reads result records defensively: a record may lack keys, floats
may be the strings "inf", "-inf", "nan" (``runs.results.to_json``), the
record format may gain fields. Nothing here raises on a strange record; it is
skipped or shown as missing.

Record kinds (see ``cases.evaluate``):

* backend records: ``backend`` is a registered name or an import path, one per
  case x output x golden (``reference``, ``fp64``, ``faithful``, ``tiled``, and ``own`` for
  db, dw, dx); the gated one (``reference``) has
  ``gated: true`` and the cell's ``status``; a skipped/errored cell has one record
  with ``output == "*"``;
* golden records: ``backend == "golden:<layer>"``, ``golden`` = the layer it is
  compared with (``golden:faithful:...`` vs ``fp64`` is the BF16 storage error,
  ``golden:tiled:<schedule>`` vs ``faithful:...`` the tile-order drift).
"""
from __future__ import annotations

from reports.data.records import (
    operator_outputs, ACCEPTANCE_RTOL, ACCEPTANCE_ATOL, GOLDENS, VERDICT_STATUSES, FAILING, GOLDEN_PREFIX, NOISE_ULP_P99,
    NOISE_MAX_ABS_FACTOR, num, finite, metrics_of, slug, Case, case_of, Index,
    index,
)
from reports.data.verdicts import Cell, row_anchor, detail_anchor, origin_of, verdict_cells, status_counts
from reports.data.details import DETAIL_COLUMNS, DetailCell, DetailRow, Detail, details
from reports.data.attribution import SOURCES, AttributionRow, attribution_split
from reports.data.vacuity import VacuityRow, vacuity
from reports.data.drift_vs_m import Series, DriftPanel, drift_panels
from reports.data.baseline import Change, BaselineDiff, baseline_diff
from reports.data.platform import PlatformSummary, platform_summary
from reports.data.dual import DualRow, DualTable, dual_tables

__all__ = [
    "ACCEPTANCE_RTOL",
    "ACCEPTANCE_ATOL",
    "operator_outputs",
    "GOLDENS",
    "VERDICT_STATUSES",
    "FAILING",
    "GOLDEN_PREFIX",
    "NOISE_ULP_P99",
    "NOISE_MAX_ABS_FACTOR",
    "num",
    "finite",
    "metrics_of",
    "slug",
    "Case",
    "case_of",
    "Index",
    "index",
    "Cell",
    "row_anchor",
    "detail_anchor",
    "origin_of",
    "verdict_cells",
    "status_counts",
    "DETAIL_COLUMNS",
    "DetailCell",
    "DetailRow",
    "Detail",
    "details",
    "SOURCES",
    "AttributionRow",
    "attribution_split",
    "VacuityRow",
    "vacuity",
    "Series",
    "DriftPanel",
    "drift_panels",
    "Change",
    "BaselineDiff",
    "baseline_diff",
    "PlatformSummary",
    "platform_summary",
    "DualRow",
    "DualTable",
    "dual_tables",
]
