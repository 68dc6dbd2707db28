"""Causal self-attention, forward and backward for one head: M = N (the sequence), key j > query i
masked. The same math and rounding points as ``operators.attention`` (its ``row_index``: each
query's position, which the mask reads); kt, vt [D, M]."""
from __future__ import annotations

from pathlib import Path

from accuracy.derived import DerivedMath
from contract.operator import Operator
from operators.attention import ACCEPTANCE_BACKENDS, BACKENDS, backend_paths, inputs, math, outputs, profiles, schedules

OUTPUTS = outputs("M")
DERIVED = DerivedMath(math.causal, math.POINTS, OUTPUTS, operand_points={"dkt": "ds", "dvt": "p_bwd"},
                      row_index="row")
SCHEDULES = DERIVED.schedules
REFERENCE = schedules(DERIVED)

OPERATOR = Operator(
    name="attention_causal",
    dims=("M", "D"),
    inputs=inputs("M"),
    outputs=OUTPUTS,
    sizes_from={"M": ("q", 0), "D": ("q", 1)},
    golden=DERIVED.golden,
    gate=DERIVED.gate,
    schedules=SCHEDULES,
    scales=profiles.CAUSAL_SCALES,
    m_edges=profiles.M_EDGES,
    shapes=profiles.CAUSAL_SHAPES,
    acceptance_case=profiles.CAUSAL_ACCEPTANCE_CASE,
    range_cases=profiles.CAUSAL_RANGE_CASES,
    title="Causal attention forward + backward (derived allowances)",
    backends=backend_paths("operators.attention.causal_backends"),
    default_backends=BACKENDS,
    acceptance_backends=ACCEPTANCE_BACKENDS,
    expectations=Path(__file__).parent / "expectations-causal",
    study_shape=(64,),
)
