"""Fixtures for the PyPTO backend's tests.

Tests that execute kernels need ``pypto==0.2.0`` (the interpreter drives its private
API) plus cmake and a C++ compiler for the one-time calculator build; they skip with
the reason when pypto is not importable. The target is forced to the CPU interpreter
for the test only (``monkeypatch``), so an NPU host runs these same tests on CPU.
"""
from __future__ import annotations

import importlib.util

import pytest


def _pypto_skip_reason() -> str | None:
    if importlib.util.find_spec("pypto") is None:
        return "pypto is not installed (pip install '.[pypto]', i.e. pypto==0.2.0)"
    from operators.swiglu_backward.kernels.pypto.interpreter import PyptoVersionError, check_version

    try:
        check_version()
    except PyptoVersionError as exc:
        return str(exc)
    return None


@pytest.fixture
def pypto_cpu(monkeypatch):
    """PyPTO's CPU interpreter for this test (skips if pypto 0.2.0 is not importable)."""
    reason = _pypto_skip_reason()
    if reason:
        pytest.skip(reason)
    monkeypatch.setenv("SWIGLU_PYPTO_TARGET", "cpu")
    monkeypatch.delenv("SWIGLU_PYPTO_CPU_CHUNK_ROWS", raising=False)
    monkeypatch.delenv("SWIGLU_PYPTO_CPU_MAX_M", raising=False)
    from operators.swiglu_backward.kernels.pypto import interpreter

    interpreter.load_calculator()
    return interpreter
