"""A failure's message names the output that is wrong and the kind of error it is."""
from __future__ import annotations

import pytest
import torch

from cases.evaluate import evaluate_case
from cases.spec import CaseSpec
from kernels.registry import Backend
from operators.swiglu_backward.kernels.torch_autograd import torch_eager



def _dg_wrong(**inputs):
    out = torch_eager(**inputs)
    return {**out, "dg": (out["dg"].float() * 1.05).bfloat16()}


def _dw_shifted(**inputs):
    out = torch_eager(**inputs)
    return {**out, "dw_g": torch.roll(out["dw_g"], 1, 0)}


_dg_wrong.schedule = _dw_shifted.schedule = torch_eager.schedule


@pytest.fixture(scope="module")
def wrong_messages():
    spec = CaseSpec(1025, 96, 200, "unit", 0)
    return evaluate_case(spec, [Backend("dg_wrong", _dg_wrong), Backend("dw_shifted", _dw_shifted)],
                         benchmark=None).verdicts


def test_only_dg_wrong_blames_dg_not_the_correct_downstream_outputs(wrong_messages):
    """The correct dw_g, db_g and dx failed as "inconsistent with own upstream outputs" with
    "Mismatched elements: 0 (0%)" and blamed "an accumulation, tiling or indexing error downstream"."""
    v = wrong_messages["dg_wrong"]
    assert not v["dg"].passed and "a uniform relative error" in v["dg"].message
    for o in ("db_g", "dw_g", "dx", "db_fc", "dw_fc", "dfc"):
        assert v[o].passed, v[o].message
        assert "downstream of" not in v[o].message
    assert v["dw_g"].own_passed is None and v["dw_fc"].own_passed is True


def test_a_shifted_output_is_named_a_shift_not_a_uniform_error(wrong_messages):
    v = wrong_messages["dw_shifted"]["dw_g"]
    assert not v.passed
    line = next(x for x in v.message.splitlines() if x.startswith("Fitted scale"))
    assert "a shift or permutation of elements" in line and "bias): a uniform relative error" not in line, line
    assert all(w.passed for o, w in wrong_messages["dw_shifted"].items() if o != "dw_g")
