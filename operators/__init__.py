"""Operators under test. Each is a package whose ``OPERATOR`` is a ``contract.operator.Operator``:
a registered name (``OPERATORS``) or any importable module path (``tests.operators.toy``: an
operator that lives outside this folder).

The framework never reads an operator of its own accord: the edges (the pytest plugin's
``--operator``, ``python -m reports``, the benchmarks) look one up here by name and hand the
declaration down as a value, so one process can validate several. The SwiGLU backward is the
default name, so a run without ``--operator`` keeps its meaning.
"""
from __future__ import annotations

import importlib

from contract.operator import Operator

DEFAULT = "swiglu_backward"
OPERATORS = {"swiglu_backward": "operators.swiglu_backward",
             "rmsnorm_backward": "operators.rmsnorm_backward",
             # the same operators judged by the allowances their math derives (accuracy.derived_switch)
             "swiglu_backward_derived": "operators.swiglu_backward.derived",
             "rmsnorm_backward_derived": "operators.rmsnorm_backward.derived",
             "bias_gelu_backward": "operators.bias_gelu_backward",
             "attention": "operators.attention",
             "attention_causal": "operators.attention.causal",
             "attention_forward": "operators.attention.forward",
             "attention_forward_causal": "operators.attention.forward_causal",
             "attention_heads": "operators.attention.heads",
             "attention_heads_causal": "operators.attention.heads_causal",
             "attention_forward_heads": "operators.attention.forward_heads",
             "attention_forward_heads_causal": "operators.attention.forward_heads_causal"}

_loaded: dict[str, Operator] = {}
_keys: dict[str, str] = {}       # Operator.name -> the name or path it was loaded by


class OperatorNotFound(LookupError):
    """An operator name that is neither registered nor an importable module with an ``OPERATOR``."""


def get(name: str = DEFAULT) -> Operator:
    """The operator ``name`` (a registered name or a module path), imported once."""
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
                                   f"(a contract.operator.Operator)")
        _loaded[name] = operator
        _keys.setdefault(operator.name, name)
    return _loaded[name]


def key(operator: Operator | str) -> str:
    """What ``get`` finds ``operator`` by in any process: its registered name, or the module
    path it was loaded from (an operator outside this folder)."""
    if isinstance(operator, str):
        return operator
    return _keys.get(operator.name, operator.name)
