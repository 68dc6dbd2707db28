"""The page's panels, top to bottom: the one list a new panel is added to."""
from __future__ import annotations

from reports.panels import (
    attribution,
    baseline,
    details,
    drift_study,
    drift_vs_m,
    findings,
    dual,
    loop_drift,
    matrix,
    notes,
    platform,
    skipped,
    summary,
    tile_heatmap,
    vacuity,
)

PANELS = (
    findings.PANEL,
    summary.PANEL,
    matrix.PANEL,
    skipped.PANEL,
    vacuity.PANEL,
    attribution.PANEL,
    drift_study.PANEL,      # opens the drift section
    loop_drift.PANEL,
    drift_vs_m.PANEL,
    tile_heatmap.PANEL,
    dual.PANEL,
    details.PANEL,
    baseline.PANEL,
    platform.PANEL,
    notes.PANEL,
)
