"""``python -m accuracy diff``: a change that keeps every result shows none; a changed metric,
verdict or a lost record is named; timings and hosts are not results."""
import copy

from runs.record_diff import describe, diff_records

RECORDS = [{"case": "M2-K96-N200-unit-s0", "backend": "plain", "output": "dx", "golden": "reference",
            "status": "pass", "seconds": 1.5, "host": "a",
            "metrics": {"mismatches": 0, "ulp_max": 0.5}},
           {"case": "M2-K96-N200-unit-s0", "backend": "plain", "output": "dg", "golden": "reference",
            "status": "pass", "metrics": {"mismatches": 0, "ulp_max": 0.25}}]


def test_timings_and_hosts_are_not_results():
    after = copy.deepcopy(RECORDS)
    after[0].update(seconds=9.0, host="b")
    d = diff_records(RECORDS, after)
    assert d.same and d.compared == 2


def test_a_changed_metric_a_changed_verdict_and_a_lost_record_are_named():
    after = copy.deepcopy(RECORDS)
    after[0]["metrics"]["ulp_max"] = 0.75
    after[0]["status"] = "fail"
    d = diff_records(RECORDS, after[:1])
    assert not d.same
    assert d.differing == {("M2-K96-N200-unit-s0", "plain", "dx", "reference"): ["metrics.ulp_max", "status"]}
    assert d.only_before == [("M2-K96-N200-unit-s0", "plain", "dg", "reference")]
    text = describe(d)
    assert "1 differ, 1 only before" in text and "metrics.ulp_max, status" in text


def test_a_record_that_lost_or_gained_its_metrics_differs_either_way():
    bare = copy.deepcopy(RECORDS)
    del bare[0]["metrics"]
    key = ("M2-K96-N200-unit-s0", "plain", "dx", "reference")
    for before, after in ((RECORDS, bare), (bare, RECORDS)):
        d = diff_records(before, after)
        assert d.differing == {key: ["metrics.mismatches", "metrics.ulp_max"]}, d.differing


def test_floats_within_a_relative_tolerance_pass_and_nothing_else_moves():
    after = copy.deepcopy(RECORDS)
    after[0]["metrics"]["ulp_max"] = 0.5 * (1 + 1e-7)
    assert not diff_records(RECORDS, after).same
    d = diff_records(RECORDS, after, float_rtol=1e-6)
    assert d.same and set(d.largest) == {"metrics.ulp_max"} and abs(d.largest["metrics.ulp_max"] - 1e-7) < 1e-12
    assert "floats that moved" in describe(d) and "metrics.ulp_max 1.0e-07" in describe(d)
    assert not diff_records(RECORDS, after, float_rtol=1e-8).same
    counted = copy.deepcopy(RECORDS)
    counted[0]["metrics"]["mismatches"] = 1           # an int is exact at any tolerance
    assert not diff_records(RECORDS, counted, float_rtol=0.5).same
    flipped = copy.deepcopy(RECORDS)
    flipped[0]["status"] = "fail"
    assert diff_records(RECORDS, flipped, float_rtol=1.0).differing == {
        ("M2-K96-N200-unit-s0", "plain", "dx", "reference"): ["status"]}
