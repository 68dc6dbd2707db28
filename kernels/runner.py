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

from kernels.contract import (BackendUnsupported, ContractError, changed_since, clone_inputs, input_digests,
                              mutated_inputs, validate_outputs)
from kernels.registry import Backend
from kernels.sealed_state import sealed


@dataclass
class BackendRun:
    backend: str
    outputs: dict[str, torch.Tensor] | None = None
    error: str | None = None      # the cell fails with this message
    skipped: str | None = None    # the backend cannot run this case here; the cell skips
    seconds: float | None = None
    status: str | None = None     # "crashed" or "timed_out" when its process died or was killed
    determinism: dict | None = None   # with --repeats: bit-identity and spread over the repeats

    @property
    def ok(self) -> bool:
        return self.outputs is not None


def _sync(inputs: Mapping[str, torch.Tensor]) -> None:
    first = next(iter(inputs.values()))     # the contract puts every input on one device
    if first.is_cuda:
        torch.cuda.synchronize(first.device)


def describe(exc: BaseException) -> str:
    """``Type: message``, even for an exception whose ``__str__`` itself raises."""
    try:
        text = str(exc)
    except BaseException as inner:   # noqa: BLE001 - user code: anything can happen here
        text = f"<str() of the exception raised {type(inner).__name__}>"
    return f"{type(exc).__name__}: {text}"


def _frames(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)[-3:]).rstrip()
    except BaseException:   # noqa: BLE001
        return ""


def run_backend(backend: Backend, inputs: Mapping[str, torch.Tensor], *, private_inputs: bool = False) -> BackendRun:
    """``private_inputs``: the caller discards ``inputs`` after this call (the isolated child
    regenerates them per case), so the backend gets them as they are and a write into them is
    detected by digests (``kernels.contract.input_digests``) instead of against clones: the
    article's case then holds one copy of its 1.6 GB of inputs instead of two."""
    if private_inputs:
        digests, clones = input_digests(inputs), dict(inputs)
    else:
        digests, clones = None, clone_inputs(inputs)
    _sync(inputs)
    start = time.perf_counter()
    seal = None
    try:
        with sealed() as seal:
            raw = backend(**clones)
            _sync(inputs)
    except BackendUnsupported as exc:
        return BackendRun(backend.name, skipped=f"backend {backend.name!r} cannot run this case here: {exc}")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # any failure of user code (sys.exit included) is this cell's verdict
        return BackendRun(backend.name, error=f"backend {backend.name!r} raised {describe(exc)}\n" + _frames(exc))
    seconds = time.perf_counter() - start
    leaked = seal.message(backend.name)
    if leaked:
        return BackendRun(backend.name, error=leaked, seconds=seconds)
    try:
        outputs = validate_outputs(backend.name, raw, inputs)
        del raw      # the copies are judged; the backend's own buffers go unless it holds them
    except ContractError as exc:
        return BackendRun(backend.name, error=str(exc), seconds=seconds)
    except Exception as exc:   # a returned object whose own methods raise (a hostile Mapping, say)
        return BackendRun(backend.name, error=f"backend {backend.name!r} returned outputs that cannot be read: "
                                              f"{describe(exc)}", seconds=seconds)
    changed = changed_since(digests, clones) if digests is not None else mutated_inputs(inputs, clones)
    if changed:
        return BackendRun(backend.name, error=f"backend {backend.name!r} wrote into its inputs {changed}: a kernel "
                                              f"must leave x, w_g, w_fc, dy, g, fc untouched", seconds=seconds)
    return BackendRun(backend.name, outputs=outputs, seconds=seconds)
