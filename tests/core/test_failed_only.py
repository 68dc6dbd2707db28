"""``--failed-only RUN``: a second run of only the cells that did not pass in RUN, with the same
records for them; an unreadable RUN stops the run in one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRONG = "operators.swiglu_backward.kernels.plain:round_up_stores"
ARGS = ["--profile", "none", "--case", "64,96,200,unit", "--case", "1025,96,200,unit",
        "--backend", "torch-eager", "--backend", WRONG]


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "cases/", "-p", "no:xdist", "-p", "no:cacheprovider",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _records(results: Path) -> list[dict]:
    [path] = sorted(results.glob("runs/*/results.json"))
    return json.loads(path.read_text())["records"]


def test_only_the_cells_that_did_not_pass_run_again(tmp_path):
    first = _run(*ARGS, "--results-dir", str(tmp_path / "a"))
    assert first.returncode == 1, first.stdout[-2000:]
    again = _run(*ARGS, "--results-dir", str(tmp_path / "b"), "--failed-only", str(tmp_path / "a"))
    assert again.returncode == 1 and "2 failed, 2 deselected" in again.stdout, again.stdout[-2000:]
    before = {(r["case"], r["output"], r["golden"]): r["status"] for r in _records(tmp_path / "a")
              if r["backend"] == WRONG}
    after = _records(tmp_path / "b")
    assert {r["backend"] for r in after if not r["backend"].startswith("golden:")} == {WRONG}
    assert {(r["case"], r["output"], r["golden"]): r["status"] for r in after if r["backend"] == WRONG} == before


def test_an_unreadable_run_is_one_line_and_exit_4(tmp_path):
    proc = _run(*ARGS, "--results-dir", str(tmp_path / "r"), "--failed-only", str(tmp_path / "nope"))
    text = proc.stdout + proc.stderr
    assert proc.returncode == 4 and "--failed-only" in text and "Traceback" not in text, text[-2000:]
