"""A long case's progress: quiet while short, then its stages and rows with elapsed and left; lines
of many processes appended whole; the controller prints complete lines only; the comparison tells
its rows up to M; a distributed run shows the workers' lines on its terminal."""
from __future__ import annotations

import fcntl
import os
import re
import select
import subprocess
import sys
from pathlib import Path


from accuracy.compare import compare_case
from cases.progress import LINE_BYTES, CaseProgress, Follower, append_line
from cases.spec import CaseSpec, make_inputs
from operators.swiglu_backward import OPERATOR as SWIGLU
from operators.swiglu_backward.kernels.torch_autograd import torch_eager
from operators.swiglu_backward.schedule import TORCH_BF16

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_short_case_says_nothing():
    clock, lines = Clock(), []
    p = CaseProgress("C", lines.append, quiet=20, every=15, clock=clock)
    p.stage("backend b (1 of 1) called")
    clock.now = 5
    p.stage_done("backend b returned")
    p.stage("goldens and comparison")
    for done in range(1024, 8193, 1024):
        clock.now += 1
        p.rows(done, 8192)
    assert lines == []


def test_a_long_case_says_its_stage_rows_elapsed_and_left():
    clock, lines = Clock(), []
    p = CaseProgress("C", lines.append, quiet=20, every=15, clock=clock)
    p.stage("backend b (1 of 2) called")
    clock.now = 30
    p.stage_done("backend b returned")
    # the stage it was in when it became slow, then its end
    assert lines == ["C: backend b (1 of 2) called", "C: backend b returned after 30 s"]
    p.stage("goldens and comparison")
    for done in range(1, 101):            # one row a second from t=30
        clock.now = 30 + done
        p.rows(done, 100)
    rows = [line for line in lines if "rows" in line]
    # a line every 15 s and the last: rows 1 (its first), 16, 31, ..., 91, 100
    assert [int(re.search(r"rows (\d+)", line)[1]) for line in rows] == [1, 16, 31, 46, 61, 76, 91, 100]
    assert rows[3] == "C: goldens and comparison: rows 46 of 100 (46%), 46 s, about 54 s left"


def test_a_line_is_one_append(tmp_path, monkeypatch):
    """Lines of several workers never interleave: each is one ``write`` of under PIPE_BUF bytes
    to a file opened with O_APPEND (POSIX makes such a write atomic)."""
    writes = []
    real = os.write

    def write(fd, data):
        writes.append((fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND, len(data)))
        return real(fd, data)
    monkeypatch.setattr("cases.progress.os.write", write)
    path = tmp_path / "progress.log"
    for text in ("short", "x" * 10_000, "two\nlines"):
        append_line(path, text)
    assert writes == [(os.O_APPEND, 6), (os.O_APPEND, LINE_BYTES), (os.O_APPEND, 10)]
    assert LINE_BYTES <= select.PIPE_BUF
    assert path.read_text().splitlines() == ["short", "x" * (LINE_BYTES - 1), "two lines"]


def test_the_follower_prints_complete_lines_only(tmp_path):
    path, printed = tmp_path / "progress.log", []
    follower = Follower(path, printed.append, period=3600)
    follower._flush()                       # no file yet: nothing
    path.write_text("one\ntw")
    follower._flush()
    assert printed == ["progress: one"]
    with open(path, "a") as f:
        f.write("o\nthree\n")
    follower.start()
    follower.stop()
    assert printed == ["progress: one", "progress: two", "progress: three"]


class Recorder:
    def __init__(self):
        self.stages, self.told = [], []

    def stage(self, name):
        self.stages.append(name)

    def rows(self, done, total):
        self.told.append((done, total))


def test_the_comparison_tells_its_rows_up_to_m():
    spec = CaseSpec(1025, 96, 200, "unit", 0)
    inputs = make_inputs(spec)
    outputs = {"torch-eager": torch_eager(**{k: v.clone() for k, v in inputs.items()})}
    recorder = Recorder()
    compare_case(SWIGLU, inputs, outputs, {"torch-eager": TORCH_BF16}, chunk_rows=1024,
                 progress=recorder)
    assert recorder.stages == ["goldens and comparison"]
    done = [d for d, _ in recorder.told]
    assert done == [1024, 1025] and {t for _, t in recorder.told} == {1025}


def test_a_distributed_run_shows_the_workers_progress(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "cases/", "-n", "2", "-p", "no:cacheprovider",
                           "--profile", "none", "--case", "1025,96,200,unit", "--case", "2,96,200,unit",
                           "--backend", "torch-eager", "--progress-after", "0", "--results-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    [log] = tmp_path.glob("runs/*/progress.log")
    written = log.read_text().splitlines()
    for case in ("M1025-K96-N200-unit-s0", "M2-K96-N200-unit-s0"):
        assert any(f"{case}: goldens and comparison: rows" in line for line in written), written
    shown = [line for line in proc.stdout.splitlines() if line.startswith("progress: ")]
    assert sorted(shown) == sorted(f"progress: {line}" for line in written)
