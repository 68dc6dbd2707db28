"""Attention over H heads, forward and backward, non-causal: every tensor of ``operators.attention``
with a leading head dimension, q [H, M, D], kt, vt [H, D, N], do [H, M, D] in, o, dq [H, M, D] and
dkt, dvt [H, D, N] out, as a kernel over B x H heads takes them. Each head is judged by the
one-head operator (``accuracy.heads``); what the heads add is their layout: a missing head stride,
K and V of another head, dK summed across heads. The backends are the one-head operator's, which
take either layout. The causal operator over heads is ``operators.attention.heads_causal``.
"""
from __future__ import annotations

from contract.heads import over_heads
from operators.attention import BACKENDS, OPERATOR as ONE_HEAD, REFERENCE, SCHEDULES, backend_paths, profiles

OPERATOR = over_heads(ONE_HEAD, name="attention_heads", title="Attention over heads, forward + backward (derived allowances)",
                      m_edges=profiles.HEAD_M_EDGES, shapes=profiles.HEAD_SHAPES,
                      acceptance_case=profiles.HEAD_ACCEPTANCE_CASE, range_cases=profiles.HEAD_RANGE_CASES,
                      backends=backend_paths("operators.attention.backends"), default_backends=BACKENDS)

__all__ = ["OPERATOR", "REFERENCE", "SCHEDULES"]
