"""``--resume RUN``: a run whose controller was SIGKILLed is continued by a second run of only the
cells RUN has no record for, and the new run's records equal an uninterrupted run's; RUN's folder is
never written; a run planned or judged otherwise is refused naming the field; resuming a complete
run runs nothing and writes the same records."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
# the module fixtures run the matrix in subprocesses (20-50 s each): made once, on one worker
pytestmark = pytest.mark.xdist_group("resume")
WRONG = "operators.swiglu_backward.kernels.plain:round_up_stores"
CASES = ("64,96,200,unit", "1025,96,200,unit", "128,96,200,unit")
BACKENDS = ("torch-eager", WRONG, "operators.swiglu_backward.kernels.plain:plain")
ARGS = ["--profile", "none", *(a for c in CASES for a in ("--case", c)), *(a for b in BACKENDS for a in ("--backend", b))]
CELLS = len(CASES) * len(BACKENDS)
PYTEST = [sys.executable, "-m", "pytest", "-q", "cases/", "-p", "no:xdist", "-p", "no:cacheprovider"]


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*PYTEST, *ARGS, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _cell_files(results: Path) -> list[Path]:
    return [p for p in results.glob("runs/*/shards/*/*.json") if not p.name.endswith("--goldens.json")
            and not p.name.startswith(".tmp-")]


def _results_file(results: Path) -> Path:
    [path] = sorted(results.glob("runs/*/results.json"))
    return path


def _diff(before: Path, after: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runs", "diff", str(before), str(after)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _keys(results_file: Path) -> list[tuple]:
    return [(r["case"], r["backend"], r["output"], r["golden"]) for r in json.loads(results_file.read_text())["records"]]


def _snapshot(folder: Path) -> dict:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("whole")
    proc = _run("--results-dir", str(results))
    assert proc.returncode == 1, proc.stdout[-2000:]      # the wrong kernel fails its cells
    assert len(_cell_files(results)) == CELLS
    return results


def _killed_run(results: Path) -> int:
    """Start the matrix and SIGKILL its controller once about half of its cells have records."""
    proc = subprocess.Popen([*PYTEST, *ARGS, "--results-dir", str(results)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while len(_cell_files(results)) < CELLS // 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)      # the controller and any backend child it started
    finally:
        proc.wait(timeout=60)
    return len(_cell_files(results))


def test_a_killed_run_resumed_has_the_records_of_an_uninterrupted_one(uninterrupted, tmp_path):
    done = _killed_run(tmp_path / "killed")
    assert 0 < done < CELLS, f"{done} of {CELLS} cells had records when the controller was killed"
    assert not list((tmp_path / "killed").glob("runs/*/results.json"))
    [killed] = (tmp_path / "killed" / "runs").iterdir()
    before = _snapshot(killed)

    proc = _run("--results-dir", str(tmp_path / "resumed"), "--resume", str(tmp_path / "killed"))
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert f"{done} deselected" in proc.stdout and f"{done} cells carried over" in proc.stdout, proc.stdout[-3000:]
    resumed = _results_file(tmp_path / "resumed")
    assert len(_keys(resumed)) == len(set(_keys(resumed)))
    diff = _diff(uninterrupted, resumed)
    assert diff.returncode == 0 and " 0 differ, 0 only before, 0 only after" in diff.stdout, diff.stdout
    assert _snapshot(killed) == before, "the resumed run wrote into the run it continued"


def test_a_case_with_some_of_its_cells_recorded_keeps_its_goldens(uninterrupted, tmp_path):
    """The deterministic form of a kill between two cells of one case: the case is evaluated again
    for the one backend without a record, and its goldens are the first run's, once."""
    whole = _results_file(uninterrupted).parent
    killed = tmp_path / "killed" / "runs" / whole.name
    shutil.copytree(whole, killed, ignore=shutil.ignore_patterns("results.json", "cases"))
    [dropped] = [p for p in killed.glob("shards/*/*.json") if p.name.startswith("M1025") and "round" in p.name]
    dropped.unlink()
    proc = _run("--results-dir", str(tmp_path / "resumed"), "--resume", str(killed))
    assert proc.returncode == 1 and "1 failed" in proc.stdout and f"{CELLS - 1} cells carried over" in proc.stdout, \
        proc.stdout[-3000:]
    resumed = _results_file(tmp_path / "resumed")
    assert len(_keys(resumed)) == len(set(_keys(resumed))), "a record appears twice"
    diff = _diff(uninterrupted, resumed)
    assert diff.returncode == 0 and " 0 differ, 0 only before, 0 only after" in diff.stdout, diff.stdout


def test_resuming_a_complete_run_runs_nothing_and_writes_the_same_records(uninterrupted, tmp_path):
    proc = _run("--results-dir", str(tmp_path / "again"), "--resume", str(uninterrupted))
    assert proc.returncode == 1, proc.stdout[-3000:]       # its wrong kernel's cells still failed
    last = proc.stdout.strip().splitlines()[-1]
    assert f"{CELLS} deselected" in last and "passed" not in last and "failed" not in last, proc.stdout[-3000:]
    assert f"{CELLS} cells carried over" in proc.stdout and ", 0 run now" in proc.stdout, proc.stdout[-3000:]
    again = _results_file(tmp_path / "again")
    assert sorted(_keys(again)) == sorted(_keys(_results_file(uninterrupted)))
    diff = _diff(uninterrupted, again)
    assert diff.returncode == 0 and " 0 differ, 0 only before, 0 only after" in diff.stdout, diff.stdout


@pytest.mark.parametrize("change, field", [(["--seeds", "2"], "selection.seeds"),
                                           (["--gate", "both"], "selection.gate"),
                                           (["--backend", "torch-compile"], "selection.backends")])
def test_a_run_planned_otherwise_is_refused_naming_the_field(uninterrupted, tmp_path, change, field):
    proc = _run(*change, "--results-dir", str(tmp_path / "r"), "--resume", str(uninterrupted))
    text = proc.stdout + proc.stderr
    assert proc.returncode == 4 and "--resume" in text and f"differs on {field}:" in text, text[-2000:]
    assert "Traceback" not in text and not (tmp_path / "r" / "runs").exists(), text[-2000:]


def test_an_unreadable_run_is_one_line_and_exit_4(tmp_path):
    proc = _run("--results-dir", str(tmp_path / "r"), "--resume", str(tmp_path / "nope"))
    text = proc.stdout + proc.stderr
    assert proc.returncode == 4 and "--resume" in text and "Traceback" not in text, text[-2000:]


def test_framework_code_edited_since_the_run_is_refused():
    """A tree edited again after the run keeps its commit and its dirty flag: the code's digest
    (``runs.manifest.code_version``) tells the two apart."""
    from runs.manifest import code_version
    from runs.resume import manifest_mismatch
    now = {"framework": {"version": "1", **code_version()}, "device": "cpu", "selection": {"seeds": 1}}
    assert manifest_mismatch(now, now) is None
    before = {**now, "framework": {**now["framework"], "digest": "0" * 64}}
    assert "its manifest differs on framework.digest: '0000" in manifest_mismatch(before, now)


def test_a_kernel_edited_since_the_run_is_refused(tmp_path):
    """The backends' source files are part of what must match: records of a kernel's old code are
    never carried into a run of its new code."""
    kernel = tmp_path / "kernels_under_edit.py"
    kernel.write_text("from operators.swiglu_backward.kernels.plain import plain as backward\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    args = [*PYTEST, "--profile", "none", "--case", "64,96,200,unit", "--backend", "kernels_under_edit:backward",
            "--benchmark", "none"]
    first = subprocess.run([*args, "--results-dir", str(tmp_path / "a")], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-2000:]
    kernel.write_text(kernel.read_text() + "# edited: the same numbers, another file\n")
    again = subprocess.run([*args, "--results-dir", str(tmp_path / "b"), "--resume", str(tmp_path / "a")], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=600)
    text = again.stdout + again.stderr
    assert again.returncode == 4 and "differs on selection.kernel_sources:" in text, text[-2000:]
