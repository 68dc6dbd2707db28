"""``python -m cases.expectations update``: bounds come from a run, narrowing is free, widening is refused."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cases import expectation_update as U
from cases import expectations as E

ROOT = Path(__file__).resolve().parents[2]

TOML = '''# header comment stays
[[expected]]
backend = "kern"
case = "M8-*"
output = "dw_*"
golden = "faithful"
bound.dw_g = { mismatch_share = 0.1, nonfinite_share = 0, err_rms = 0.5 }
reason = """measured cause"""

# a comment heading the second entry
[[expected]]
backend = "kern"
case = "M9-*"
output = "dx"
golden = "faithful"
when = { bf16_gemm_keeps_subnormals = false }
bound.dx = { mismatch_share = 0.2, nonfinite_share = 0, err_rms = 1 }
reason = """only where the GEMM flushes"""

[[expected]]
backend = "kern"
case = "M7-*"
output = "db_g"
golden = "faithful"
bound.db_g = { mismatch_share = 0.5, nonfinite_share = 0, err_rms = 1 }
reason = """fixed since"""
'''


def _record(case, output, mismatches, numel=1000, err=0.1, rms=1.0):
    return {"case": case, "backend": "kern", "output": output, "golden": "faithful", "gated": True,
            "metrics": {"numel": numel, "mismatches": mismatches, "mismatches_exact": True,
                        "mismatches_upper": mismatches, "nonfinite_disagreements": 0,
                        "max_abs_err": err, "golden_rms": rms}}


def _results(tmp_path, records, facts=None, draws=U.MIN_DRAWS):
    """Each record as ``draws`` seeds of its case: a bound is rewritten from MIN_DRAWS cases at least."""
    records = [{**r, "case": f"{r['case']}-s{i}"} for r in records for i in range(draws)]
    path = tmp_path / "run" / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest = {"device": "cpu", "facts": facts or {"bf16_gemm_keeps_subnormals": True,
                                                     "fp32_keeps_subnormals": True}}
    path.write_text(json.dumps({"schema": 2, "manifest": manifest, "records": records}))
    return path.parent


def _setup(tmp_path, records, facts=None, draws=U.MIN_DRAWS):
    d = tmp_path / "exp"
    d.mkdir()
    (d / "a.toml").write_text(TOML)
    return d, _results(tmp_path, records, facts, draws)


def test_a_bound_backed_by_too_few_cases_is_left_alone(tmp_path, capsys):
    """One tiny case proposed narrowing a bound from 4.41 to 2.48: a bound rests on MIN_DRAWS cases."""
    d, run = _setup(tmp_path, [_record("M8-x", "dw_g", 50, err=0.2), _record("M7-x", "db_g", 0)],
                    draws=U.MIN_DRAWS - 1)
    assert U.main([str(run), "--dry-run"], directory=d) == 0
    out = capsys.readouterr().out
    assert f"only {U.MIN_DRAWS - 1} case(s) of this run match it" in out and "[narrow]" not in out
    assert "entry deleted" not in out


def test_narrowing_is_written_and_a_passing_entry_deleted(tmp_path, capsys):
    d, run = _setup(tmp_path, [_record("M8-x", "dw_g", 50, err=0.2), _record("M8-x", "dw_fc", 0),
                               _record("M7-x", "db_g", 0)])
    assert U.main([str(run)], directory=d) == 0
    out = capsys.readouterr().out
    assert "[narrow]" in out and "entry deleted" in out and "condition bf16_gemm_keeps_subnormals = false" in out
    text = (d / "a.toml").read_text()
    assert "bound.dw_g = { mismatch_share = 0.05, nonfinite_share = 0, err_rms = 0.2 }" in text
    assert "fixed since" not in text and "# header comment stays" in text
    assert "# a comment heading the second entry" in text and "bound.dx = { mismatch_share = 0.2" in text
    entries = E.parse(text, d / "a.toml")
    assert [e.case for e in entries] == ["M8-*", "M9-*"]
    assert U.main([str(run)], directory=d) == 0          # idempotent: a second update changes nothing
    assert (d / "a.toml").read_text() == text


def test_widening_is_refused_unless_allowed(tmp_path, capsys):
    d, run = _setup(tmp_path, [_record("M8-x", "dw_g", 300), _record("M8-x", "dw_fc", 3),
                               _record("M7-x", "db_g", 100)])
    before = (d / "a.toml").read_text()
    assert U.main([str(run)], directory=d) == 1
    out = capsys.readouterr().out
    assert "Refused" in out and "dw_fc, dw_g" in out and "[WIDEN]" in out
    assert (d / "a.toml").read_text() == before
    assert U.main([str(run), "--allow-widen"], directory=d) == 0
    text = (d / "a.toml").read_text()
    assert "bound.dw_g = { mismatch_share = 0.3," in text and "bound.dw_fc = { mismatch_share = 0.003," in text


def test_the_condition_decides_which_entries_a_run_measures(tmp_path):
    flushing = {"bf16_gemm_keeps_subnormals": False, "fp32_keeps_subnormals": True}
    d, run = _setup(tmp_path, [_record("M9-x", "dx", 100, err=0.5)], facts=flushing)
    assert U.main([str(run)], directory=d) == 0
    text = (d / "a.toml").read_text()
    assert "bound.dx = { mismatch_share = 0.1, nonfinite_share = 0, err_rms = 0.5 }" in text
    assert "bound.dw_g = { mismatch_share = 0.1," in text      # M8: no record in this run, left alone


def test_results_without_a_manifest_are_refused(tmp_path):
    path = tmp_path / "old" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"records": []}))
    proc = subprocess.run([sys.executable, "-m", "cases.expectations", "update", str(path.parent), "--dry-run"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no run manifest" in proc.stderr


def test_written_bounds_are_rounded_up():
    assert U._number(0.000520833) == "0.0005209"
    assert float(U._number(0.1234567)) >= 0.1234567
    assert U._number(float(U._number(0.000520833))) == "0.0005209"


def test_a_run_of_several_operators_updates_one_operators_entries_from_its_cases(tmp_path, capsys):
    """In a run of two operators, another operator's records whose names match an entry (RMSNorm's
    dx beside SwiGLU's) never move the entry: the manifest maps each case to its operator."""
    d, run = _setup(tmp_path, [_record("M8-x", "dw_g", 50, err=0.2), _record("M8-x", "dw_fc", 0),
                               _record("M7-x", "db_g", 0), _record("M8-y", "dw_g", 900)])
    path = run / "results.json"
    data = json.loads(path.read_text())
    data["manifest"]["selection"] = {
        "operator": ["swiglu_backward", "rmsnorm_backward"],
        "case_operators": {r["case"]: "rmsnorm_backward" if r["case"].startswith("M8-y") else "swiglu_backward"
                           for r in data["records"]}}
    path.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as exc:          # several operators: one must be named
        U.main([str(run), "--dry-run"], directory=d)
    assert exc.value.code == 2 and "name one with --operator" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:          # an operator the run did not validate
        U.main([str(run), "--operator", "tests.operators.toy", "--dry-run"], directory=d)
    assert exc.value.code == 2 and "is a run of swiglu_backward, rmsnorm_backward, not of" in capsys.readouterr().err
    assert U.main([str(run), "--operator", "swiglu_backward"], directory=d) == 0   # the 900-mismatch case is RMSNorm's
    assert "bound.dw_g = { mismatch_share = 0.05, nonfinite_share = 0, err_rms = 0.2 }" in (d / "a.toml").read_text()
