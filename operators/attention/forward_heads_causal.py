"""Causal attention's forward over H heads: ``operators.attention.forward_causal`` with a leading
head dimension on every tensor, each head judged by the one-head causal forward operator."""
from __future__ import annotations

from contract.heads import over_heads
from operators.attention import BACKENDS, backend_paths, profiles
from operators.attention.forward_causal import OPERATOR as ONE_HEAD, REFERENCE, SCHEDULES

OPERATOR = over_heads(ONE_HEAD, name="attention_forward_heads_causal",
                      title="Causal attention forward over heads, O and its FP32 LSE (derived allowances)",
                      m_edges=profiles.HEAD_M_EDGES, shapes=profiles.HEAD_CAUSAL_SHAPES,
                      acceptance_case=profiles.HEAD_CAUSAL_ACCEPTANCE_CASE,
                      range_cases=profiles.HEAD_CAUSAL_RANGE_CASES,
                      backends=backend_paths("operators.attention.forward_causal_backends"),
                      default_backends=BACKENDS)

__all__ = ["OPERATOR", "REFERENCE", "SCHEDULES"]
