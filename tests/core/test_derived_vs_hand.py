"""The derived allowances against the hand models they replace, element by element, at one small
case of each operator: never above the hand model beyond its own slack, never below it by more
than the hand model's rounding of each spacing up to u |value| (the exact half spacing of a value
is between u/2 and u of it, so a derived allowance that takes it exactly is 0.5-1.0 of the hand one)."""
from __future__ import annotations

import pytest
import torch

import operators
from accuracy.derived import case_allowances, with_derived
from cases.spec import CaseSpec, make_inputs
from operators.rmsnorm_backward.derived import DERIVED as RMSNORM
from operators.swiglu_backward.derived import DERIVED as SWIGLU

MEANINGFUL = 2.0 ** -120    # below it both models are subnormal floors


@pytest.mark.parametrize("name, derived, case, bounds", [
    ("rmsnorm_backward", RMSNORM, (257, 200, "unit", 0), {"dx": (0.49, 1.001), "dw": (0.49, 1.001)}),
    ("swiglu_backward", SWIGLU, (257, 96, 200, "seed", 0),
     {"dg": (0.49, 1.03), "dfc": (0.49, 1.03), "dx": (0.75, 1.001), "db_g": (0.49, 1.001), "db_fc": (0.49, 1.001),
      "dw_g": (0.49, 1.001), "dw_fc": (0.49, 1.001)}),
])
def test_derived_allowance_against_the_hand_model(name, derived, case, bounds):
    op = operators.get(name)
    inputs = make_inputs(CaseSpec(*case, operator=name))
    hand = case_allowances(op, inputs)
    auto = case_allowances(with_derived(op, derived), inputs)
    for o, (low, high) in bounds.items():
        keep = hand[o] > MEANINGFUL
        r = (auto[o] / hand[o])[keep]
        assert r.numel() > 0.9 * keep.numel(), o
        assert low <= float(r.min()) and float(r.max()) <= high, (o, float(r.min()), float(r.max()))
        # the typical element: the exact spacing's mean share of u |value| on random mantissas
        assert 0.6 < float(r.median()) <= 1.001, (o, float(r.median()))
