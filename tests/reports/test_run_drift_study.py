"""A run that writes a report makes its own small drift study beside its cells: the report's
drift section and the terminal summary show this run's study; a study of other code than the
run's is never shown as the run's; a run without a report makes none."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path

from reports.browser import check_page, find_chromium
from tests.reports.helpers import findings_text

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--profile", "none", "--case", "64,96,200,unit", "--backend", "torch-eager", "--benchmark", "none"]


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "cases/", "-p", "no:xdist", "-p", "no:cacheprovider",
                           *ARGS, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_a_run_with_a_report_draws_its_own_drift_study(tmp_path):
    """Its page and summary show it; re-rendered beside a study of other code, that one is named so."""
    proc = _run("--results-dir", str(tmp_path / "r"), "--report-dir", str(tmp_path / "report"), "--drift-seeds", "1")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 passed" in proc.stdout, proc.stdout[-2000:]          # the cell and the study
    [study] = sorted((tmp_path / "r").glob("runs/*/drift/swiglu_backward/drift.json"))
    assert "drift study (1 seeds, scale profile seed, K=64, N=128): crosses the gate: article" in proc.stdout, proc.stdout[-2000:]
    page = (tmp_path / "report" / "index.html").read_text()
    assert "made by this run beside its cells" in page and str(study.parent) in page
    for family in ("db", "dw"):
        assert f'alt="drift study of {family}"' in page
    assert sorted((tmp_path / "report").rglob("*study-d*.png"))
    if find_chromium() is not None:      # the text above is checked; the browser's view where there is one
        shot = tmp_path / "report" / "screenshot.png"
        seen = check_page(tmp_path / "report" / "index.html", screenshot=shot)
        study_images = [i for i in seen.images if "study-d" in i["src"]]
        assert len(study_images) >= 2 and not seen.broken_images and not seen.errors, (seen.broken_images, seen.errors)
        assert shot.read_bytes().startswith(b"\x89PNG")
    _a_study_of_other_code_is_named_so_and_the_runs_own_preferred(tmp_path)     # the same run, re-rendered


def _a_study_of_other_code_is_named_so_and_the_runs_own_preferred(tmp_path):
    """A study in the report's drift/ folder (``python -m cases.drift_study -o report/drift``) made
    by other code than the run's: left out for the run's own study where there is one, else shown
    marked as not this run's, in the drift section and the findings; one of the run's code is shown
    plainly."""
    from reports import render
    [own] = sorted((tmp_path / "r").glob("runs/*/drift/swiglu_backward/drift.json"))
    study = json.loads(own.read_text())
    apart = tmp_path / "report" / "drift"
    apart.mkdir()
    study.pop("run")
    (apart / "drift.json").write_text(json.dumps({**study, "code": {**study["code"], "digest": "0" * 64,
                                                                     "commit": "1234567890abcdef"}}))
    page = render(tmp_path / "r", tmp_path / "report")
    html = unescape(page.read_text())
    assert "made by this run beside its cells" in html and str(own.parent) in html
    assert f"Left out: the study in <code>{apart}</code> (the study ran other code than this run's: " \
           "the study at commit 1234567890" in html
    assert "Not this run" not in findings_text(page) and "this run's study" in findings_text(page)

    shutil.rmtree(own.parent)                       # only the study of other code is left
    page = render(tmp_path / "r", tmp_path / "report")
    assert "Not this run's study: the study ran other code than this run's" in unescape(page.read_text())
    assert "Not this run's study: the study ran other code" in findings_text(page)
    assert f"the study in {apart}" in findings_text(page)

    (apart / "drift.json").write_text(json.dumps(study))     # the run's code: shown as it is
    page = render(tmp_path / "r", tmp_path / "report")
    assert "Not this run" not in page.read_text() and "Left out" not in page.read_text()
    assert "crosses the gate: article" in findings_text(page)


def test_a_run_without_a_report_makes_no_study(tmp_path):
    proc = _run("--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:]
    assert not sorted((tmp_path / "r").glob("runs/*/drift"))
    assert "drift study" not in proc.stdout
