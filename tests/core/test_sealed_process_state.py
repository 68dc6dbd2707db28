"""Process state beyond torch's flags that an in-process backend can change: each change fails
its own cell, naming it, and is undone before the goldens or the next backend run."""
from __future__ import annotations

import io
import signal
import sys
import warnings

import pytest
import torch

from cases.spec import CaseSpec, make_inputs
from kernels.registry import Backend
from kernels.runner import run_backend
from kernels.sealed_state import capture, changes
from kernels.torch_autograd import torch_eager

INPUTS = make_inputs(CaseSpec(2, 96, 200, "unit", 0))


def _then(change):
    def kernel(**inputs):
        out = torch_eager(**inputs)
        change()
        return out
    return kernel


def _bf16_fp32_matmuls():
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"


def _stdout():
    sys.stdout = io.StringIO()


HOSTILE = {
    "fp32 matmuls in bf16": (_bf16_fp32_matmuls, "fp32_precision"),
    "default device": (lambda: torch.set_default_device("meta"), "default_device"),
    "warnings as errors": (lambda: warnings.simplefilter("error"), "warnings filters that raise changed"),
    "an alarm pending": (lambda: signal.alarm(100), "pending_alarm"),
    "SIGTERM ignored": (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN), "SIGTERM replaced"),
    "stdout replaced": (_stdout, "sys.stdout replaced"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_process_state_change_fails_its_cell_and_is_undone(name):
    change, named = HOSTILE[name]
    before = capture()
    run = run_backend(Backend(f"hostile:{name}", _then(change)), INPUTS)
    after = capture()
    assert run.error is not None and named in run.error, run.error
    assert not changes(before, after), changes(before, after)
    assert run_backend(Backend("torch-eager", torch_eager), INPUTS).error is None
