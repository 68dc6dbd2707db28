"""Attention's forward over H heads: ``operators.attention.forward`` with a leading head dimension on
every tensor, q [H, M, D], kt, vt [H, D, N] in, o [H, M, D] in BF16 and lse [H, M, 1] in FP32 out,
each head judged by the one-head forward operator (``accuracy.heads``). An LSE written with a
wrong head stride is the layout bug it adds. The causal one is ``forward_heads_causal``."""
from __future__ import annotations

from contract.heads import over_heads
from operators.attention import BACKENDS, backend_paths, profiles
from operators.attention.forward import OPERATOR as ONE_HEAD, REFERENCE, SCHEDULES

OPERATOR = over_heads(ONE_HEAD, name="attention_forward_heads",
                      title="Attention forward over heads, O and its FP32 LSE (derived allowances)",
                      m_edges=profiles.HEAD_M_EDGES, shapes=profiles.HEAD_SHAPES,
                      acceptance_case=profiles.HEAD_ACCEPTANCE_CASE, range_cases=profiles.HEAD_RANGE_CASES,
                      backends=backend_paths("operators.attention.forward_backends"), default_backends=BACKENDS)

__all__ = ["OPERATOR", "REFERENCE", "SCHEDULES"]
