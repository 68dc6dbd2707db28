"""What one backend does stays in its own cell: an import that fails only in its child process,
megabytes printed, a megabyte exception message, a KeyboardInterrupt of its own, processes it forks."""
from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest

from cases.evaluate import evaluate_case
from cases.spec import CaseSpec
from kernels import isolated
from kernels.registry import Backend, resolve
from kernels.runner import TEXT_CAP, run_backend
from cases.spec import make_inputs
from operators.swiglu_backward import OPERATOR as SWIGLU

SPEC = CaseSpec(2, 96, 200, "unit", 0)

MODULE = textwrap.dedent("""
    import multiprocessing, os, sys, time
    if multiprocessing.current_process().name != "MainProcess":
        raise RuntimeError("this module refuses to load in a child process")

    from operators.swiglu_backward.kernels.torch_autograd import torch_eager

    def kernel(**inputs):
        return torch_eager(**inputs)

    def prints(**inputs):
        print("p" * 3_000_000)
        os.write(1, b"c" * 2_000_000)
        return torch_eager(**inputs)

    def long_message(**inputs):
        raise ValueError("y" * 1_000_000)

    def interrupts(**inputs):
        raise KeyboardInterrupt

    def ctrl_c(**inputs):
        import signal
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    def env_probe(**inputs):
        if os.environ.get("CELLS_CONFINED_PROBE") != "set after the fork server started":
            raise RuntimeError("the child's environment is not the run's")
        return torch_eager(**inputs)

    def forks(**inputs):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        with open(os.environ["FORKED_PID_FILE"], "w") as f:
            f.write(str(pid))
        return torch_eager(**inputs)
""")

MODULE_OK = MODULE.replace('if multiprocessing.current_process().name != "MainProcess":\n    raise', 'if False:\n    raise')


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    (tmp_path / "refuses_child.py").write_text(MODULE)
    (tmp_path / "loads_anywhere.py").write_text(MODULE_OK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    yield tmp_path
    isolated._stop_all()
    isolated._START_FAILED.clear()


def test_an_import_that_fails_in_the_child_fails_that_backend_only(plugin_dir):
    backends = [resolve(SWIGLU, "refuses_child:kernel"), resolve(SWIGLU, "torch-eager")]
    outcome = evaluate_case(SPEC, backends, isolate=True, benchmark=None)
    error = outcome.runs["refuses_child:kernel"].error
    assert error and "does not load in its own process" in error and "refuses to load" in error, error
    assert all(v.passed for v in outcome.verdicts["torch-eager"].values())


def test_printed_megabytes_stay_with_their_cell_and_are_capped(plugin_dir):
    for isolate in (True, False):
        outcome = evaluate_case(SPEC, [resolve(SWIGLU, "loads_anywhere:prints")], isolate=isolate, benchmark=None)
        output = outcome.runs["loads_anywhere:prints"].output
        assert output and "characters left out" in output and len(output) < 2 * TEXT_CAP + 200, (isolate, len(output))


def test_a_megabyte_exception_message_is_capped(plugin_dir):
    run = run_backend(SWIGLU, resolve(SWIGLU, "loads_anywhere:long_message"), make_inputs(SPEC))
    assert "ValueError" in run.error and "characters left out" in run.error and len(run.error) < 3 * TEXT_CAP


def test_a_keyboard_interrupt_of_the_backend_fails_its_cell_only(plugin_dir):
    run = run_backend(SWIGLU, resolve(SWIGLU, "loads_anywhere:interrupts"), make_inputs(SPEC))
    assert run.error and "KeyboardInterrupt itself" in run.error


def test_a_real_ctrl_c_during_a_backend_still_stops_the_run(plugin_dir):
    with pytest.raises(KeyboardInterrupt):
        run_backend(SWIGLU, resolve(SWIGLU, "loads_anywhere:ctrl_c"), make_inputs(SPEC))


def test_processes_a_backend_forks_die_with_its_child(plugin_dir, tmp_path, monkeypatch):
    pid_file = tmp_path / "forked.pid"
    monkeypatch.setenv("FORKED_PID_FILE", str(pid_file))
    outcome = evaluate_case(SPEC, [resolve(SWIGLU, "loads_anywhere:forks")], isolate=True, benchmark=None)
    assert outcome.runs["loads_anywhere:forks"].error is None
    pid = int(pid_file.read_text())
    os.kill(pid, 0)                      # alive while the child is
    isolated._stop_all()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            time.sleep(0.1)
        except ProcessLookupError:
            break
    else:
        pytest.fail(f"forked process {pid} outlived the backend's child")


def test_live_children_are_capped_least_recently_used_first(plugin_dir, monkeypatch):
    monkeypatch.setattr(isolated, "MAX_LIVE_CHILDREN", 2)
    names = ["torch-eager", "loads_anywhere:kernel", "operators.swiglu_backward.kernels.plain:plain"]
    outcome = evaluate_case(SPEC, [resolve(SWIGLU, n) for n in names], isolate=True, benchmark=None)
    assert all(outcome.runs[n].error is None for n in names)
    assert list(isolated._CHILDREN) == names[1:]


def test_a_child_has_the_runs_environment_and_the_fork_server_started_no_thread(plugin_dir, monkeypatch):
    """Children are forked from a fork server (``kernels.isolated``) that started before the
    variable was set: a child started after it has the run's environment all the same. The server
    imported torch and started no thread (Linux: counted in /proc)."""
    first = evaluate_case(SPEC, [resolve(SWIGLU, "loads_anywhere:kernel")], isolate=True, benchmark=None)
    assert first.runs["loads_anywhere:kernel"].error is None
    monkeypatch.setenv("CELLS_CONFINED_PROBE", "set after the fork server started")
    outcome = evaluate_case(SPEC, [resolve(SWIGLU, "loads_anywhere:env_probe")], isolate=True, benchmark=None)
    assert outcome.runs["loads_anywhere:env_probe"].error is None, outcome.runs["loads_anywhere:env_probe"].error
    from multiprocessing import forkserver
    server = forkserver._forkserver._forkserver_pid
    if not os.path.isdir(f"/proc/{server}/task"):
        pytest.skip("no /proc here to count the fork server's threads")
    assert len(os.listdir(f"/proc/{server}/task")) == 1
