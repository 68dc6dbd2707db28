"""Causal self-attention over H heads: ``operators.attention.causal`` with a leading head dimension
on every tensor (q, do, o, dq [H, M, D]; kt, vt, dkt, dvt [H, D, M]), each head judged by the
one-head causal operator (``accuracy.heads``)."""
from __future__ import annotations

from contract.heads import over_heads
from operators.attention import BACKENDS, backend_paths, profiles
from operators.attention.causal import OPERATOR as ONE_HEAD, REFERENCE, SCHEDULES

OPERATOR = over_heads(ONE_HEAD, name="attention_heads_causal",
                      title="Causal attention over heads, forward + backward (derived allowances)",
                      m_edges=profiles.HEAD_M_EDGES, shapes=profiles.HEAD_CAUSAL_SHAPES,
                      acceptance_case=profiles.HEAD_CAUSAL_ACCEPTANCE_CASE,
                      range_cases=profiles.HEAD_CAUSAL_RANGE_CASES,
                      backends=backend_paths("operators.attention.causal_backends"), default_backends=BACKENDS)

__all__ = ["OPERATOR", "REFERENCE", "SCHEDULES"]
