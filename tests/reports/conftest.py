"""Real records from the real pipeline (tiny cases), computed once per test session even under
pytest-xdist (the first worker computes, the others wait on a file lock and read the file)."""
from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest

from tests.reports.helpers import HOSTILE, renamed
from operators.swiglu_backward import OPERATOR as SWIGLU

WRONG = "tests.reports.kernels:wrong_db_g"
# K, N tiny: the point is the record format and the page, not the numbers
CASES = ((2, "unit"), (1025, "seed"), (3, "saturating"))
K, N = 8, 16


def _root(tmp_path_factory) -> Path:
    root = tmp_path_factory.getbasetemp()
    return root.parent if root.name.startswith("popen-gw") else root


def _shared(tmp_path_factory, name, make):
    """Compute ``make()`` (JSON-able) once per session across xdist workers."""
    root = _root(tmp_path_factory)
    path = root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            path.write_text(json.dumps(make()))
    return json.loads(path.read_text())


def _real_records():
    from runs.results import to_json
    from cases.evaluate import evaluate_case, golden_records, records_for
    from cases.spec import CaseSpec
    from kernels.registry import resolve
    backends = [resolve(SWIGLU, "torch-eager"), resolve(SWIGLU, "tiled-emulation"), resolve(SWIGLU, WRONG)]
    records = []
    for m, scale in CASES:
        outcome = evaluate_case(CaseSpec(m, K, N, scale, 0), backends)
        for b in backends:
            records += records_for(outcome, b.name)
        records += golden_records(outcome)
    return to_json(renamed(records, WRONG, HOSTILE))


@pytest.fixture(scope="session")
def real_records(tmp_path_factory):
    return _shared(tmp_path_factory, "reports-real-records", _real_records)


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory, real_records):
    """A results directory holding the real records (as the pytest session writes it)."""
    d = tmp_path_factory.mktemp("results")
    (d / "results.json").write_text(json.dumps({"schema": 1, "records": real_records}))
    return d


@pytest.fixture(scope="session")
def rendered(tmp_path_factory, real_records):
    """The rendered report of the real records (the heatmap from their per-tile drift), rendered
    once per session into a directory shared by the xdist workers."""
    from reports import render
    root = _root(tmp_path_factory)
    out = root / "report"
    with open(root / "report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "index.html").exists():
            results = root / "report-results"
            results.mkdir(exist_ok=True)
            (results / "results.json").write_text(json.dumps({"schema": 1, "records": real_records}))
            render(results, out)
    return out / "index.html"
