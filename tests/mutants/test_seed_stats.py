"""Seed statistics on known inputs: Wilson intervals, grouping by seed-stripped case, the
decision over seeds, and robustness to malformed records (they are skipped, never raised on)."""
import math

import pytest

from runs import seed_stats as ss


def test_wilson_known_values():
    lo, hi = ss.wilson_interval(0, 200)
    assert lo == 0.0 and hi == pytest.approx(1.959964 ** 2 / (200 + 1.959964 ** 2), rel=1e-6)   # 0.0188
    lo, hi = ss.wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.236593, abs=1e-6), pytest.approx(0.763407, abs=1e-6))
    lo, hi = ss.wilson_interval(200, 200)
    assert hi == 1.0 and lo == pytest.approx(1 - 0.018846, abs=1e-6)
    assert ss.wilson_interval(0, 0) == (0.0, 1.0)
    assert ss.wilson_interval(7, 3) == ss.wilson_interval(3, 3)      # clamped, not raised


def test_strip_seed_and_quantile():
    assert ss.strip_seed("M2049-K96-N200-unit-s17") == "M2049-K96-N200-unit"
    assert ss.strip_seed("no-seed") == "no-seed"
    assert ss.quantile([3, 1, 2, 4], 0.5) == 2.5
    assert ss.quantile([None, float("nan")], 0.5) is None
    assert ss.quantile([1.0, float("inf"), 2.0], 1.0) == 2.0


def _rec(seed, output, status, p99=0.5, case="M2-K96-N200-unit", backend="k"):
    return {"case": f"{case}-s{seed}", "case_spec": {"seed": seed}, "backend": backend, "output": output,
            "golden": "faithful", "gated": True, "status": status, "metrics": {"ulp_p99": p99}}


def test_summarize_groups_over_seeds():
    recs = [_rec(s, "dx", "fail" if s in (3, 7) else "pass", p99=float(s)) for s in range(10)]
    recs += [_rec(s, "dg", "pass") for s in range(10)]
    recs += [{"status": "info", "gated": False}, "garbage", {"case": "x", "status": "pass"}]
    out = ss.summarize(recs)
    g = out["groups"][("k", "M2-K96-N200-unit", "dx")]
    assert (g["seeds"], g["failures"], g["failing_seeds"]) == (10, 2, [3, 7])
    assert g["failure_ci"] == ss.wilson_interval(2, 10)
    assert g["p99_ulp"]["median"] == 4.5 and g["p99_ulp"]["max"] == 9.0
    assert not g["decision"]["passed"]
    assert out["groups"][("k", "M2-K96-N200-unit", "dg")]["decision"]["passed"]
    assert out["skipped"] == 3


def test_error_record_fails_every_output_of_its_seed():
    recs = [_rec(0, "dg", "pass"), _rec(0, "dx", "pass"), _rec(1, "dg", "pass"), _rec(1, "dx", "pass"),
            {"case": "M2-K96-N200-unit-s2", "backend": "k", "output": "*", "status": "error"}]
    groups = ss.summarize(recs)["groups"]
    assert groups[("k", "M2-K96-N200-unit", "dg")]["failing_seeds"] == [2]
    assert groups[("k", "M2-K96-N200-unit", "dx")]["seeds"] == 3


def test_seed_gate_decisions():
    assert ss.seed_gate(0, 200)["passed"]
    assert not ss.seed_gate(1, 200)["passed"]                         # default: any failing seed is a finding
    assert ss.seed_gate(3, 200, max_failure_rate=0.05)["passed"]      # lower bound 0.005 < 5%
    assert not ss.seed_gate(30, 200, max_failure_rate=0.05)["passed"]  # lower bound 0.107 > 5%
    p99s = [0.5] * 95 + [8.0] * 5
    assert ss.seed_gate(0, 100, p99s, ulp_limit=1.0, quantile_q=0.9)["passed"]       # p90 = 0.5
    assert not ss.seed_gate(0, 100, p99s, ulp_limit=1.0, quantile_q=0.99)["passed"]  # p99 = 8
    assert ss.seed_gate(0, 0)["passed"] and ss.seed_gate(0, 0)["failure_ci"] == (0.0, 1.0)


def test_expected_failure_counts_as_a_failure_and_catch_rate():
    g = ss.summarize([_rec(0, "dw_g", "expected_failure"), _rec(1, "dw_g", "pass")])["groups"]
    assert g[("k", "M2-K96-N200-unit", "dw_g")]["failures"] == 1
    cr = ss.catch_rate({0: True, 1: True, 2: False})
    assert (cr["caught"], cr["seeds"], cr["missed_seeds"]) == (2, 3, [2])
    assert cr["ci"] == ss.wilson_interval(2, 3)
    assert math.isclose(cr["rate"], 2 / 3)
