"""Backends that leak global state, exit or raise oddly cost only their own cell.

Each hostile backend runs before torch-eager in one case; torch-eager must get the
verdicts it gets alone, and the hostile cell an error naming the backend and the leak.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from runs.platform_facts import fp32_keeps_subnormals
from cases.evaluate import evaluate_case
from cases.spec import CaseSpec
from kernels.registry import Backend, resolve
from operators.swiglu_backward.kernels.torch_autograd import torch_eager
from operators.swiglu_backward import OPERATOR as SWIGLU


ROOT = Path(__file__).resolve().parents[2]
SPEC = CaseSpec(1025, 96, 200, "tiny", 0)    # subnormal dg: a flushing golden would change the verdicts


def _flushes(**inputs):
    torch.set_flush_denormal(True)
    return torch_eager(**inputs)


def _no_grad(**inputs):
    out = torch_eager(**inputs)
    torch.set_grad_enabled(False)
    return out


def _moves_and_narrows(**inputs):
    os.chdir("/")
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    return torch_eager(**inputs)


def _exits(**inputs):
    sys.exit(3)


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no")


def _raises_unprintable(**inputs):
    raise _Unprintable()


def _verdicts(outcome, name):
    return {o: (v.passed, outcome.comparison["backends"][name][o]["reference"]["mismatches"])
            for o, v in outcome.verdicts[name].items()}


@pytest.fixture(scope="module")
def alone():
    return _verdicts(evaluate_case(SPEC, [resolve(SWIGLU, "torch-eager")]), "torch-eager")


@pytest.mark.parametrize("fn, leak", [
    (_flushes, "subnormals_kept True -> False"),
    (_no_grad, "grad_enabled True -> False"),
    (_moves_and_narrows, "cwd"),
])
def test_a_backend_that_leaks_state_fails_alone_and_is_restored(fn, leak, alone):
    cwd, threads = os.getcwd(), torch.get_num_threads()
    outcome = evaluate_case(SPEC, [Backend("hostile", fn), resolve(SWIGLU, "torch-eager")])
    error = outcome.runs["hostile"].error
    assert error and "backend 'hostile' changed process-wide state" in error and leak in error, error
    assert _verdicts(outcome, "torch-eager") == alone
    assert os.getcwd() == cwd and torch.get_num_threads() == threads and torch.is_grad_enabled()
    assert torch.get_default_dtype() == torch.float32 and fp32_keeps_subnormals("cpu")


@pytest.mark.parametrize("fn, text", [(_exits, "SystemExit: 3"),
                                      (_raises_unprintable, "_Unprintable: <str() of the exception raised")])
def test_exits_and_unprintable_exceptions_fail_only_their_cell(fn, text, alone):
    outcome = evaluate_case(SPEC, [Backend("hostile", fn), resolve(SWIGLU, "torch-eager")])
    assert text in outcome.runs["hostile"].error
    assert _verdicts(outcome, "torch-eager") == alone


def test_worker_threads_started_under_ftz_do_not_reach_the_goldens():
    """In a fresh process the backend raises the thread count under FTZ/DAZ: the new worker threads
    keep it after it is unset. The seal restores the count (only clean threads are used again),
    torch-eager's verdicts are those it gets alone, and FP32 keeps subnormals afterwards."""
    code = textwrap.dedent("""
        import torch
        from runs.platform_facts import fp32_keeps_subnormals
        from cases.evaluate import evaluate_case
        from cases.spec import CaseSpec
        from kernels.registry import Backend, resolve
        from operators.swiglu_backward import OPERATOR as SWIGLU
        from operators.swiglu_backward.kernels.torch_autograd import torch_eager
        def poison(**inputs):
            torch.set_flush_denormal(True)
            torch.set_num_threads(4)
            torch.ones(1 << 22).sum()
            torch.set_flush_denormal(False)
            return torch_eager(**inputs)
        spec = CaseSpec(1025, 96, 200, "tiny", 0)
        def verdicts(o):
            return {k: (v.passed, o.comparison["backends"]["torch-eager"][k]["reference"]["mismatches"])
                    for k, v in o.verdicts["torch-eager"].items()}
        mixed = evaluate_case(spec, [Backend("hostile", poison), resolve(SWIGLU, "torch-eager")])
        print("ERROR:", mixed.runs["hostile"].error)
        alone = evaluate_case(spec, [resolve(SWIGLU, "torch-eager")])
        print("SAME:", verdicts(mixed) == verdicts(alone), "KEPT:", fp32_keeps_subnormals("cpu"))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "SAME: True KEPT: True" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "subnormals_kept True -> False" in proc.stdout, proc.stdout


def test_a_pool_that_keeps_flushing_sends_the_process_single_threaded():
    """The last resort, in a fresh process whose worker threads all started under FTZ/DAZ: unsetting
    it does not reach them, so restore() goes single-threaded and FP32 keeps subnormals again."""
    code = textwrap.dedent("""
        import dataclasses, torch
        from runs.platform_facts import fp32_keeps_subnormals
        from kernels.sealed_state import capture, restore
        torch.set_flush_denormal(True)
        torch.ones(1 << 22).sum()
        torch.set_flush_denormal(False)
        after = capture()
        print("POISONED:", not after.subnormals_kept)
        notes = restore(dataclasses.replace(after, subnormals_kept=True))
        print("NOTES:", notes, "KEPT:", fp32_keeps_subnormals("cpu"), "THREADS:", torch.get_num_threads())
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "POISONED: True" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "continues single-threaded" in proc.stdout and "KEPT: True THREADS: 1" in proc.stdout, proc.stdout


def _declares_a_string(**inputs):
    return torch_eager(**inputs)


_declares_a_string.schedule = "article"


def test_a_mistyped_schedule_fails_its_cell_and_stops_a_run_before_any_case(alone):
    outcome = evaluate_case(SPEC, [Backend("typo", _declares_a_string), resolve(SWIGLU, "torch-eager")])
    assert "fn.schedule is str" in outcome.runs["typo"].error
    assert _verdicts(outcome, "torch-eager") == alone
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "cases/", "--backend",
                           "tests.core.test_hostile_backends:_declares_a_string", "-k", "M2-K96"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4 and "fn.schedule is str" in proc.stderr + proc.stdout, proc.stdout[-2000:]


class _RaisingMapping(dict):
    def __getitem__(self, key):
        raise RuntimeError("boom")


def _returns_raising_mapping(**inputs):
    return _RaisingMapping(torch_eager(**inputs))


def _returns_int_key(**inputs):
    return {0: inputs["x"]}


def _returns_sparse_dg(**inputs):
    out = torch_eager(**inputs)
    return {**out, "dg": out["dg"].to_sparse()}


@pytest.mark.parametrize("fn, text", [
    (_returns_raising_mapping, "returned outputs that cannot be read: RuntimeError: boom"),
    (_returns_int_key, "did not return ['dg'"),
    (_returns_sparse_dg, "output 'dg' has layout torch.sparse_coo, expected a dense"),
])
def test_odd_return_values_fail_only_their_cell(fn, text, alone):
    outcome = evaluate_case(SPEC, [Backend("odd", fn), resolve(SWIGLU, "torch-eager")])
    assert text in outcome.runs["odd"].error, outcome.runs["odd"].error
    assert _verdicts(outcome, "torch-eager") == alone


_CALLS = {"n": 0}


def _flaky(**inputs):
    """Correct on odd calls; on even calls dw_g is off by a factor 1.5: a nondeterministic kernel."""
    _CALLS["n"] += 1
    out = torch_eager(**inputs)
    return out if _CALLS["n"] % 2 else {**out, "dw_g": (out["dw_g"].float() * 1.5).bfloat16()}


_flaky.schedule = torch_eager.schedule


def test_repeats_record_determinism_and_every_repeat_is_gated():
    spec = CaseSpec(1025, 96, 200, "unit", 0)
    _CALLS["n"] = 0
    outcome = evaluate_case(spec, [Backend("flaky", _flaky), resolve(SWIGLU, "torch-eager")], repeats=3)
    assert outcome.runs["flaky"].determinism["bit_identical"] is False
    assert outcome.runs["flaky"].determinism["differing_repeats"] == [2]
    assert outcome.runs["torch-eager"].determinism["bit_identical"] is True
    v = outcome.verdicts["flaky"]
    assert not v["dw_g"].passed and v["dw_g"].message.startswith("Repeat 2 of 3 (not bit-identical")
    assert all(v[o].passed for o in v if o != "dw_g"), {o: v[o].message for o in v if not v[o].passed}
    assert all(x.passed for x in outcome.verdicts["torch-eager"].values())
    assert set(outcome.comparison["backends"]) == {"flaky", "torch-eager"}


def _declines_small_values(**inputs):
    from contract.backend import BackendUnsupported
    if inputs["dy"].float().abs().max() < 2.0 ** -100:        # the tiny profile: where its error shows
        raise BackendUnsupported("this kernel's tiles do not support this shape")
    return {k: v * 1.5 for k, v in torch_eager(**inputs).items()}


def _declines_long_cases(**inputs):
    from contract.backend import BackendUnsupported
    if inputs["x"].shape[0] > 1000:
        raise BackendUnsupported("above this kernel's 1000 rows")
    return torch_eager(**inputs)


def test_a_backend_declines_a_case_by_its_shapes_not_by_its_values():
    """A wrong kernel that declined exactly the cases exposing it passed the run with skips (found
    by an adversarial sweep). The backend is called again on the case's shapes with other values:
    declining those too keeps the skip, running them fails the cell."""
    outcome = evaluate_case(SPEC, [Backend("hostile:declines-values", _declines_small_values)])
    run = outcome.runs["hostile:declines-values"]
    assert not run.skipped and "by its shapes, dtype or device, not by its values" in run.error, run
    assert "(case M1025-K96-N200-seed-s0)" in run.error          # the first profile, the same shapes
    outcome = evaluate_case(SPEC, [Backend("declines-shapes", _declines_long_cases)])
    run = outcome.runs["declines-shapes"]
    assert run.error is None and "above this kernel's 1000 rows" in run.skipped, run


def _declines_long_cases_hangs_on_others(**inputs):
    """Declines the case by its rows; on the probe's other values (the seed profile) never returns."""
    import time
    if inputs["dy"].float().abs().max() > 2.0 ** -100:
        time.sleep(600)
    return _declines_long_cases(**inputs)


@pytest.mark.parametrize("fn, judged", [(_declines_small_values, "by its shapes, dtype or device, not by its values"),
                                        (_declines_long_cases, None),
                                        (_declines_long_cases_hangs_on_others, "timed out")])
def test_an_isolated_backend_s_skip_is_probed_beside_the_goldens(fn, judged):
    """Isolated, the probe's call runs in the backend's child while the goldens are computed, and
    is judged as in the framework's process: the skip stands, fails the cell, or the probe's hang
    ends at --cell-timeout; the other backends' cells are unaffected."""
    backend = resolve(SWIGLU, f"{__name__}:{fn.__name__}")
    outcome = evaluate_case(SPEC, [backend, resolve(SWIGLU, "torch-eager")], isolate=True, cell_timeout=5)
    run = outcome.runs[backend.name]
    if judged is None:
        assert run.error is None and "above this kernel's 1000 rows" in run.skipped, run
    else:
        assert not run.skipped and judged in run.error and "(case M1025-K96-N200-seed-s0)" in run.error, run
    assert set(outcome.verdicts) == {"torch-eager"}
    again = evaluate_case(SPEC, [backend], isolate=True, cell_timeout=5)     # its child still answers
    assert (again.runs[backend.name].skipped is None) == (judged is not None)
