"""Run one backend on one case, safely: clones in, contract checked, failures kept as data.

A backend that raises, returns the wrong thing or writes into its inputs never
takes the run down: the result says what happened, in words that name the
backend and the tensor, and the case matrix turns it into that cell's failure.
"""
from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from kernels.contract import (BackendUnsupported, ContractError, clone_inputs, mutated_inputs,
                              validate_outputs)
from kernels.registry import Backend


@dataclass
class BackendRun:
    backend: str
    outputs: dict[str, torch.Tensor] | None = None
    error: str | None = None      # the cell fails with this message
    skipped: str | None = None    # the backend cannot run this case here; the cell skips
    seconds: float | None = None

    @property
    def ok(self) -> bool:
        return self.outputs is not None


def _sync(inputs: Mapping[str, torch.Tensor]) -> None:
    if inputs["x"].is_cuda:
        torch.cuda.synchronize(inputs["x"].device)


def run_backend(backend: Backend, inputs: Mapping[str, torch.Tensor]) -> BackendRun:
    clones = clone_inputs(inputs)
    _sync(inputs)
    start = time.perf_counter()
    try:
        raw = backend(**clones)
        _sync(inputs)
    except BackendUnsupported as exc:
        return BackendRun(backend.name, skipped=f"backend {backend.name!r} cannot run this case here: {exc}")
    except Exception as exc:  # any failure of user code is this cell's verdict, not the run's end
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
        return BackendRun(backend.name, error=f"backend {backend.name!r} raised {type(exc).__name__}: {exc}\n"
                                              + "".join(frames[-3:]).rstrip())
    seconds = time.perf_counter() - start
    try:
        outputs = validate_outputs(backend.name, raw, inputs)
    except ContractError as exc:
        return BackendRun(backend.name, error=str(exc), seconds=seconds)
    changed = mutated_inputs(inputs, clones)
    if changed:
        return BackendRun(backend.name, error=f"backend {backend.name!r} wrote into its inputs {changed}: a kernel "
                                              f"must leave x, w_g, w_fc, dy, g, fc untouched", seconds=seconds)
    return BackendRun(backend.name, outputs=outputs, seconds=seconds)
