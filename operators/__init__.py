"""Operators under test. Each is a package whose ``OPERATOR`` is an
``operators.declaration.Operator``: a registered name (``OPERATORS``) or any importable module
path (``tests.operators.toy``: an operator that lives outside this folder).

One process validates one operator: the framework's modules read the selected operator when
they are imported. The selection is ``$ACCURACY_OPERATOR`` (the pytest option ``--operator``
sets it before anything reads it, and xdist workers and isolated backend processes inherit it);
the SwiGLU backward is the default, so a run without the option keeps its meaning.
"""
from __future__ import annotations

import importlib
import os

from operators.declaration import Operator

DEFAULT = "swiglu_backward"
OPERATORS = {"swiglu_backward": "operators.swiglu_backward",
             "rmsnorm_backward": "operators.rmsnorm_backward"}
ENV_VAR = "ACCURACY_OPERATOR"

_loaded: dict[str, Operator] = {}


class OperatorNotFound(LookupError):
    """An operator name that is neither registered nor an importable module with an ``OPERATOR``."""


def selected() -> str:
    """The name this process validates: ``$ACCURACY_OPERATOR``, else the default."""
    return os.environ.get(ENV_VAR) or DEFAULT


def get(name: str | None = None) -> Operator:
    """The operator ``name`` (default: the selected one), imported once."""
    name = name or selected()
    if name not in _loaded:
        path = OPERATORS.get(name, name)
        if path.startswith(".") or "/" in path or "\\" in path:
            raise OperatorNotFound(f"operator {name!r}: expected a registered name ({', '.join(sorted(OPERATORS))}) "
                                   f"or an absolute module path such as tests.operators.toy, not a file path")
        try:
            module = importlib.import_module(path)
        except ImportError as exc:
            raise OperatorNotFound(f"operator {name!r} is not registered (known: {', '.join(sorted(OPERATORS))}) "
                                   f"and does not import as a module: {exc}") from exc
        except Exception as exc:   # noqa: BLE001 - the operator's own module raised while importing
            raise OperatorNotFound(f"operator {name!r}: importing {path!r} raised {type(exc).__name__}: "
                                   f"{str(exc)[:500]}") from exc
        operator = getattr(module, "OPERATOR", None)
        if not isinstance(operator, Operator):
            raise OperatorNotFound(f"operator {name!r}: module {path!r} has no OPERATOR "
                                   f"(an operators.declaration.Operator)")
        _loaded[name] = operator
    return _loaded[name]


def select(name: str) -> Operator:
    """Make ``name`` this process's operator (and its children's). Refused when this process has
    already read another one: a framework module's tables would name the other operator's outputs."""
    current = selected()
    if current != name and current in _loaded:
        raise OperatorNotFound(f"operator {name!r}: this process already read operator {current!r}; "
                               f"select the operator before the framework imports")
    operator = get(name)
    os.environ[ENV_VAR] = name
    return operator
