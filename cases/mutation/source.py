"""A kernel function's source and the namespace its mutants are compiled into.

A kernel is addressed as a backend is (``package.module:function``, through
``kernels.registry.resolve_path``) or by file (``path/to/file.py:function``). Its definition is
read from its module's file (``inspect.getsource``), parsed with the file's line numbers, and each
mutant is compiled into a fresh copy of the module's globals, with the function's closure
variables bound as globals, so a kernel made by a factory (``_backend(name, schedule, ...)``)
mutates too. The mutant keeps the original's attributes (``fn.schedule``: the goldens it is
compared against must not change with the edit).
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import textwrap
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernels.registry import BackendNotFound, resolve_path


class KernelSourceError(LookupError):
    """A KERNEL address that does not resolve to a Python function whose source can be read."""


def _load_file(path: Path):
    """The module at ``path``, imported once under a name of its own (its stem and a hash of its
    path, so two kernels named ``kernel.py`` in different folders stay apart)."""
    name = f"mutate_target_{path.stem}_{zlib.crc32(str(path.resolve()).encode()):08x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KernelSourceError(f"kernel {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:   # noqa: BLE001 - a user's module may raise anything while it imports
        del sys.modules[name]
        raise KernelSourceError(f"kernel {path}: importing it raised {type(exc).__name__}: {str(exc)[:300]}") from exc
    return module


def resolve_kernel(address: str) -> Callable:
    """The callable at ``address``: ``package.module:function`` or ``path/to/file.py:function``."""
    where, sep, attr = address.rpartition(":")
    if not sep or not where or not attr:
        raise KernelSourceError(f"kernel {address!r}: expected 'package.module:function' or 'path/to/file.py:function'")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise KernelSourceError(f"kernel {address!r}: no file {where}")
        fn = getattr(_load_file(path), attr, None)
        if not callable(fn):
            raise KernelSourceError(f"kernel {address!r}: {where} has no function {attr!r}")
        return fn
    try:
        return resolve_path(address, address).fn
    except BackendNotFound as exc:
        raise KernelSourceError(str(exc)) from exc


@dataclass
class KernelSource:
    """The function a KERNEL address names: its definition (line numbers of its file) and what
    its body reads besides its arguments."""
    address: str
    original: Callable
    function: ast.FunctionDef
    filename: str
    globals: dict
    closure: dict
    attributes: dict

    def compile(self, source: str) -> Callable:
        """The function ``source`` (a mutant of ``function``) in a fresh copy of the module's namespace."""
        namespace = {**self.globals, **self.closure}
        tree = ast.parse(source)
        ast.increment_lineno(tree, self.function.lineno - tree.body[0].lineno)
        exec(compile(tree, self.filename, "exec"), namespace)     # noqa: S102 - the user's own kernel, edited
        fn = namespace[self.function.name]
        fn.__dict__.update(self.attributes)
        return fn


def read_kernel(address: str) -> KernelSource:
    fn = resolve_kernel(address)
    target = inspect.unwrap(fn)
    if not inspect.isfunction(target):
        raise KernelSourceError(f"kernel {address!r} is a {type(fn).__name__}, not a Python function whose "
                                f"source can be mutated")
    try:
        lines, first = inspect.getsourcelines(target)
    except (OSError, TypeError) as exc:
        raise KernelSourceError(f"kernel {address!r}: its source cannot be read ({exc})") from exc
    tree = ast.parse(textwrap.dedent("".join(lines)))
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef):
        raise KernelSourceError(f"kernel {address!r}: its source is not a function definition")
    ast.increment_lineno(tree, first - 1)
    closure = {name: cell.cell_contents
               for name, cell in zip(target.__code__.co_freevars, target.__closure__ or ())}
    return KernelSource(address, fn, function, target.__code__.co_filename, target.__globals__, closure,
                        dict(getattr(fn, "__dict__", {})))
