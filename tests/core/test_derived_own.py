"""The own-upstream model by values first (``accuracy.derived.ValueFirstOwnOps``): the same model
as ``OwnSpreadOps`` where the own outputs read errors only through the reused points (SwiGLU), and
the full model where an own output reads another erring value."""
from __future__ import annotations

import torch

from accuracy.derived import DerivedMath, OwnSpreadOps, Spread, _Memo, spread_inputs
from cases.spec import CaseSpec, make_inputs
from operators.swiglu_backward import OPERATOR as SWIGLU
from operators.swiglu_backward import derived as swiglu_derived

ROWS = ("x", "dy", "g", "fc")


def _own_by_both(derived: DerivedMath, spec: CaseSpec):
    inputs = {k: v for k, v in make_inputs(spec).items()}
    rows = {k: v for k, v in inputs.items() if k in ROWS}
    golden = derived.golden
    chosen = golden._own_spreads(rows, inputs, _Memo())
    full, _ = derived.evaluate(OwnSpreadOps(derived.reused), spread_inputs(inputs))
    return golden._own_mode["value first"], chosen, full


def _same(a: Spread, b: Spread) -> bool:
    return torch.equal(a.variance(), b.variance()) and torch.equal(a.worst(), b.worst()) \
        and a.worst_by_point().keys() == b.worst_by_point().keys()


def _fresh(math) -> DerivedMath:
    d = swiglu_derived.DERIVED
    return DerivedMath(math, d.points, SWIGLU.outputs, operand_points=d.operand_points, reused=d.reused, own=d.own)


def test_swiglus_own_model_by_values_first_is_the_full_one_at_every_row():
    value_first, chosen, full = _own_by_both(_fresh(swiglu_derived.backward), CaseSpec(300, 96, 200, "unit", 0))
    assert value_first
    own_rows = [o for o in swiglu_derived.DERIVED.own if o in full]
    assert own_rows == ["dx"]
    for o in own_rows:
        assert _same(chosen[o], full[o]), o


def test_an_own_output_reading_another_erring_value_takes_the_full_model():
    """dx plus sigmoid(x) / 64: x's sigmoid carries its FP32 ulps into dx's own recompute, which a
    value-first evaluation would drop (seen: its dx worst case is smaller than the full model's)."""

    def math(ops, t):
        rows, reductions = swiglu_derived.backward(ops, t)
        rows = {**rows, "dx": rows["dx"] + ops.sigmoid(t["x"]) * (1 / 64)}
        return rows, reductions

    value_first, chosen, full = _own_by_both(_fresh(math), CaseSpec(300, 96, 200, "unit", 0))
    assert not value_first
    own_rows = [o for o in swiglu_derived.DERIVED.own if o in full]
    assert own_rows == ["dx"]
    for o in own_rows:
        assert _same(chosen[o], full[o]), o
