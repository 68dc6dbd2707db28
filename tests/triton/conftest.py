"""Fixtures for the Triton backend's tests.

Why no process-wide ``TRITON_INTERPRET``: a bare ``@triton.jit`` reads that variable
once, when the kernel is decorated, so the usual recipe is to export it before
triton is imported. Under ``pytest -n auto`` that would leak into every other test
of the worker (and into any triton kernel they decorate). ``operators.swiglu_backward.kernels.triton`` wraps
its kernels explicitly per mode and reads the variable at call time instead, so
the ``interpreter`` fixture sets it with ``monkeypatch`` for one test only.
"""
from __future__ import annotations

import pytest
import torch


def _has_cuda() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


@pytest.fixture
def interpreter(monkeypatch):
    """triton's CPU interpreter for this test (skips if triton is not installed)."""
    triton = pytest.importorskip("triton", reason="triton is not installed (pip install '.[triton]')")
    from operators.swiglu_backward.kernels.triton.backend import interpreter_too_old
    if interpreter_too_old(triton.__version__):
        pytest.skip(f"triton {triton.__version__}'s interpreter cannot run the kernels (needs >= 3.9)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("SWIGLU_TRITON_INTERPRET_MAX_MKN", raising=False)


@pytest.fixture
def cuda(monkeypatch):
    """A CUDA device with triton, compiled kernels (never the interpreter)."""
    pytest.importorskip("triton", reason="triton is not installed (pip install '.[triton]')")
    if not _has_cuda():
        pytest.skip("no CUDA device is present (torch.cuda.is_available() is False)")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    return torch.device("cuda")
