"""Backends by name, or any callable by import path ``package.module:callable``.

The names are the operator's (``Operator.backends``: SwiGLU's torch-eager is its own
autograd, RMSNorm's its own), handed in as a value. Named backends are import paths too, resolved only when asked
for, so a backend whose toolchain is absent (pypto, triton) costs nothing until used.
"""
from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from contract.operator import Operator
from contract.records import GOLDEN_PREFIX
from kernels.sealed_state import function_table, replaced_functions, restore_functions


# Where SwiGLU's kernels lived before each operator became one folder: a --backend path (or an
# expectation, a rerun command, a script) written against the old layout resolves to the same
# callable, with one warning per old module naming the new path.
MOVED_MODULES = {f"kernels.{m}": f"operators.swiglu_backward.kernels.{m}"
                 for m in ("plain", "mutants", "torch_autograd", "tiled_emulation", "pypto.backend", "triton.backend")}
_warned: set[str] = set()


def current_path(path: str) -> str:
    """``path`` (``package.module:callable``) with a module that moved replaced by where it is now."""
    module, sep, attr = path.partition(":")
    if module in MOVED_MODULES:
        if module not in _warned:
            _warned.add(module)
            warnings.warn(f"{module} moved to {MOVED_MODULES[module]}; {path} resolves there", FutureWarning,
                          stacklevel=3)
        return MOVED_MODULES[module] + sep + attr
    return path


class BackendNotFound(LookupError):
    """A --backend value that is neither a registered name nor an importable callable."""


@dataclass(frozen=True)
class Backend:
    name: str
    fn: Callable
    path: str | None = None    # "package.module:callable": what another process resolves it by

    def __call__(self, **inputs):
        return self.fn(**inputs)


def resolve(operator: Operator, spec: str) -> Backend:
    """A name registered for ``operator`` or ``package.module:callable``; raises BackendNotFound
    with the reason."""
    known = operator.backends
    path = known.get(spec, spec)
    if ":" not in path:
        raise BackendNotFound(
            f"backend {spec!r} is not registered for operator {operator.name!r} "
            f"(known: {', '.join(sorted(known))}) "
            f"and is not an import path of the form 'package.module:callable'")
    return resolve_path(spec, path)


def _import_checked(spec: str, module_name: str):
    """The module, imported the first time with what it replaced of torch and the framework checked,
    like a call (a gate replaced here would judge every later cell of the process): put back
    whether or not the import succeeded, and the backend refused."""
    table = function_table() if module_name not in sys.modules else None
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:   # noqa: BLE001 - a user's module may raise anything while it imports
        raise BackendNotFound(f"backend {spec!r}: cannot import module {module_name!r}: "
                              f"{type(exc).__name__}: {str(exc)[:500]}") from exc
    except SystemExit as exc:       # the module's own code calling sys.exit
        raise BackendNotFound(f"backend {spec!r}: importing {module_name!r} called sys.exit({exc.code!r})") from exc
    finally:
        replaced = replaced_functions(table) if table is not None else []
        if replaced:
            restore_functions(table, replaced)
    if replaced:
        names = [f"{space}.{name}" for space, name in replaced]
        raise BackendNotFound(f"backend {spec!r}: importing {module_name!r} replaced {', '.join(names[:8])}"
                              f"{' ...' if len(names) > 8 else ''}; the framework put them back and refuses the "
                              f"backend: a backend's module must leave torch and the framework as it found them")
    return module


def resolve_path(spec: str, path: str) -> Backend:
    """The callable at ``path`` (``package.module:callable``; an old module path of ``MOVED_MODULES``
    too) as the backend ``spec``."""
    if str(spec).startswith(GOLDEN_PREFIX):
        # a record whose backend starts so is a golden's, which the summaries and the resume leave out
        raise BackendNotFound(f"backend {spec!r}: names starting with {GOLDEN_PREFIX!r} are the goldens' records; "
                              f"rename the module")
    path = current_path(path)
    module_name, _, attr = path.partition(":")
    if not module_name or not attr or module_name.startswith("."):
        raise BackendNotFound(f"backend {spec!r}: expected 'package.module:callable' (an absolute module path, "
                              f"a ':' and the callable's name)")
    module = _import_checked(spec, module_name)
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise BackendNotFound(f"backend {spec!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise BackendNotFound(f"backend {spec!r}: {path} is {type(fn).__name__}, not callable")
    return Backend(spec, fn, path)
