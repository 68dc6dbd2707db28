"""The report's plot workers (``python -m reports.plots JOBFILE``) can draw every plot function:
a chunk a worker fails is redone in the rendering process, so a worker that cannot find a
function costs its whole chunk's time again, silently (the drift study's figures, defined after
the module's entry point, sent every chunk holding one back: the main command's report took
20 s instead of 13 s on 2 cores)."""
from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
from pathlib import Path

import reports.plots as plots

ROOT = Path(__file__).resolve().parents[2]


def test_a_plot_worker_finds_the_last_plot_function(tmp_path):
    functions = [(inspect.getsourcelines(f)[1], name) for name, f in vars(plots).items()
                 if inspect.isfunction(f) and f.__module__ == plots.__name__ and not name.startswith("_")]
    last = max(functions)[1]
    job_file = tmp_path / "jobs.pickle"
    job_file.write_bytes(pickle.dumps([(last, (), tmp_path / "x.png")]))
    done = subprocess.run([sys.executable, "-m", "reports.plots", str(job_file)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    # called without its arguments: it was found, and it refused them
    assert done.returncode != 0 and f"{last}() missing" in done.stderr, done.stderr[-2000:]
