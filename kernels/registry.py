"""Backends by name, or any callable by import path ``package.module:callable``.

The names are the selected operator's (``Operator.backends``: SwiGLU's torch-eager is its own
autograd, RMSNorm's its own). Named backends are import paths too, resolved only when asked
for, so a backend whose toolchain is absent (pypto, triton) costs nothing until used.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import operators



class BackendNotFound(LookupError):
    """A --backend value that is neither a registered name nor an importable callable."""


@dataclass(frozen=True)
class Backend:
    name: str
    fn: Callable

    def __call__(self, **inputs):
        return self.fn(**inputs)


def resolve(spec: str) -> Backend:
    """A registered name or ``package.module:callable``; raises BackendNotFound with the reason."""
    known = operators.get().backends
    path = known.get(spec, spec)
    if ":" not in path:
        raise BackendNotFound(
            f"backend {spec!r} is not registered for operator {operators.selected()!r} "
            f"(known: {', '.join(sorted(known))}) "
            f"and is not an import path of the form 'package.module:callable'")
    module_name, _, attr = path.partition(":")
    if not module_name or not attr or module_name.startswith("."):
        raise BackendNotFound(f"backend {spec!r}: expected 'package.module:callable' (an absolute module path, "
                              f"a ':' and the callable's name)")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:   # noqa: BLE001 - a user's module may raise anything while it imports
        raise BackendNotFound(f"backend {spec!r}: cannot import module {module_name!r}: "
                              f"{type(exc).__name__}: {str(exc)[:500]}") from exc
    except SystemExit as exc:       # the module's own code calling sys.exit
        raise BackendNotFound(f"backend {spec!r}: importing {module_name!r} called sys.exit({exc.code!r})") from exc
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise BackendNotFound(f"backend {spec!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise BackendNotFound(f"backend {spec!r}: {path} is {type(fn).__name__}, not callable")
    return Backend(spec, fn)
