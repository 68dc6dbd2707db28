"""Process-wide state a backend can change, captured before its call and restored after.

A backend is someone else's code running in the framework's process: one that calls
``torch.set_flush_denormal(True)`` would make the goldens flush subnormals, one that
calls ``torch.set_grad_enabled(False)`` would break every later autograd backend, and
the blame would land on them. ``sealed()`` captures the state the numbers depend on,
restores it after the call whatever happened, and reports what the backend changed so
its cell can fail with that message while every other cell keeps its verdict.

One leak cannot be undone in place: torch's worker threads started while FTZ/DAZ was
set keep it (``runs.platform_facts.fp32_keeps_subnormals``). Then the process
goes on single-threaded, where the calling thread's restored state is the only one
used, and the report of the leak says so.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, fields
from types import MappingProxyType

import torch

from contract.operator import MAPPING_FIELDS
from runs.platform_facts import fp32_keeps_subnormals

# The new per-backend FP32 precision API (``torch.backends.*.fp32_precision``): "bf16" there makes
# FP32 matmuls on the CPU use BF16 dot products (measured: 2x the error of IEEE at 256 x 256), and
# once it is set, the legacy ``get_float32_matmul_precision`` raises instead of answering.
FP32_PRECISION_PATHS = ("", "mkldnn", "mkldnn.matmul", "mkldnn.conv", "cuda.matmul", "cudnn")
# Signals whose handler a backend could replace to reach the framework's process later
SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGALRM", "SIGCHLD", "SIGPIPE", "SIGUSR1",
                                              "SIGUSR2", "SIGHUP") if hasattr(signal, n))


def _fp32_precision_owner(path: str):
    owner = torch.backends
    for part in filter(None, path.split(".")):
        owner = getattr(owner, part, None)
    return owner


def _fp32_precisions() -> tuple:
    return tuple(getattr(_fp32_precision_owner(p), "fp32_precision", None) for p in FP32_PRECISION_PATHS)


def _matmul_precision() -> str:
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:          # the legacy and the new API were mixed (above)
        return "<mixed with torch.backends.*.fp32_precision>"


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _signal_handlers() -> tuple:
    if not _in_main_thread():
        return ()
    return tuple(signal.getsignal(s) for s in SIGNALS)


def _error_filters() -> tuple:
    return tuple(f for f in warnings.filters if f[0] == "error")


def _pending_alarm() -> float:
    return signal.getitimer(signal.ITIMER_REAL)[0] if _in_main_thread() else 0.0


@dataclass(frozen=True)
class GlobalState:
    grad_enabled: bool
    default_dtype: torch.dtype
    num_threads: int
    deterministic_algorithms: bool
    deterministic_warn_only: bool
    float32_matmul_precision: str
    cuda_matmul_allow_tf32: bool
    cuda_allow_bf16_reduced_precision_reduction: bool
    cuda_allow_fp16_reduced_precision_reduction: bool
    cudnn_allow_tf32: bool
    mkldnn_enabled: bool
    cpu_autocast: bool
    cwd: str
    subnormals_kept: bool      # FP32 on the calling and worker threads keeps subnormals
    fp32_precision: tuple = ()         # torch.backends.*.fp32_precision, in FP32_PRECISION_PATHS order
    default_device: str = "cpu"        # torch.set_default_device: the goldens' new tensors would go there
    error_filters: tuple = ()          # warnings filters "error": a later library warning would raise
                                       # (other filters are left alone: torch adds "ignore" ones lazily)
    signal_handlers: tuple = ()        # in SIGNALS order
    pending_alarm: float = 0.0         # seconds left on an ITIMER_REAL a backend set (signal.alarm)
    stdout: object = None              # sys.stdout / sys.stderr objects: a backend replacing them hides
    stderr: object = None              # every later message of the run
    operators: tuple = ()              # the operator registry's declarations (``_operator_registry``)


def capture() -> GlobalState:
    return GlobalState(
        grad_enabled=torch.is_grad_enabled(),
        default_dtype=torch.get_default_dtype(),
        num_threads=torch.get_num_threads(),
        deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
        deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
        float32_matmul_precision=_matmul_precision(),
        cuda_matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
        cuda_allow_bf16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        cuda_allow_fp16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
        mkldnn_enabled=torch.backends.mkldnn.enabled,
        cpu_autocast=torch.is_autocast_enabled("cpu"),
        cwd=os.getcwd(),
        subnormals_kept=fp32_keeps_subnormals("cpu"),
        fp32_precision=_fp32_precisions(),
        default_device=str(torch.get_default_device()),
        error_filters=_error_filters(),
        signal_handlers=_signal_handlers(),
        pending_alarm=_pending_alarm(),
        stdout=sys.stdout,
        stderr=sys.stderr,
        operators=_operator_registry(),
    )


def _operator_registry() -> tuple:
    """The declarations the registry (``operators._loaded``) holds, by name, with the contents of
    their mappings: a backend in this process that put another declaration there, or new scale
    profiles (inputs of zeros, say), would change every later case of the process. Read from
    ``sys.modules``: this layer imports no operator."""
    registry = sys.modules.get("operators")
    loaded = getattr(registry, "_loaded", None)
    if not isinstance(loaded, dict):
        return ()
    return tuple((name, op, tuple((f, tuple(getattr(op, f).items())) for f in MAPPING_FIELDS
                                  if hasattr(getattr(op, f, None), "items")))
                 for name, op in loaded.items())


def _restore_operator_registry(state: tuple) -> None:
    registry = sys.modules.get("operators")
    loaded = getattr(registry, "_loaded", None)
    if not isinstance(loaded, dict):
        return
    loaded.clear()
    loaded.update({name: op for name, op, _ in state})
    for _, op, mappings in state:
        for field_name, items in mappings:
            if dict(getattr(op, field_name).items()) != dict(items):
                object.__setattr__(op, field_name, MappingProxyType(dict(items)))


def restore(state: GlobalState) -> list[str]:
    """Put ``state`` back; returns what could not be restored in place (and how it was worked around)."""
    if str(torch.get_default_device()) != state.default_device:
        torch.set_default_device(None if state.default_device == "cpu" else state.default_device)
    if _error_filters() != state.error_filters:
        kept = [f for f in warnings.filters if f[0] != "error"]
        warnings.filters[:] = list(state.error_filters) + kept
        warnings._filters_mutated()
    if _in_main_thread():
        for sig, handler in zip(SIGNALS, state.signal_handlers):
            if signal.getsignal(sig) is not handler and handler is not None:
                signal.signal(sig, handler)
        if _pending_alarm() and not state.pending_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
    sys.stdout, sys.stderr = state.stdout, state.stderr
    if _operator_registry() != state.operators:
        _restore_operator_registry(state.operators)
    torch.set_grad_enabled(state.grad_enabled)
    torch.set_default_dtype(state.default_dtype)
    torch.use_deterministic_algorithms(state.deterministic_algorithms, warn_only=state.deterministic_warn_only)
    if state.float32_matmul_precision in ("highest", "high", "medium") and \
            _matmul_precision() != state.float32_matmul_precision:
        torch.set_float32_matmul_precision(state.float32_matmul_precision)
    # each legacy flag only where it moved: setting one writes the new API's value too
    for owner, attr, value in ((torch.backends.cuda.matmul, "allow_tf32", state.cuda_matmul_allow_tf32),
                               (torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction",
                                state.cuda_allow_bf16_reduced_precision_reduction),
                               (torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction",
                                state.cuda_allow_fp16_reduced_precision_reduction),
                               (torch.backends.cudnn, "allow_tf32", state.cudnn_allow_tf32)):
        if getattr(owner, attr) != value:
            setattr(owner, attr, value)
    torch.backends.mkldnn.enabled = state.mkldnn_enabled
    for path, value in zip(FP32_PRECISION_PATHS, state.fp32_precision):   # after the legacy setters above
        owner = _fp32_precision_owner(path)
        if value is not None and getattr(owner, "fp32_precision", value) != value:
            with contextlib.suppress(Exception):
                owner.fp32_precision = value
    torch.set_autocast_enabled("cpu", state.cpu_autocast)
    with contextlib.suppress(OSError):
        os.chdir(state.cwd)
    torch.set_num_threads(state.num_threads)
    notes = []
    if state.subnormals_kept and not fp32_keeps_subnormals("cpu"):
        torch.set_flush_denormal(False)
        if not fp32_keeps_subnormals("cpu"):
            torch.set_num_threads(1)
            notes.append("torch's worker threads kept FTZ/DAZ after it was unset: this process continues "
                         "single-threaded, so the goldens do not flush")
    return notes


def changes(before: GlobalState, after: GlobalState) -> list[str]:
    out = []
    for f in fields(GlobalState):
        a, b = getattr(before, f.name), getattr(after, f.name)
        if f.name in ("stdout", "stderr"):
            if a is not b:
                out.append(f"sys.{f.name} replaced")
        elif f.name == "error_filters":
            if a != b:
                out.append(f"warnings filters that raise changed ({len(a)} -> {len(b)})")
        elif f.name == "operators":
            if a != b:
                names = sorted({n for n, *_ in a} ^ {n for n, *_ in b}
                               | {n for (n, op, m), (n2, op2, m2) in zip(a, b) if op is not op2 or m != m2})
                out.append(f"the operator registry's declarations changed ({', '.join(names) or 'their order'}: "
                           f"another declaration or changed scale profiles, backends or sizes)")
        elif f.name == "signal_handlers":
            changed = [signal.Signals(s).name for s, x, y in zip(SIGNALS, a, b) if x is not y]
            if changed:
                out.append(f"signal handlers of {', '.join(changed)} replaced")
        elif a != b:
            out.append(f"{f.name} {a!r} -> {b!r}")
    return out


# Where the goldens' and the gate's functions live: a backend in this process that replaces one
# (torch.matmul scaled by 1.05, say) would have the goldens carry its own error, and one that
# replaces the framework's gate would judge itself. Torch's namespaces the golden math calls, and the
# framework's own modules (not the backends' modules: those may cache compiled kernels in globals).
TORCH_NAMESPACES = ("torch", "torch.Tensor", "torch.nn.functional", "torch.linalg", "torch.special", "numpy")
FRAMEWORK_PACKAGES = ("contract", "goldens", "runs", "accuracy", "operators", "cases")
# Replaced by torch itself on torch.compile's first call (dynamo wraps it; measured with every
# registered backend: the only such attribute), and no golden draws from global RNG
TORCH_REPLACES_ITSELF = {("torch", "manual_seed")}
FRAMEWORK_KERNEL_MODULES = ("kernels.runner", "kernels.registry", "kernels.isolated",
                            "kernels.sealed_state")


def _namespaces() -> dict[str, object]:
    spaces = {}
    for name in TORCH_NAMESPACES:
        if name == "torch.Tensor":
            spaces[name] = torch.Tensor
        elif name in sys.modules:
            spaces[name] = sys.modules[name]
    for name, module in list(sys.modules.items()):
        if module is not None and (name.split(".")[0] in FRAMEWORK_PACKAGES or name in FRAMEWORK_KERNEL_MODULES):
            spaces[name] = module
            # the classes it defines: a derived operator's gate and golden are methods of
            # accuracy.derived's classes, the rounding model's ops of accuracy.propagation's
            for attr, value in list(vars(module).items()):
                if isinstance(value, type) and getattr(value, "__module__", None) == name:
                    spaces[f"{name}.{attr}"] = value
    return spaces


# Module constants of the framework checked like its functions: an upper-case name holding an
# immutable value (the acceptance tolerance, a limit, a dtype); a backend that rebinds one would move
# the gate for every later cell. Lower-case module globals are the framework's own caches.
CONSTANT_TYPES = (int, float, str, bytes, bool, tuple, frozenset, torch.dtype, type(None))


def _is_constant(space_name: str, space, attr: str, value) -> bool:
    if not attr.isupper() or isinstance(space, type) or space_name.split(".")[0] not in FRAMEWORK_PACKAGES:
        return False
    frozen = getattr(getattr(type(value), "__dataclass_params__", None), "frozen", False)
    return isinstance(value, CONSTANT_TYPES) or frozen


def _function_of(obj):
    """The plain function behind ``obj`` (a staticmethod's or classmethod's too), or None."""
    fn = getattr(obj, "__func__", obj) if isinstance(obj, (staticmethod, classmethod)) else obj
    return fn if isinstance(fn, types.FunctionType) else None


_EMPTY_CELL = object()


def _body(obj) -> tuple:
    """What a call of ``obj`` runs besides its identity: a function's code, defaults, keyword
    defaults and closure cells' contents (swapping ``__code__`` keeps the function the same object).
    Compared by identity (``_same_body``): a default may be a tensor, whose ``==`` is no answer."""
    fn = _function_of(obj)
    if fn is None:
        return ()
    cells = tuple(_cell_contents(c) for c in (fn.__closure__ or ()))
    return (fn.__code__, fn.__defaults__, fn.__kwdefaults__, *cells)


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return _EMPTY_CELL


def _same_body(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _put_body_back(fn, body: tuple) -> None:
    fn.__code__, fn.__defaults__, fn.__kwdefaults__ = body[:3]
    for cell, value in zip(fn.__closure__ or (), body[3:]):
        if value is _EMPTY_CELL:
            with contextlib.suppress(ValueError):
                del cell.cell_contents
        else:
            cell.cell_contents = value


def function_table() -> dict[tuple[str, str], tuple]:
    """(namespace, attribute) -> (the callable, module or constant found there, its body), for every
    attribute that reads the same object twice (an attribute computed afresh on each read is no
    identity to check). About 4000 attributes (the framework modules and their classes), 10 ms."""
    table = {}
    for space_name, space in _namespaces().items():
        try:
            names = (list(vars(space)) if space_name not in ("torch", "torch.Tensor", "numpy") else dir(space))
        except TypeError:
            continue
        for attr in names:
            try:
                first = _read(space_name, space, attr)
                if (callable(first) or isinstance(first, (type(sys), staticmethod, classmethod))
                        or _is_constant(space_name, space, attr, first)) \
                        and _read(space_name, space, attr) is first and (space_name, attr) not in TORCH_REPLACES_ITSELF:
                    table[(space_name, attr)] = (first, _body(first))
            except Exception:   # noqa: BLE001 - lazy attributes may raise; they are not checked
                continue
    return table


def _read(space_name: str, space, attr: str):
    """The attribute as stored: a framework class's own entry (a staticmethod stays one, so putting
    it back does not turn it into a method), any other namespace's attribute."""
    if isinstance(space, type) and space_name not in ("torch.Tensor",):
        return vars(space)[attr]
    return getattr(space, attr)


def replaced_functions(table: dict[tuple[str, str], tuple]) -> list[tuple[str, str]]:
    """Entries of ``table`` that now read another object (or none), or a function whose code,
    defaults or closure were swapped in place."""
    spaces = _namespaces()
    out = []
    for (space_name, attr), (obj, body) in table.items():
        space = spaces.get(space_name)
        try:
            now = _read(space_name, space, attr)
        except Exception:   # noqa: BLE001 - deleted
            now = None
        if now is not obj or not _same_body(_body(now), body):
            out.append((space_name, attr))
    return out


def restore_functions(table: dict[tuple[str, str], tuple], replaced: list[tuple[str, str]]) -> None:
    spaces = _namespaces()
    for space_name, attr in replaced:
        obj, body = table[(space_name, attr)]
        with contextlib.suppress(Exception):
            setattr(spaces[space_name], attr, obj)
        fn = _function_of(obj)
        if fn is not None and body:
            with contextlib.suppress(Exception):
                _put_body_back(fn, body)


def _mode_depths() -> tuple[int, int]:
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


def _pop_modes(depths: tuple[int, int]) -> list[str]:
    """Pop the modes a backend left pushed above ``depths`` (a TorchFunctionMode left active would
    see, and could change, every torch call the goldens make); names them."""
    left = []
    while torch._C._len_torch_function_stack() > depths[0]:
        left.append(f"TorchFunctionMode {type(torch._C._pop_torch_function_stack()).__name__}")
    while torch._C._len_torch_dispatch_stack() > depths[1]:
        left.append(f"TorchDispatchMode {type(torch._C._pop_torch_dispatch_stack()).__name__}")
    return left


@dataclass
class Seal:
    """What the sealed call changed (restored afterwards) and what could only be worked around."""
    changed: list[str]
    notes: list[str]

    def message(self, backend: str) -> str | None:
        if not self.changed:
            return None
        text = (f"backend {backend!r} changed process-wide state: {'; '.join(self.changed)}. The framework "
                f"restored it; a kernel must leave global state as it found it")
        return text + ("; " + "; ".join(self.notes) if self.notes else "")


@contextlib.contextmanager
def sealed() -> Iterator[Seal]:
    """Run the body with the process state captured before and restored after; the yielded
    ``Seal`` is filled in when the body ends (normally or not)."""
    table = function_table()      # first: its first call imports torch's lazy modules
    depths = _mode_depths()
    before = capture()
    seal = Seal([], [])
    try:
        yield seal
    finally:
        replaced = replaced_functions(table)
        restore_functions(table, replaced)
        after = capture()
        seal.changed = changes(before, after)
        seal.notes = restore(before) if seal.changed else []    # set_default_device's own mode goes here
        modes = _pop_modes(depths)
        if modes:
            seal.changed.insert(0, f"left {', '.join(modes)} pushed (popped: the goldens run without it)")
        if replaced:
            names = [f"{space}.{attr}" for space, attr in replaced]
            seal.changed.insert(0, f"replaced {', '.join(names[:8])}{' ...' if len(names) > 8 else ''} "
                                   f"(the goldens and the gate use the originals)")
        # the restored threads count may have been lowered to keep the goldens clean
        if seal.notes:
            seal.changed.append("worker threads flush subnormals")
