"""Run one backend on one case, safely: clones in, contract checked, failures kept as data.

A backend that raises, returns the wrong thing or writes into its inputs never
takes the run down: the result says what happened, in words that name the
backend and the tensor, and the case matrix turns it into that cell's failure.
"""
from __future__ import annotations

import contextlib
import io
import signal
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from contract.backend import (BackendUnsupported, ContractError, changed_since, clone_inputs, input_digests,
                              mutated_inputs, validate_outputs)
from contract.operator import Operator
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
    output: str | None = None     # what the backend printed during its call, capped (TailBuffer)
    # not called: its outputs are this layer of the case's golden pass (``goldens.emulation``)
    served: str | None = None

    @property
    def ok(self) -> bool:
        return self.outputs is not None


def _sync(inputs: Mapping[str, torch.Tensor]) -> None:
    first = next(iter(inputs.values()))     # the contract puts every input on one device
    if first.is_cuda:
        torch.cuda.synchronize(first.device)


# What a cell keeps of a backend's own text (an exception message, its printed output): enough for
# a traceback's last frames and a message, little enough that a backend printing megabytes cannot
# flood the terminal, the shard and the report (a 1 MB message was copied whole into all three).
TEXT_CAP = 4000


def capped(text: str, cap: int = TEXT_CAP) -> str:
    """``text``, or its first and last ``cap / 2`` characters and how many were left out."""
    if len(text) <= cap:
        return text
    half = cap // 2
    return f"{text[:half]}\n... ({len(text) - 2 * half} characters left out) ...\n{text[-half:]}"


def describe(exc: BaseException) -> str:
    """``Type: message``, even for an exception whose ``__str__`` itself raises; capped."""
    try:
        text = str(exc)
    except BaseException as inner:   # noqa: BLE001 - user code: anything can happen here
        text = f"<str() of the exception raised {type(inner).__name__}>"
    return capped(f"{type(exc).__name__}: {text}")


def _frames(exc: BaseException) -> str:
    try:
        frames = traceback.extract_tb(exc.__traceback__)[-3:]
        return capped("".join(traceback.format_list(frames)).rstrip())
    except BaseException:   # noqa: BLE001
        return ""


class TailBuffer(io.TextIOBase):
    """A text stream that keeps the last ``cap`` characters written and counts the rest."""

    def __init__(self, cap: int = TEXT_CAP):
        self.cap, self.parts, self.kept, self.dropped = cap, [], 0, 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        self.parts.append(text)
        self.kept += len(text)
        while self.kept > self.cap and len(self.parts) > 1:
            self.kept -= len(self.parts[0])
            self.dropped += len(self.parts.pop(0))
        if self.kept > self.cap:      # one part longer than the cap
            self.dropped += self.kept - self.cap
            self.parts[0] = self.parts[0][-self.cap:]
            self.kept = self.cap
        return len(text)

    def text(self) -> str:
        body = "".join(self.parts)
        return f"... ({self.dropped} characters left out) ...\n{body}" if self.dropped else body


class _SigintWatch:
    """Tells a Ctrl-C of the user from a KeyboardInterrupt a backend raises itself: while the backend
    runs (in the main thread), SIGINT is recorded before it raises as it always does."""

    def __init__(self):
        self.seen, self.previous = False, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.getsignal(signal.SIGINT)

            def on_sigint(signum, frame):
                self.seen = True
                raise KeyboardInterrupt
            signal.signal(signal.SIGINT, on_sigint)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False


def run_backend(operator: Operator, backend: Backend, inputs: Mapping[str, torch.Tensor], *,
                private_inputs: bool = False, caller_checks_inputs: bool = False) -> BackendRun:
    """``backend`` on ``inputs`` of ``operator``, its outputs checked against the operator's
    declaration. ``private_inputs``: the caller discards ``inputs`` after this call (the isolated child
    regenerates them per case), so the backend gets them as they are and a write into them is
    detected by digests (``contract.backend.input_digests``) instead of against clones: the
    article's case then holds one copy of its 1.6 GB of inputs instead of two.
    ``caller_checks_inputs`` (with ``private_inputs``): no digests; the caller holds the originals and
    compares (``wrote_into_inputs``): the isolated child given a copy of the parent's inputs, where
    two BLAKE2b passes over the article's case's inputs took 3.2 s and the parent's compare 0.2 s."""
    if private_inputs:
        digests, clones = (None if caller_checks_inputs else input_digests(inputs)), dict(inputs)
    else:
        digests, clones = None, clone_inputs(inputs)
    _sync(inputs)
    start = time.perf_counter()
    seal = None
    printed = TailBuffer()
    watch = _SigintWatch()
    try:
        # the redirection encloses the seal: the stream the seal sees before and after is the same
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed), watch, sealed() as seal:
            raw = backend(**clones)
            _sync(inputs)
    except BackendUnsupported as exc:
        return BackendRun(backend.name, skipped=f"backend {backend.name!r} cannot run this case here: {exc}",
                          output=printed.text() or None)
    except KeyboardInterrupt as exc:
        if watch.seen:       # the user's Ctrl-C: the run stops
            raise
        return BackendRun(backend.name, error=f"backend {backend.name!r} raised KeyboardInterrupt itself (no "
                                              f"Ctrl-C was pressed)\n" + _frames(exc), output=printed.text() or None)
    except BaseException as exc:  # any failure of user code (sys.exit included) is this cell's verdict
        return BackendRun(backend.name, error=f"backend {backend.name!r} raised {describe(exc)}\n" + _frames(exc),
                          output=printed.text() or None)
    seconds = time.perf_counter() - start
    output = printed.text() or None
    leaked = seal.message(backend.name)
    if leaked:
        return BackendRun(backend.name, error=leaked, seconds=seconds, output=output)
    try:
        outputs = validate_outputs(operator, backend.name, raw, inputs)
        del raw      # the copies are judged; the backend's own buffers go unless it holds them
    except ContractError as exc:
        return BackendRun(backend.name, error=capped(str(exc)), seconds=seconds, output=output)
    except Exception as exc:   # a returned object whose own methods raise (a hostile Mapping, say)
        return BackendRun(backend.name, error=f"backend {backend.name!r} returned outputs that cannot be read: "
                                              f"{describe(exc)}", seconds=seconds, output=output)
    run = BackendRun(backend.name, outputs=outputs, seconds=seconds, output=output)
    if private_inputs:
        changed = [] if digests is None else changed_since(digests, clones)
    else:
        changed = mutated_inputs(inputs, clones)
    return wrote_into_inputs(operator, run, changed)


def wrote_into_inputs(operator: Operator, run: BackendRun, changed: list[str]) -> BackendRun:
    """``run``, or its cell's error where the backend wrote into the inputs ``changed``."""
    if not changed:
        return run
    return BackendRun(run.backend, error=f"backend {run.backend!r} wrote into its inputs {changed}: a kernel "
                                         f"must leave {', '.join(operator.input_names)} untouched",
                      seconds=run.seconds, output=run.output)
