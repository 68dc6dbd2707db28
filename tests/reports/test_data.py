"""The data behind each table and plot, from hand-made records with known numbers."""
from __future__ import annotations

import math

import pytest

from contract.records import Record
from reports import data as D
from tests.reports.helpers import cell, rec

ATT = {"storage": 1e-3, "tile_order": 3e-3, "kernel": 0.0, "dominant": "tile_order",
       "nonfinite": {"tile_order": 0, "kernel": 0}}


def test_num_reads_strings_and_missing_values():
    assert D.num("inf") == math.inf and D.num("-inf") == -math.inf and math.isnan(D.num("nan"))
    assert D.num(None) is None and D.num("garbage") is None and D.num(True) is None
    assert D.num(3) == 3.0 and D.finite("inf") is None and D.finite(2.5) == 2.5


def test_case_from_id_when_spec_missing():
    c = D.case_of(Record("M1025-K96-N200-seed-s3", "b", "dx", "fp64", "pass"))
    assert (c.m, c.shape, c.scale, c.seed) == (1025, (("K", 96), ("N", 200)), "seed", 3)
    assert D.case_of(Record("?", "b", "dx", "fp64", "pass")).id == "?"


def test_verdict_cells_statuses_vacuity_and_skips():
    records = (cell(2, "a", "dx", "pass") + cell(2, "a", "dg", "pass", zero_passes_seed_gate=True)
               + cell(2, "a", "db_g", "expected_failure") + cell(3, "a", "dx", "fail"))
    skip = rec(3, "b", "*", "*", status="skipped")
    skip["message"] = "no GPU"
    records.append(skip)
    records.append(rec(2, "b", "dx", "faithful", status="pass", gated=True))
    idx = D.index(records)
    cells = D.verdict_cells(idx)
    assert idx.backends == ["a", "b"] and idx.outputs == ["dg", "db_g", "dx"]   # contract order
    case2, case3 = "M2-K8-N16-unit-s0", "M3-K8-N16-unit-s0"
    assert cells[(case2, "a", "dx")].css == "pass"
    assert cells[(case2, "a", "dg")].css == "pass-vacuous" and cells[(case2, "a", "dg")].symbol == "✓⚠"
    assert cells[(case2, "a", "db_g")].css == "expected-failure"
    assert cells[(case3, "a", "dx")].status == "fail"
    # a skipped backend fills every output of its case, linking to the skip row
    assert {cells[(case3, "b", o)].status for o in idx.outputs} == {"skipped"}
    assert cells[(case3, "b", "dx")].anchor == D.row_anchor(case3, "b", "*")
    assert cells[(case3, "b", "dx")].message == "no GPU"
    # a backend with records at a case but not for this output is "missing"
    assert cells[(case2, "b", "dg")].status == "missing"
    assert cells[(case3, "a", "dg")].status == "missing"     # backend a ran at case 3, but no dg record
    counts = D.status_counts(cells, idx.backends)
    assert counts["a"]["fail"] == 1 and counts["a"]["pass-vacuous"] == 1


def _drift_records():
    recs = []
    for m, drift, seed in ((1024, 0.0, 0), (2048, 1e-3, 0), (2048, 4e-3, 1), (4096, "nan", 0)):
        recs.append(rec(m, "golden:tiled:article", "dw_g", "faithful:faithful", seed=seed, max_abs_err=drift,
                        nonfinite_disagreements=3 if drift == "nan" else 0))
        recs.append(rec(m, "golden:faithful:faithful", "dw_g", "fp64", seed=seed, max_abs_err=5e-4))
        recs += cell(m, "k", "dw_g", "pass", seed=seed, max_abs_err=2 * m * 1e-7,
                     fp64={"max_abs_err": 3 * m * 1e-7, "bound_mean": m * 1e-6})
    recs += cell(2048, "k", "dx", "pass", max_abs_err=1.0)       # not a reduction over M: no drift panel
    return recs


def test_drift_series_from_known_records():
    panels = D.drift_panels(D.index(_drift_records()))
    assert [(p.output, p.shape, p.scale) for p in panels] == [("dw_g", (("K", 8), ("N", 16)), "unit")]
    series = {(s.kind, s.source, s.reference): s for s in panels[0].series}
    tile = series[("tile_order", "tiled:article", "global")]
    assert tile.points == [(2048, 4e-3)]       # max over the two seeds
    assert tile.zeros == [1024]                # exact at a single tile: off the log axis, listed
    assert tile.nonfinite == [4096]
    assert series[("storage", "faithful:faithful", "fp64")].points == [(1024, 5e-4), (2048, 5e-4), (4096, 5e-4)]
    assert series[("backend", "k", "global")].points == [(1024, 2048e-7), (2048, 4096e-7), (4096, 8192e-7)]
    assert series[("backend", "k", "fp64")].points == [(1024, 3072e-7), (2048, 6144e-7), (4096, 12288e-7)]
    assert series[("bound", "k", "fp64")].points == [(1024, 1024e-6), (2048, 2048e-6), (4096, 4096e-6)]
    # normalised by rms(golden): the scale of the inputs divides out
    scaled = [r for r in _drift_records() if r["metrics"]["max_abs_err"] != "nan"]
    for r in scaled:
        r["metrics"]["golden_rms"] = 10.0
    tile_n = D.drift_panels(D.index(scaled))[0].series[0]
    assert tile_n.points == [(2048, 4e-4)]
    assert D.drift_panels(D.index(scaled), normalise=False)[0].series[0].points == [(2048, 4e-3)]
    # order: tile order first (drawn on top), bound last
    assert [s.kind for s in panels[0].series][0] == "tile_order" and panels[0].series[-1].kind == "bound"


def test_attribution_split_shares_and_dominant():
    recs = (cell(1024, "k", "db_g", "pass", attribution=ATT, fp64={"max_abs_err": 4e-3})
            + cell(2048, "k", "db_g", "pass", fp64={"max_abs_err": 2e-3},
                   attribution={"storage": 1e-3, "tile_order": 0.0, "kernel": 1e-3, "dominant": "storage"})
            + cell(4096, "k", "db_g", "pass", attribution={"storage": "nan", "tile_order": "inf", "kernel": 2e-3,
                                                           "dominant": "kernel", "nonfinite": {"kernel": 5}}))
    [row] = D.attribution_split(D.index(recs))
    assert row.cases == 3
    assert row.max_part == {"storage": 1e-3, "tile_order": 3e-3, "kernel": 2e-3}
    # shares per case: (0.25, 0.75, 0), (0.5, 0, 0.5), (0, 0, 1) -> means
    assert row.mean_share["storage"] == pytest.approx(0.25)
    assert row.mean_share["tile_order"] == pytest.approx(0.25)
    assert row.mean_share["kernel"] == pytest.approx(0.5)
    assert row.dominant == {"tile_order": 1, "storage": 1, "kernel": 1}
    assert row.nonfinite_cases == 1 and row.max_total_vs_fp64 == 4e-3


def test_vacuity_table():
    recs = (cell(1, "k", "dx", "pass", zero_passes_seed_gate=True, golden_max_abs=2e-5)
            + cell(1, "other", "dx", "pass", zero_passes_seed_gate=True, golden_max_abs=2e-5)
            + cell(2, "k", "dx", "pass", golden_max_abs=0.5)
            + cell(1, "k", "db_g", "pass", golden_max_abs=4e-3))
    # a case with golden records only (its backend was skipped)
    recs.append(rec(3, "golden:faithful:faithful", "dx", "fp64", zero_passes_seed_gate=True, golden_max_abs=1e-6))
    rows, table = D.vacuity(D.index(recs))
    by = {r.output: r for r in rows}
    assert [c.id for c, _ in by["dx"].vacuous] == ["M1-K8-N16-unit-s0", "M3-K8-N16-unit-s0"]
    assert [c.id for c, _ in by["dx"].checked] == ["M2-K8-N16-unit-s0"]
    assert by["dx"].cases == 3 and by["db_g"].vacuous == []
    assert table[("M1-K8-N16-unit-s0", "dx")] == (True, 2e-5)


def test_baseline_diff_noise_rules():
    base = (cell(1, "k", "dx", "pass", ulp_p99=1.0, max_abs_err=1e-3)
            + cell(2, "k", "dx", "fail")
            + cell(3, "k", "dx", "pass", ulp_p99=1.0, max_abs_err=1e-3)
            + cell(4, "k", "dx", "pass", ulp_p99=1.0, max_abs_err=1e-3)
            + cell(5, "k", "dx", "expected_failure")
            + cell(7, "k", "dx", "pass", max_abs_err=0.0))
    now = (cell(1, "k", "dx", "fail", ulp_p99=1.0, max_abs_err=1e-3)          # new failure
           + cell(2, "k", "dx", "pass")                                       # fixed
           + cell(3, "k", "dx", "pass", ulp_p99=1.9, max_abs_err=1.9e-3)      # noise: +0.9 ULP, x1.9
           + cell(4, "k", "dx", "pass", ulp_p99=2.5, max_abs_err=3e-3)        # worse: +1.5 ULP and x3
           + cell(5, "k", "dx", "unexpected_pass")                            # fixed (a known failure went away)
           + cell(6, "k", "dx", "pass")                                       # new cell
           + cell(7, "k", "dx", "pass", max_abs_err="inf"))                   # worse: became non-finite
    diff = D.baseline_diff(D.index(now), D.index(base))
    assert [(c.case, c.before, c.after) for c in diff.new_failures] == [("M1-K8-N16-unit-s0", "pass", "fail")]
    assert sorted(c.case for c in diff.fixed) == ["M2-K8-N16-unit-s0", "M5-K8-N16-unit-s0"]
    worse = {(c.case, c.golden): c.detail for c in diff.worse}
    assert set(c for c, _ in worse) == {"M4-K8-N16-unit-s0", "M7-K8-N16-unit-s0"}
    assert "ULP p99 1 -> 2.5" in worse[("M4-K8-N16-unit-s0", "faithful")]
    assert "x3" in worse[("M4-K8-N16-unit-s0", "faithful")]
    assert "inf" in worse[("M7-K8-N16-unit-s0", "faithful")]
    assert diff.added_cells == 1 and diff.removed_cells == 0
    assert not D.baseline_diff(D.index(base), D.index(base)).worse


def test_details_sum_histograms_and_order_worst_cases():
    h = {"ulp_hist": [1, 2, 0], "log10_abs_err_hist": [0, 3], "exact_elements": 1}
    w = [{"index": [0, 1], "actual": 1.0, "expected": 1.5, "abs_err": 0.5, "excess": 0.4}]
    recs = (cell(1, "k", "dx", "pass", ulp_max=3.0, worst=w, **h)
            + cell(2, "k", "dx", "fail", ulp_max=1.0, worst=w, **h))
    [d] = D.details(D.index(recs))
    assert d.hist["faithful"]["ulp"] == [2, 4, 0] and d.hist["fp64"]["log10_abs_err"] == [0, 6]
    assert d.hist["tiled"]["exact"] == 2 and d.hist["faithful"]["cases"] == 2
    assert [r.case.m for r in d.worst_rows] == [2, 1]      # failing first


def test_slugs_are_safe_and_distinct():
    a, b = D.slug("my.pkg:k<script>"), D.slug("my.pkg:k>script<")
    assert a != b and all(ch.isalnum() or ch == "-" for ch in a)
