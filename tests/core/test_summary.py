"""The one-screen summary reads the merged records: a cell is as bad as its worst output."""
from __future__ import annotations

import re

import pytest

from runs.summary import backend_lines, cell_verdicts, slowest_line, summary_lines, vacuity_line


def _rec(case, backend, output, status, *, gated=True, vacuous=False, seconds=1.0):
    return {"case": case, "backend": backend, "output": output, "golden": "reference", "gated": gated,
            "status": status, "vacuous_seed_gate": vacuous, "seconds": seconds}


RECORDS = [
    _rec("A", "k", "dg", "pass"), _rec("A", "k", "dw_g", "fail"), _rec("A", "k", "dw_g", "info", gated=False),
    _rec("B", "k", "dg", "pass"), _rec("B", "k", "dw_g", "expected_failure"),
    {"case": "C", "backend": "k", "output": "*", "golden": "*", "status": "crashed", "seconds": 0.5},
    _rec("A", "torch-eager", "dg", "pass", vacuous=True, seconds=7.5), _rec("A", "torch-eager", "dw_g", "pass"),
    _rec("B", "torch-eager", "dg", "pass", vacuous=False),
    _rec("A", "golden:tiled:article", "dg", "info", gated=False, seconds=99.0),
]


def test_a_cell_takes_its_worst_output():
    cells = cell_verdicts(RECORDS)
    assert cells[("A", "k")] == "fail"
    assert cells[("B", "k")] == "expected_failure"
    assert cells[("C", "k")] == "crashed"
    assert ("A", "golden:tiled:article") not in cells


def test_backend_lines_count_cells_not_records():
    assert backend_lines(RECORDS) == ["k: 1 known failures, 1 failed, 1 crashed (of 3 cells)",
                                      "torch-eager: 2 passed (of 2 cells)"]


def test_vacuity_and_slowest_lines():
    assert vacuity_line(RECORDS).startswith("acceptance gate (rtol 1/128, atol 1e-4) would pass all zeros: "
                                            "dg at 1/2 cases")
    # at the acceptance case: which of its gated outputs (dg vacuous at A, dw_g not)
    assert vacuity_line(RECORDS, "A").startswith("acceptance gate (rtol 1/128, atol 1e-4) would pass all zeros: "
                                                 "at the acceptance case A on 1 of 2 outputs (dg); dg at 1/2 cases")
    # a golden record's seconds are its case's goldens and comparison; the largest case named
    assert slowest_line(RECORDS) == "slowest case: A, goldens and comparison 99.0 s; slowest backend call: torch-eager at A, 7.5 s"
    later = {**RECORDS[-1], "case": "B", "seconds": 130.25}
    assert slowest_line(RECORDS + [later]).startswith("slowest case: B, goldens and comparison 130.2 s;")
    assert slowest_line([r for r in RECORDS if not r["backend"].startswith("golden")]) == \
        "slowest backend call: torch-eager at A, 7.5 s"
    assert len(summary_lines(RECORDS)) == 4


def test_a_run_of_several_operators_gets_a_block_per_operator():
    lines = summary_lines(RECORDS, {"A": "swiglu_backward", "B": "rmsnorm_backward", "C": "swiglu_backward"})
    assert lines[0] == "[swiglu_backward]" and "[rmsnorm_backward]" in lines
    rms = lines[lines.index("[rmsnorm_backward]") + 1:]
    assert rms[0] == "  k: 1 known failures (of 1 cells)", rms          # case B alone
    swiglu = lines[1:lines.index("[rmsnorm_backward]")]
    assert "  k: 1 failed, 1 crashed (of 2 cells)" in swiglu, swiglu


def test_the_acceptance_case_lists_each_backends_outputs_by_verdict():
    records = RECORDS + [
        {"case": "A", "backend": "pypto", "output": "*", "golden": "*", "status": "skipped",
         "message": "backend 'pypto' cannot run this case here: above the CPU interpreter's limit\nmore"}]
    lines = summary_lines(records, acceptance={"swiglu_backward": "A"})
    at = lines.index("at the acceptance case A:")
    assert lines[at + 1:at + 4] == ["  k: failed (dw_g); passed dg",
                                    "  torch-eager: passed all 2 outputs",
                                    "  pypto: skipped (backend 'pypto' cannot run this case here: above the CPU "
                                    "interpreter's limit)"]
    several = summary_lines(records, {"A": "swiglu_backward", "B": "rmsnorm_backward", "C": "swiglu_backward"},
                            {"swiglu_backward": "A", "rmsnorm_backward": "Z"})
    assert "  at the acceptance case A:" in several
    assert ("  the acceptance case Z is not in this run (pytest -n auto cases/ --operator rmsnorm_backward "
            "runs it)") in several      # no records there: said so, with the command
    # a planned cell with no record (its worker killed) is named at the acceptance case, never dropped
    lost = summary_lines(records, acceptance={"swiglu_backward": "A"},
                         missing=[{"case": "A", "backend": "npu-kernel"}, {"case": "B", "backend": "other"}])
    assert "  npu-kernel: missing (no record: a crashed or killed worker)" in lost
    assert not any("other" in line for line in lost)
    known = summary_lines([_rec("A", "k", "dw_g", "expected_failure")], acceptance={"swiglu_backward": "A"})
    assert "  k: failed as expected (dw_g)" in known


def test_a_drift_study_line_names_the_crossings():
    study = {"config": {"seeds": 3, "profiles": ["seed"], "ms": [1024, 262144], "shape": [64, 128]},
             "axes": {"dims": ["K", "N"]},
             "table": [{"schedule": "article", "family": "db", "crossing": "M ~ 48,662 (between 32,768 and 65,536)"},
                       {"schedule": "article", "family": "dw", "crossing": "at or below M=1024"},
                       {"schedule": "hardened", "family": "db", "crossing": "not up to M=262144"}]}
    lines = summary_lines(RECORDS, studies={"swiglu_backward": study})
    assert ("drift study (3 seeds, scale profile seed, K=64, N=128): crosses the gate: article db M ~ 48,662, "
            "article dw at or below M=1024; "
            "never up to M=262,144: hardened") in lines


@pytest.mark.parametrize("missing, says", [({"case": "A"}, "it is not a list"),
                                           ([{}], "entry 0 is {}"),
                                           ([{"case": "A", "backend": None}], "entry 0 is {'case': 'A', 'backend': None}"),
                                           (["oops"], "entry 0 is 'oops'")])
def test_a_results_file_with_malformed_missing_cells_is_refused_naming_them(tmp_path, missing, says):
    """The summaries and the report read a run's missing cells as names; a file that holds other
    things there is refused in one line, not rendered with a backend called None."""
    import json
    from runs.results import ResultsNotFound, load_results
    (tmp_path / "results.json").write_text(json.dumps({"schema": 1, "records": [], "missing": missing}))
    with pytest.raises(ResultsNotFound, match="its 'missing' cells must be a list of {case, backend} names: "
                                              + re.escape(says)):
        load_results(tmp_path / "results.json")
