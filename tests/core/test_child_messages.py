"""An isolated backend's process can reach the framework's pipe to its parent (the child's own
frame holds it). What it sends there is read as untrusted: nothing but the framework's message
types is built (no pickle that runs code in the parent), a result is validated and copied in the
parent, and a forged message fails only that backend's cell."""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from cases.evaluate import evaluate_case
from cases.spec import CaseSpec
from kernels.registry import resolve
from kernels.runner import BackendRun
from operators.rmsnorm_backward import OPERATOR as RMSNORM
from operators.rmsnorm_backward.backends import torch_eager

SPEC = CaseSpec(64, 256, "unit", 0, operator="rmsnorm_backward")
MARKER = Path(tempfile.gettempdir()) / f"child-message-payload-{os.getuid()}"


def _pipe():
    """The framework's end of the pipe in this child: a local of ``kernels.isolated._child``."""
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "_child":
            return frame.f_locals["conn"]
        frame = frame.f_back
    raise RuntimeError("not in an isolated child")


class _Payload:
    def __reduce__(self):           # unpickled by a plain unpickler, this opens a file in the parent
        return (open, (str(MARKER), "w"))


def sends_a_payload(**inputs):
    _pipe().send(("done", _Payload()))
    os._exit(0)


def sends_junk(**inputs):
    _pipe().send(("done", 12345))
    os._exit(0)


def sends_wrong_shapes(**inputs):
    _pipe().send(("done", BackendRun("x", outputs={"dx": torch.zeros(3, dtype=torch.bfloat16),
                                                    "dw": torch.zeros(2, dtype=torch.bfloat16)})))
    time.sleep(2)
    os._exit(0)


def fixes_its_outputs_later(**inputs):
    """Returns zeros, then writes the right values into whatever shared outputs its process holds,
    once the parent has them (a thread polling for the shared copies after the call)."""
    right = torch_eager(**inputs)
    wrong = {k: torch.zeros_like(v) for k, v in right.items()}

    def fix():
        import gc
        deadline = time.time() + 5
        while time.time() < deadline:
            for obj in gc.get_objects():
                if isinstance(obj, BackendRun) and obj.outputs and obj.outputs["dx"].is_shared():
                    time.sleep(0.05)            # the parent has received them by now
                    for k, v in right.items():
                        obj.outputs[k].copy_(v)
                    return
            time.sleep(0.01)
    threading.Thread(target=fix, daemon=True).start()
    return wrong


def _evaluate(fn):
    attack = resolve(RMSNORM, f"{__name__}:{fn.__name__}")
    return attack.name, evaluate_case(SPEC, [attack, resolve(RMSNORM, "torch-eager")], isolate=True,
                                      cell_timeout=10, benchmark=None)


def _eager_passes(outcome):
    verdicts = outcome.verdicts["torch-eager"]
    return outcome.error is None and all(v.passed for v in verdicts.values())


def test_a_pickle_that_runs_code_is_not_built_in_the_parent():
    MARKER.unlink(missing_ok=True)
    name, outcome = _evaluate(sends_a_payload)
    assert not MARKER.exists()
    assert "a message the framework does not send" in outcome.runs[name].error, outcome.runs[name]
    assert _eager_passes(outcome)


def test_forged_results_fail_only_their_own_cell():
    name, outcome = _evaluate(sends_junk)
    assert "a message the framework does not send" in outcome.runs[name].error
    assert _eager_passes(outcome)
    name, outcome = _evaluate(sends_wrong_shapes)
    assert "has shape (3,), expected" in outcome.runs[name].error, outcome.runs[name]
    assert _eager_passes(outcome)


def test_what_the_child_writes_after_handing_over_is_not_judged():
    name, outcome = _evaluate(fixes_its_outputs_later)
    assert not any(v.passed for v in outcome.verdicts[name].values()), outcome.verdicts[name]
    assert _eager_passes(outcome)


def holds_the_interpreter(**inputs):
    """Right outputs, and a thread that takes the interpreter's lock for good (a C call made with
    it held) once the call is over: the child cannot start its next call."""
    import ctypes

    def hold():
        time.sleep(2)           # after the call's result has gone to the parent
        ctypes.PyDLL(None).sleep(3600)
    threading.Thread(target=hold, daemon=True).start()
    return torch_eager(**inputs)


def test_a_child_that_cannot_start_its_next_call_times_out_at_the_cell_timeout():
    name, first = _evaluate(holds_the_interpreter)
    assert all(v.passed for v in first.verdicts[name].values()), (first.runs[name], first.verdicts.get(name))
    time.sleep(3)           # its thread holds the lock by now
    start = time.perf_counter()
    name, again = _evaluate(holds_the_interpreter)
    assert time.perf_counter() - start < 60
    run = again.runs[name]
    assert run.status == "timed_out" and "its call had not started (--cell-timeout)" in run.error, run
    assert _eager_passes(again)


def test_originals_that_change_during_a_call_stop_the_case_instead_of_blaming_the_backend():
    """The parent compares a child's copy with its own originals; where the originals are what
    changed (another process wrote into the framework's memory), the case stops with that reason
    rather than failing the backend that happened to run."""
    import pytest
    from cases.spec import make_inputs
    from kernels.isolated import InputsMoved, begin_isolated, finish_isolated
    inputs = make_inputs(SPEC)
    eager = resolve(RMSNORM, "torch-eager")
    pending = begin_isolated(eager, SPEC, "cpu", inputs=inputs)
    inputs["dy"].view(torch.int16)[0, 0] ^= 1           # the originals, while the child runs
    with pytest.raises(InputsMoved, match=r"the case's inputs \['dy'\] changed in the framework's own process"):
        finish_isolated(pending, "cpu", timeout=30)
    fresh = make_inputs(SPEC)
    pending = begin_isolated(eager, SPEC, "cpu", inputs=fresh)
    assert finish_isolated(pending, "cpu", timeout=30).ok
