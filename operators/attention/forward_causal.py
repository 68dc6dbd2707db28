"""Causal self-attention's forward alone, for one head: O in BF16 and LSE in FP32, M = N, key j >
query i masked (``operators.attention.forward``)."""
from __future__ import annotations

from operators.attention.forward import declare

OPERATOR, DERIVED, REFERENCE = declare("attention_forward_causal", causal=True)
SCHEDULES = DERIVED.schedules
