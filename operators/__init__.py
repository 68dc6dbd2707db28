"""Operators under test, by name. Each is a package under ``operators/`` whose ``OPERATOR`` is an
``operators.declaration.Operator``; the SwiGLU backward is the default."""
from __future__ import annotations

import importlib

from operators.declaration import Operator

DEFAULT = "swiglu_backward"
OPERATORS = {"swiglu_backward": "operators.swiglu_backward"}


def get(name: str = DEFAULT) -> Operator:
    if name not in OPERATORS:
        raise LookupError(f"operator {name!r} is not registered (known: {', '.join(sorted(OPERATORS))})")
    return importlib.import_module(OPERATORS[name]).OPERATOR
