"""Each backend in a child process of its own: a crash or a hang costs only its own cell.

A backend is someone else's unfinished kernel: it may segfault, call ``os._exit``,
be killed by the OOM killer, or never return. Run in the framework's process, any of
these takes down the pytest-xdist worker and every case still queued on it. Here
each backend gets one long-lived child process (forked from a fork server: a process
started fresh, which imported torch and this module and never runs anything else, so no
thread pool, lock or state of the framework's process is inherited), which maps a copy of
the case's inputs made for its call in shared pages, or, where the parent holds none (the skip
probe's other values), regenerates them from a picklable input factory (the
case itself: ``InputFactory``; bit-identical inputs from its id), runs the backend through ``kernels.runner.run_backend``
(contract checks, state sealing) and hands the outputs back through shared memory:
one copy into shared pages, no pickle of the tensors' bytes. The parent waits at
most ``timeout`` seconds for the backend call (input generation and the hand-over
are not the backend's time): past it the child is killed and the cell is recorded
``timed_out``; a child that dies is recorded ``crashed`` with its exit code or
signal, and the next case gets a fresh child. The child lives across cases, so
compile caches (torch.compile, triton) stay warm.

Only backends that can be named (a registered name or ``package.module:callable``)
and inputs on the CPU run isolated; anything else runs in-process, as before.
"""
from __future__ import annotations

import atexit
import contextlib
import io
import os
import pickle
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.multiprocessing as mp

from contract.backend import ContractError, mutated_inputs, validate_outputs
from contract.operator import Operator
from kernels.registry import Backend, BackendNotFound, resolve_path
from kernels.runner import TEXT_CAP, BackendRun, TailBuffer, capped, describe, run_backend, wrote_into_inputs


class InputFactory(Protocol):
    """What the child makes a case's inputs from: a picklable value (``cases.spec.CaseSpec``)
    that names its operator and draws the same bits in any process."""

    @property
    def declaration(self) -> Operator: ...

    def inputs(self, device: str) -> dict[str, torch.Tensor]: ...

# A spawned child imports torch itself: 3-5 s of CPU per backend and per restart after a crash,
# paid by every test run that isolates its backends. The fork server pays it once per process;
# its children are forked from a process that imported and did nothing else (no thread started:
# tests/core/test_cells_confined.py counts the fork server's threads and checks a child's
# environment is the run's).
_CTX = mp.get_context("forkserver")
_CTX.set_forkserver_preload(["torch", __name__])
START_SECONDS = 300          # starting the fork server and importing the backend: seconds, not minutes


def _child(name: str, path: str, environment: dict[str, str], conn, module_path: list[str] | None = None) -> None:
    """The child's loop: one request (input factory, device) at a time, until told to stop (None).
    The child leads a session of its own, so whatever the backend forks is killed with it, and
    dies with its parent (a worker killed by SIGKILL leaves no child behind). Its environment is
    the framework's process's when the child started, as a spawned child's would be (the fork
    server's is the one it was started with), and so is its module search path."""
    os.setsid()
    if os.environ != environment:
        os.environ.clear()
        os.environ.update(environment)
    if module_path is not None:      # the modules the framework's process would import now
        sys.path[:] = module_path
    _die_with_parent()
    try:
        backend = resolve_path(name, path)
    except BaseException as exc:   # noqa: BLE001 - the parent fails this backend's cells with the reason
        conn.send(("failed", str(exc) if isinstance(exc, BackendNotFound) else describe(exc)))
        return
    conn.send("ready")
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):    # the parent is gone
            return
        if request is None:
            return
        factory, device, given = request
        inputs = factory.inputs(device) if given is None else given
        conn.send(("started", time.monotonic()))
        with _fd_output() as printed:     # what C code prints too, kept with this cell only
            # the inputs are this call's alone: no clones; a given copy the parent checks against its own
            run = run_backend(factory.declaration, backend, inputs, private_inputs=True,
                              caller_checks_inputs=given is not None)
        run.output = "\n".join(filter(None, (run.output, printed.text()))) or None
        del inputs
        if run.outputs is not None:
            run.outputs = {k: v.share_memory_() for k, v in run.outputs.items()}
        conn.send(("done", run))


def _die_with_parent() -> None:
    """Linux: SIGKILL to this process when its parent exits (prctl PR_SET_PDEATHSIG); elsewhere the
    child still ends when its pipe to the parent closes."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)      # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def _fd_output():
    """File descriptors 1 and 2 into a temporary file for the body; yields a ``TailBuffer`` that
    holds the file's last characters afterwards."""
    tail = TailBuffer()
    with tempfile.TemporaryFile() as sink:
        saved = [os.dup(1), os.dup(2)]
        try:
            for fd in (1, 2):
                os.dup2(sink.fileno(), fd)
            yield tail
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
            size = sink.seek(0, os.SEEK_END)
            sink.seek(max(0, size - TEXT_CAP))
            tail.dropped = max(0, size - TEXT_CAP)
            tail.write(sink.read().decode("utf-8", errors="replace"))


class ChildStartError(RuntimeError):
    """The backend's child process could not resolve it (its import failed there)."""


class _Child:
    def __init__(self, name: str, path: str, wait: bool = True):
        """The backend's child process, started; ``wait``: until it has imported the backend
        (``ChildStartError`` where it cannot), else ``wait_ready`` does that later."""
        self.name, self.path, self.ready = name, path, False
        self.conn, child_conn = _CTX.Pipe()
        self.proc = _CTX.Process(target=_child, args=(name, path, dict(os.environ), child_conn, list(sys.path)), daemon=True,
                                 name=f"backend:{name}")
        self.proc.start()
        child_conn.close()
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        if self.ready:
            return
        name, path = self.name, self.path
        if not self.conn.poll(START_SECONDS):
            self.kill()
            raise ChildStartError(f"backend {name!r}: its child process did not start in {START_SECONDS} s "
                                  f"(the fork server's start and the import of {path.partition(':')[0]!r})")
        try:
            message = _wait(self, 0)
        except ForgedMessage as exc:     # its module's import wrote to the pipe
            raise ChildStartError(f"backend {name!r}: its process sent a message the framework does not send "
                                  f"while importing it ({exc})") from None
        if message is None:
            raise ChildStartError(f"backend {name!r}: its child process died while starting "
                                  f"({self.death()})") from None
        if message != "ready":
            self.kill()
            why = message[1] if isinstance(message, tuple) and len(message) == 2 and message[0] == "failed" \
                and isinstance(message[1], str) else f"it sent {type(message).__name__} instead of its readiness"
            raise ChildStartError(f"backend {name!r} does not load in its own process: {why}")
        self.ready = True

    def alive(self) -> bool:
        return self.proc.is_alive()

    def kill(self) -> None:
        """The child and its whole session: processes the backend forked die with it."""
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.proc.join(10)
        except (OSError, EOFError):
            pass
        self.kill()

    def death(self) -> str:
        self.proc.join(10)
        code = self.proc.exitcode
        if code is None:
            return "its process stopped answering"
        if code < 0:
            try:
                return f"its process was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"its process was killed by signal {-code}"
        return f"its process exited with code {code}"


_CHILDREN: dict[str, _Child] = {}     # by import path, least recently used first
# Live children per process: each holds torch and its backend (~170 MB measured); a run with 67
# backends kept 134 alive over two workers and filled a 24 GiB machine. The least recently used
# child beyond this many is stopped; it starts again (seconds) if its backend comes back.
MAX_LIVE_CHILDREN = 8
_PENDING: set[str] = set()     # import paths whose child runs a call not yet collected: never stopped for room
_START_FAILED: dict[str, str] = {}     # import path -> why its child could not load it (not retried per case)


def _stop_all() -> None:
    for child in _CHILDREN.values():
        child.stop()
    _CHILDREN.clear()


atexit.register(_stop_all)


def can_isolate(backend: Backend, device: str) -> bool:
    """A backend the child can resolve to the same callable (by its import path), on the CPU."""
    if str(device).split(":")[0] != "cpu" or backend.path is None:
        return False
    try:
        return resolve_path(backend.name, backend.path).fn is backend.fn
    except BackendNotFound:
        return False


def check_import(name: str, path: str) -> None:
    """Import the backend's module in a child process first (raises ``ChildStartError``): a module
    that exits, crashes, hangs or fails while it imports stops the run with the reason before the
    framework's own process imports it (``cases.plugin`` does this for every module it does not
    hold yet)."""
    _Child(name, path).stop()


TIMED_OUT = ("timed_out",)


class _MessageUnpickler(pickle.Unpickler):
    """What a child may send: its messages' tuples and strings, a ``BackendRun`` and tensors in
    shared memory. The child runs the backend's code, which can reach the child's end of the pipe:
    an unpickler that built any class would run whatever such a backend chose in this process."""
    ALLOWED = {("kernels.runner", "BackendRun"), ("multiprocessing.resource_sharer", "DupFd"),
               ("torch", "Size"), ("torch", "Tensor"), ("torch.storage", "UntypedStorage"),
               ("torch.multiprocessing.reductions", "rebuild_storage_fd"),
               ("torch.multiprocessing.reductions", "rebuild_tensor"),
               ("torch.multiprocessing.reductions", "rebuild_typed_storage")}

    def find_class(self, module: str, name: str):
        if (module, name) in self.ALLOWED or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a child's message")


class ForgedMessage(Exception):
    """A message on a child's pipe that the framework's code in the child does not send."""


def _wait(child: _Child, timeout: float | None) -> tuple | None:
    """The child's next message; ``TIMED_OUT`` when ``timeout`` passed (the child is killed);
    None when it died. ``ForgedMessage`` (the child killed) for one that cannot be read."""
    if not child.conn.poll(timeout):
        child.kill()
        return TIMED_OUT
    try:
        data = child.conn.recv_bytes()
    except (EOFError, OSError):
        return None
    try:
        return _MessageUnpickler(io.BytesIO(data)).load()
    except Exception as exc:     # noqa: BLE001 - whatever the bytes were, they are not a message
        child.kill()
        raise ForgedMessage(f"{type(exc).__name__}: {exc}"[:300]) from None


def _shared_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in shared pages: the child maps it instead of drawing the inputs again."""
    copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype).share_memory_()
    return copy.copy_(t)


@dataclass
class PendingRun:
    """A backend call sent to its child and not yet collected (``begin_isolated``)."""
    backend: Backend
    key: str
    child: "_Child"
    start: float
    given: dict | None       # the shared copy of the inputs: kept until the child has answered
    inputs: dict | None      # the originals it was copied from, which the copy is checked against
    factory: InputFactory


def run_isolated(backend: Backend, factory: InputFactory, device: str, *, timeout: float | None,
                 inputs: dict[str, torch.Tensor] | None = None) -> BackendRun:
    """``run_backend`` in the backend's child process, on the inputs ``factory`` makes there, or on
    a copy of ``inputs`` (the case's, already made) handed over in shared pages: drawing the
    article's case's inputs takes 5.5 s, copying them 0.5 s. The copy is the child's alone, made
    for this call and dropped after it, so what the backend writes into it reaches no other
    backend and no golden. Crashes and timeouts become the cell's record."""
    pending = begin_isolated(backend, factory, device, inputs=inputs)
    return pending if isinstance(pending, BackendRun) else finish_isolated(pending, device, timeout=timeout)


def _start(backend: Backend, key: str, wait: bool = True) -> "_Child":
    idle = [k for k in _CHILDREN if k not in _PENDING]     # least recently used first
    while idle and len(_CHILDREN) >= MAX_LIVE_CHILDREN:
        _CHILDREN.pop(idle.pop(0)).stop()
    child = _CHILDREN[key] = _Child(backend.name, key, wait=wait)
    return child


def start_children(backends) -> None:
    """Start the children of these backends that have none, without waiting for them: they import
    their backends while this process draws a case's inputs (the first child of a process also
    starts the fork server: 3-4 s, beside the article's case's 5.5 s of inputs)."""
    for backend in backends:
        key = backend.path
        if key in _START_FAILED or key in _PENDING or len(_CHILDREN) >= MAX_LIVE_CHILDREN:
            continue
        child = _CHILDREN.get(key)
        if child is None or not child.alive():
            _start(backend, key, wait=False)


def begin_isolated(backend: Backend, factory: InputFactory, device: str, *,
                   inputs: dict[str, torch.Tensor] | None = None) -> PendingRun | BackendRun:
    """``run_isolated``'s first half: the call sent to the backend's child, which runs it while this
    process does other work; ``finish_isolated`` collects it. A run (an error) where it could not
    be sent."""
    key = backend.path
    if key in _START_FAILED:
        return BackendRun(backend.name, error=_START_FAILED[key])
    child = _CHILDREN.pop(key, None)
    if child is not None:
        _CHILDREN[key] = child      # now the most recently used
    try:
        if child is None or not child.alive():
            child = _start(backend, key)
        child.wait_ready()
    except ChildStartError as exc:     # every cell of this backend fails with the child's reason
        _CHILDREN.pop(key, None)
        _START_FAILED[key] = str(exc)
        return BackendRun(backend.name, error=str(exc))
    start = time.perf_counter()
    given = None if inputs is None else {k: _shared_copy(v) for k, v in inputs.items()}
    try:
        child.conn.send((factory, device, given))
    except (OSError, EOFError):
        _CHILDREN.pop(key, None)
        return BackendRun(backend.name, error=f"backend {backend.name!r} crashed: {child.death()}",
                          status="crashed")
    _PENDING.add(key)
    return PendingRun(backend, key, child, start, given, inputs, factory)


def finish_isolated(pending: PendingRun, device: str, *, timeout: float | None) -> BackendRun:
    """The run ``begin_isolated`` sent: its result, or its crash or timeout (``timeout`` seconds
    from now for the call to end)."""
    backend, key, child, start = pending.backend, pending.key, pending.child, pending.start
    # inputs drawn in the child are not the backend's time; a copy handed over is there at once,
    # so a child that does not start its call then (a thread of the last call's holding it) times out
    pending_drew = pending.given is None or timeout is None
    start_limit = START_SECONDS if pending_drew else min(START_SECONDS, timeout)
    try:
        try:
            started = _wait(child, start_limit)
            if started not in (None, TIMED_OUT) and not (isinstance(started, tuple) and started[:1] == ("started",)):
                child.kill()
                raise ForgedMessage(f"{type(started).__name__} instead of the call's start")
            done = _wait(child, timeout) if started not in (None, TIMED_OUT) else started
            if done not in (None, TIMED_OUT):
                run = _result(pending, done)
        except ForgedMessage as exc:
            _CHILDREN.pop(key, None)
            return BackendRun(backend.name, error=f"backend {backend.name!r}: its process sent its parent a message "
                                                  f"the framework does not send ({exc}); a backend must not use the "
                                                  f"framework's pipe", seconds=time.perf_counter() - start,
                              status="crashed")
    finally:
        _PENDING.discard(key)
        pending.given = pending.inputs = None
    if done is TIMED_OUT:
        _CHILDREN.pop(key, None)
        when = (f"no result after {timeout:g} s (--cell-timeout)" if started is not TIMED_OUT else
                "its call had not started" + (f" after {START_SECONDS} s" if pending_drew else " (--cell-timeout)"))
        return BackendRun(backend.name, error=f"backend {backend.name!r} timed out: {when}; its process was killed",
                          seconds=time.perf_counter() - start, status="timed_out")
    if done is None:
        _CHILDREN.pop(key, None)
        return BackendRun(backend.name, error=f"backend {backend.name!r} crashed: {child.death()}",
                          seconds=time.perf_counter() - start, status="crashed")
    return run


_TEXT_FIELDS = ("error", "skipped", "output", "served")


def _result(pending: PendingRun, done) -> BackendRun:
    """The run a child sent, checked as if it came from the backend itself (``ForgedMessage`` for
    anything the framework's code in the child does not send): its outputs validated against the
    case here and copied out of the shared pages, so that what the child writes there later is not
    what is judged; a write into the inputs' copy fails it."""
    if not (isinstance(done, tuple) and len(done) == 2 and done[0] == "done" and type(done[1]) is BackendRun):
        raise ForgedMessage(f"{type(done).__name__} instead of a result")
    sent = done[1]
    if (any(not isinstance(getattr(sent, f), (str, type(None))) for f in _TEXT_FIELDS)
            or not isinstance(sent.seconds, (float, int, type(None))) or sent.status is not None
            or sent.determinism is not None or not isinstance(sent.outputs, (dict, type(None)))):
        raise ForgedMessage("a result with fields of other types")
    run = BackendRun(pending.backend.name, error=sent.error, skipped=sent.skipped, seconds=sent.seconds,
                     output=sent.output)
    if sent.error is not None or sent.skipped is not None or sent.outputs is None:
        return run
    if pending.inputs is None:       # a probe's call: whether it ran is all that is read
        run.outputs = {}
        return run
    try:
        run.outputs = validate_outputs(pending.factory.declaration, run.backend, sent.outputs, pending.inputs)
    except ContractError as exc:
        return BackendRun(run.backend, error=capped(str(exc)), seconds=run.seconds, output=run.output)
    changed = mutated_inputs(pending.inputs, pending.given)
    if changed:       # the copy, or the originals? drawn afresh (only here: 5.5 s at the article's case)
        moved = mutated_inputs(pending.factory.inputs("cpu"), pending.inputs)
        if moved:
            raise InputsMoved(f"the case's inputs {moved} changed in the framework's own process while backend "
                              f"{run.backend!r} ran (another process wrote into its memory): its goldens and "
                              f"every verdict at this case would follow that write")
    return wrote_into_inputs(pending.factory.declaration, run, changed)


class InputsMoved(RuntimeError):
    """The parent's own inputs of a case changed during an isolated call: no backend's fault can be
    told apart from the framework's, and no golden of the case can be trusted."""
