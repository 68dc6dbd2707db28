"""The findings block opens the page: the backends' verdicts at the operator's acceptance case
(the reference schedules' emulations labelled as such), the drift study's crossings, and the
outputs where the acceptance criterion's gate would pass zeros; in headless Chromium it fits the
first screen (1280 x 900), above the summary table."""
from __future__ import annotations

import json
import re

import pytest

from cases.matrix import acceptance_case
from operators.swiglu_backward import OPERATOR as SWIGLU
from reports import render
from reports.browser import check_page, find_chromium
from tests.reports.helpers import cell, findings_text

CASE = acceptance_case(SWIGLU)
M, K, N = CASE.m, CASE.k, CASE.n
ARTICLE_FAILS = ("db_g", "db_fc", "dw_g", "dw_fc")


def _served(records: list[dict], schedule: str) -> list[dict]:
    """An emulation's records: not called, served by the golden pass's tiled layer of its schedule."""
    return [{**r, "served": f"tiled:{schedule}"} for r in records]


def _acceptance_records() -> list[dict]:
    """The main command's headline, by hand: at the article's case the article's schedule fails its
    four reductions (known failures), the hardened one passes all seven, the PyPTO kernel skips."""
    records = []
    for out in SWIGLU.output_names:
        records += _served(cell(M, "article-schedule-emulated", out,
                                "expected_failure" if out in ARTICLE_FAILS else "pass", k=K, n=N, scale="seed"), "article")
        records += _served(cell(M, "hardened-schedule-emulated", out, "pass", k=K, n=N, scale="seed"), "hardened")
        records += cell(M, "torch-eager", out, "pass", k=K, n=N, scale="seed", zero_passes_seed_gate=out in ("dg", "dx"))
        records += cell(1025, "torch-eager", out, "pass", k=K, n=N, scale="tiny", zero_passes_seed_gate=out != "dx")
    records.append({"case": CASE.id, "case_spec": records[0]["case_spec"], "backend": "pypto", "output": "*",
                    "golden": None, "status": "skipped", "message": "above the CPU interpreter limit\nmore"})
    return records


def _render(tmp_path, records):
    results = tmp_path / "results"
    results.mkdir()
    (results / "results.json").write_text(json.dumps({"schema": 1, "records": records}))
    return render(results, tmp_path / "report")


def test_the_acceptance_case_and_the_vacuous_outputs_are_stated(tmp_path):
    page = _render(tmp_path, _acceptance_records())
    html = page.read_text()
    assert html.index('id="findings"') < html.index('id="summary"') < html.index('id="matrix"')
    box = findings_text(page)
    assert f"At the acceptance case {CASE.id}" in box
    article = box[box.index("article-schedule-emulated"):box.index("hardened-schedule-emulated")]
    assert "an emulation, not a kernel: the golden pass's tiled:article layer" in article
    assert "failed as expected db_g, db_fc, dw_g, dw_fc" in article
    assert "passed dg, dfc, dx" in article
    hardened = box[box.index("hardened-schedule-emulated"):box.index("torch-eager")]
    assert "tiled:hardened" in hardened and "passed all 7 outputs" in hardened
    kernels = box[box.index("torch-eager"):box.index("Tile-vs-global") if "Tile-vs-global" in box else None]
    assert "emulation" not in kernels              # called kernels are not labelled emulations
    assert "skipped above the CPU interpreter limit" in box
    # at the acceptance case dg and dx are vacuous; dg everywhere, dx at neither tiny case
    assert (f"would pass all zeros: at the acceptance case {CASE.id} on 2 of 7 outputs (dg, dx); "
            "dg at 2/2 cases") in box
    assert "No drift study in this run" in box


def test_a_planned_cell_without_a_record_is_missing_not_absent(tmp_path):
    """A worker killed at the acceptance case leaves no record: the block names the backend as
    missing there, and the summary table counts its outputs as missing."""
    records = [r for r in _acceptance_records() if not (r["case"] == CASE.id and r["backend"] == "torch-eager")]
    results = tmp_path / "results"
    results.mkdir()
    (results / "results.json").write_text(json.dumps({"schema": 1, "records": records,
                                                      "missing": [{"case": CASE.id, "backend": "torch-eager"}]}))
    page = render(results, tmp_path / "report")
    box = findings_text(page)
    assert "torch-eager: missing (no record: a crashed or killed worker)" in box
    html = page.read_text()
    summary = html[html.index('id="summary"'):html.index('id="matrix"')]
    row = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", summary[summary.index(">torch-eager<") + 1:]))
    assert row.split()[:10] == ["torch-eager", "14", "1", "6", "0", "0", "0", "0", "0", "7"], row[:200]


def test_each_operator_names_its_acceptance_case_as_the_cases_do():
    """The page finds the acceptance case by ``Operator.acceptance_case_id``, the plugin's runs by
    ``CaseSpec.id``: one id for every operator with an acceptance case."""
    import operators
    for name in operators.OPERATORS:
        op = operators.get(name)
        assert op.acceptance_case_id == (acceptance_case(op).id if op.acceptance_case else None), name


def test_a_run_without_the_acceptance_case_says_so(tmp_path):
    records = [r for r in _acceptance_records() if r["case"] != CASE.id]
    box = findings_text(_render(tmp_path, records))
    assert f"The acceptance case {CASE.id} is not in this run (pytest -n auto cases/ runs it)" in box
    assert "emulation" not in box


def test_another_operators_acceptance_case_names_its_own_command(tmp_path):
    from operators.rmsnorm_backward import OPERATOR as RMSNORM
    results = tmp_path / "results"
    results.mkdir()
    (results / "results.json").write_text(json.dumps({"schema": 1, "records": [], "manifest": {
        "selection": {"operator": "rmsnorm_backward"}}}))
    box = findings_text(render(results, tmp_path / "report"))
    assert (f"The acceptance case {RMSNORM.acceptance_case_id} is not in this run "
            "(pytest -n auto cases/ --operator rmsnorm_backward runs it)") in box


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (/usr/bin/chromium); "
                                                     "install it with: apt-get install -y chromium")
def test_the_findings_fill_the_first_screen(tmp_path):
    page = _render(tmp_path, _acceptance_records())
    res = check_page(page, width=1280, height=900, screenshot=tmp_path / "first-screen.png",
                     boxes=("findings", "summary"))
    assert not res.errors, res.errors
    box = res.boxes["findings"]
    assert 0 <= box["top"] < box["bottom"] <= 900, box
    assert "failed as expected db_g, db_fc, dw_g, dw_fc" in box["text"]
    assert "passed all 7 outputs" in box["text"]
    assert res.boxes["summary"]["top"] > box["bottom"]
