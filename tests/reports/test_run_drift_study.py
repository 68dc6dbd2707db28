"""A run that writes a report makes its own small drift study beside its cells: the report's
drift section and the terminal summary show this run's study; a run without a report makes none."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reports.browser import check_page, find_chromium

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--profile", "none", "--case", "64,96,200,unit", "--backend", "torch-eager", "--benchmark", "none"]


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "cases/", "-p", "no:xdist", "-p", "no:cacheprovider",
                           *ARGS, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_a_run_with_a_report_draws_its_own_drift_study(tmp_path):
    proc = _run("--results-dir", str(tmp_path / "r"), "--report-dir", str(tmp_path / "report"), "--drift-seeds", "1")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 passed" in proc.stdout, proc.stdout[-2000:]          # the cell and the study
    [study] = sorted((tmp_path / "r").glob("runs/*/drift/swiglu_backward/drift.json"))
    assert "drift study (1 seeds, seed): crosses the gate: article" in proc.stdout, proc.stdout[-2000:]
    page = (tmp_path / "report" / "index.html").read_text()
    assert "made by this run beside its cells" in page and str(study.parent) in page
    for family in ("db", "dw"):
        assert f'alt="drift study of {family}"' in page
    assert sorted((tmp_path / "report").rglob("*study-d*.png"))
    if find_chromium() is None:      # the text above is checked; the browser's view where there is one
        return
    shot = tmp_path / "report" / "screenshot.png"
    seen = check_page(tmp_path / "report" / "index.html", screenshot=shot)
    study_images = [i for i in seen.images if "study-d" in i["src"]]
    assert len(study_images) >= 2 and not seen.broken_images and not seen.errors, (seen.broken_images, seen.errors)
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_a_run_without_a_report_makes_no_study(tmp_path):
    proc = _run("--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:]
    assert not sorted((tmp_path / "r").glob("runs/*/drift"))
    assert "drift study" not in proc.stdout
