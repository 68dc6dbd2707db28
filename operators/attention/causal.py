"""Causal self-attention, forward and backward for one head: M = N (the sequence), key j > query i
masked. The same math and rounding points as ``operators.attention`` (its ``row_index``: each
query's position, which the mask reads); kt, vt [D, M]."""
from __future__ import annotations

from operators.attention import declare

OPERATOR, DERIVED, REFERENCE = declare("attention_causal", causal=True)
SCHEDULES = DERIVED.schedules
