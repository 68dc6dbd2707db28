"""``python -m accuracy shrink RESULTS CELL``: wrong kernels written here, run through the pytest
plugin at M=4097, K=96, N=200, then shrunk; the order of the search on a stand-in for the gate;
a refused RESULTS or CELL in one line (exit 2), a failure that does not reproduce (exit 1).

22 to 59 s measured on two shared cores: the run (three kernels at two cases, 5 s), a shrink of
11 evaluations, one of 4, the shrunk case's command run again through the plugin (7 s)."""
from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import operators
from cases.shrink import search as search_module
from cases.shrink.__main__ import main
from cases.shrink.cell import FailingCell, failing_cell
from cases.shrink.failure import Failure
from cases.shrink.probe import Probe
from cases.shrink.search import shrink
from cases.spec import CaseSpec
from contract.records import parse
from kernels.registry import Backend
from operators.swiglu_backward.kernels.plain import plain


ROOT = Path(__file__).resolve().parents[2]
# the module fixtures run the matrix in subprocesses (20-50 s each): made once, on one worker
pytestmark = pytest.mark.xdist_group("shrink")
FIRST_WRONG_ROW = 2048       # the tail kernel's dx is right above this row, wrong from it on
WRONG_FACTOR = 1.05          # 5%: over six times the gate's rtol (1/128)
CASE = (4097, 96, 200, "seed", 0)
CASE_ID = "M4097-K96-N200-seed-s0"
SMALL_CASE_ID = "M2-K96-N200-unit-s0"      # the tail kernel passes there (no row 2048)
WRONG_WHERE_TOLD = "SHRINK_TEST_WRONG"     # set in the run's environment only


def dx_wrong_from_row_2048(*, x, w_g, w_fc, dy, g, fc):
    """The plain kernel with dx rows from 2048 on scaled by 1.05: wrong only where M > 2048."""
    out = plain(x=x, w_g=w_g, w_fc=w_fc, dy=dy, g=g, fc=fc)
    dx = out["dx"].clone()
    dx[FIRST_WRONG_ROW:] = (dx[FIRST_WRONG_ROW:].float() * WRONG_FACTOR).to(torch.bfloat16)
    return {**out, "dx": dx}


def dg_wrong_everywhere(*, x, w_g, w_fc, dy, g, fc):
    """The plain kernel with every dg element scaled by 1.05: wrong at every M."""
    out = plain(x=x, w_g=w_g, w_fc=w_fc, dy=dy, g=g, fc=fc)
    return {**out, "dg": (out["dg"].float() * WRONG_FACTOR).to(torch.bfloat16)}


def dg_wrong_where_told(*, x, w_g, w_fc, dy, g, fc):
    """dg scaled by 1.05 where the environment says so, right elsewhere: a platform-dependent failure."""
    out = plain(x=x, w_g=w_g, w_fc=w_fc, dy=dy, g=g, fc=fc)
    if os.environ.get(WRONG_WHERE_TOLD):
        out["dg"] = (out["dg"].float() * WRONG_FACTOR).to(torch.bfloat16)
    return out


TAIL = f"{__name__}:dx_wrong_from_row_2048"
EVERYWHERE = f"{__name__}:dg_wrong_everywhere"
TOLD = f"{__name__}:dg_wrong_where_told"


def _pytest(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """One run: the three wrong kernels at M=4097, K=96, N=200 (seed profile) and at M=2."""
    results = tmp_path_factory.mktemp("shrink") / "results"
    proc = _pytest("cases/", "-p", "no:xdist", "--profile", "none", "--case", ",".join(map(str, CASE)),
                   "--case", "2,96,200,unit", "--backend", TAIL, "--backend", EVERYWHERE, "--backend", TOLD,
                   "--benchmark", "none", "--no-isolation", "--results-dir", str(results),
                   env={**os.environ, WRONG_WHERE_TOLD: "1"})
    assert proc.returncode == 1 and "5 failed, 1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    return results


def _shrink(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _line(out: str, key: str) -> str:
    [line] = [l for l in out.splitlines() if l.startswith(key + ": ")]
    return line[len(key) + 2:]


def test_a_bug_from_row_2048_shrinks_to_m_2049_and_its_command_fails_the_same_way(run, capsys, tmp_path):
    code, out, err = _shrink(capsys, run, f"{CASE_ID}:{TAIL}")
    assert code == 0, out + err
    shrunk = _line(out, "shrunk").split()[0]
    sizes, _, _ = parse(shrunk)
    assert (sizes["M"], sizes["K"], sizes["N"]) == (FIRST_WRONG_ROW + 1, CASE[1], CASE[2]), out
    steps = [l for l in err.splitlines() if l.startswith("step ")]
    assert steps[0].startswith(f"step 1, {CASE_ID}, fails dx by element-wise"), err
    assert _line(out, "search").startswith(f"{len(steps)} evaluations in"), out
    # found once by the search, judged once more at the end
    assert [l.split(", ")[1] for l in steps].count(shrunk) == 2 and steps[-1].split(", ")[1] == shrunk, err
    command = shlex.split(_line(out, "rerun"))
    assert command[:2] == ["pytest", "cases/"] and TAIL in command, command
    rerun = _pytest(*command[1:], "--results-dir", str(tmp_path / "rerun"))
    assert rerun.returncode == 1, rerun.stdout[-3000:]
    again = failing_cell(tmp_path / "rerun", f"{shrunk}:{TAIL}")
    assert (again.failure.output, again.failure.first) == ("dx", "element-wise")


def test_a_bug_at_every_m_shrinks_to_the_smallest_m_edge(run, capsys):
    code, out, err = _shrink(capsys, run, f"{CASE_ID}:{EVERYWHERE}")
    assert code == 0, out + err
    sizes, _, _ = parse(_line(out, "shrunk").split()[0])
    assert (sizes["M"], sizes["K"], sizes["N"]) == (min(operators.get().m_edges), CASE[1], CASE[2]), out
    assert "fails dg by element-wise" in _line(out, "shrunk")


def test_a_failure_that_does_not_reproduce_here_exits_1(run, capsys, monkeypatch):
    monkeypatch.delenv(WRONG_WHERE_TOLD, raising=False)
    code, out, err = _shrink(capsys, run, f"{SMALL_CASE_ID}:{TOLD}")
    assert code == 1 and "not reproduced here: passes dg" in out and "flaky" in out, out + err


@pytest.mark.parametrize("cell_text, says", [
    (CASE_ID, "failed for several backends"),
    (f"{SMALL_CASE_ID}:{TAIL}", "did not fail the gate"),
    (f"M3-K96-N200-unit-s0:{TAIL}", "unknown cell"),
    (f"{CASE_ID}:no.such:kernel", "unknown cell"),
    ("M4097:pypto", "expected CASE_ID:BACKEND"),
])
def test_a_bad_cell_is_one_line_and_exit_2(run, capsys, cell_text, says):
    code, out, err = _shrink(capsys, run, cell_text)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and says in err, err


def test_a_bad_results_path_is_one_line_and_exit_2(tmp_path, capsys):
    code, out, err = _shrink(capsys, tmp_path / "nothing", f"{CASE_ID}:{TAIL}")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "RESULTS" in err, err


# The search's order on a stand-in for the gate: ``fails(spec)`` decides each case, no kernel runs.

TARGET = Failure("dx", ("element-wise",))


def _search(monkeypatch, fails, spec: CaseSpec, *, budget: float = 60.0, seconds: float = 0.0):
    """``fails(case)``: True (the cell's failure), False (passes) or another ``Failure``."""
    judged = []
    target = TARGET

    def fake_probe(case, backend, output, *, timeout):
        judged.append(case.id)
        time.sleep(seconds)
        failure = fails(case)
        return Probe(case, target if failure is True else failure or None, None, seconds)

    monkeypatch.setattr(search_module, "probe", fake_probe)
    cell = FailingCell(spec, "stand-in", target)
    result = shrink(cell, Backend("stand-in", lambda **inputs: None), budget=budget, case_timeout=10,
                    stream=io.StringIO())
    return result, judged


def test_an_m_edge_below_a_passing_bisection_is_found(monkeypatch):
    """Fails at M=1025 and from M=3000 on, passes between: a bisection from 4097 alone would stop at 3000."""
    result, _ = _search(monkeypatch, lambda c: c.m == 1025 or c.m >= 3000, CaseSpec(*CASE))
    assert result.smallest.m == 1025


def test_m_is_bisected_below_the_smallest_failing_edge(monkeypatch):
    """Fails from M=2500 on: the edges up to 2049 pass, 3000 fails; the bisection stays between them."""
    result, judged = _search(monkeypatch, lambda c: c.m >= 2500, CaseSpec(*CASE))
    assert result.smallest.m == 2500
    edges = set(operators.get().m_edges)
    bisected = [parse(j)[0]["M"] for j in judged[1:] if parse(j)[0]["M"] not in edges]
    assert bisected and all(2049 < m < 3000 for m in bisected), judged


def test_a_case_failing_another_test_first_is_not_taken(monkeypatch):
    """Below M=2049 the stand-in fails dx by the fitted scale alone, or dg element-wise: another failure."""
    def fails(c):
        if c.m >= 2049:
            return True
        return Failure("dx", ("fitted scale",)) if c.m % 2 else Failure("dg", ("element-wise",))
    result, _ = _search(monkeypatch, fails, CaseSpec(*CASE))
    assert result.smallest.m == 2049


def test_the_other_dimensions_shrink_to_declared_shape_values(monkeypatch):
    """K=512, N=1024 failing at every size: K to 96, then N to 200 (the declared shapes' values)."""
    result, _ = _search(monkeypatch, lambda c: True, CaseSpec(4097, 512, 1024, "saturating", 3))
    assert result.smallest == CaseSpec(1, 96, 200, "unit", 0)


def test_a_failure_only_at_its_scale_and_seed_keeps_them(monkeypatch):
    spec = CaseSpec(1, 96, 200, "saturating", 3)
    result, judged = _search(monkeypatch, lambda c: c.scale == "saturating" and c.seed == 3, spec)
    assert result.smallest == spec and not result.smaller
    assert {"M1-K96-N200-unit-s3", "M1-K96-N200-seed-s3", "M1-K96-N200-saturating-s0"} <= set(judged), judged


def test_the_seed_profile_is_taken_where_unit_passes(monkeypatch):
    result, _ = _search(monkeypatch, lambda c: c.scale != "unit", CaseSpec(2, 96, 200, "saturating", 0))
    assert result.smallest == CaseSpec(1, 96, 200, "seed", 0)


def test_a_spent_budget_cuts_the_search_at_the_smallest_failing_case_so_far(monkeypatch):
    """Each stand-in evaluation takes 0.05 s, the budget 0.12 s: the original and at most two more
    cases (M=1 passes, M=2 fails), then the smallest failing one judged again."""
    result, judged = _search(monkeypatch, lambda c: c.m >= 2, CaseSpec(*CASE), budget=0.12, seconds=0.05)
    assert result.cut and len(judged) <= 4, judged
    searched = judged[1:4] if result.smaller else judged[1:]      # the last one re-verifies
    failing = [j for j in searched if parse(j)[0]["M"] >= 2]
    assert result.smallest.id == (failing[-1] if failing else CASE_ID), judged
    assert not result.smaller or judged[-1] == result.smallest.id, judged


def test_a_cut_search_says_so_and_prints_the_smallest_failing_case_so_far(run, capsys, monkeypatch):
    """The cell's failure on a stand-in that takes 0.05 s a case and fails at M=4097 only; budget 0.12 s."""
    def fake_probe(case, backend, output, *, timeout):
        time.sleep(0.05)
        failure = Failure("dx", ("element-wise",)) if case.m == CASE[0] else None
        return Probe(case, failure, None, 0.05)

    monkeypatch.setattr(search_module, "probe", fake_probe)
    code, out, err = _shrink(capsys, run, f"{CASE_ID}:{TAIL}", "--budget", "0.12")
    assert code == 0 and "search cut" in out and "no smaller case failed dx" in out, out + err
    assert f"--case {','.join(map(str, CASE))}" in _line(out, "rerun"), out


def test_python_m_accuracy_shrink_reaches_the_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "accuracy", "shrink", str(tmp_path / "none"), f"{CASE_ID}:{TAIL}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: RESULTS "), proc.stderr
