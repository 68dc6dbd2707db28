"""The derived model's bias paths: the constant under them only where they (none
stored, all, each alone) miss combinations of the points that reach an output."""
from __future__ import annotations

import torch

import operators
from accuracy.allowance import SCALE_BIAS
from accuracy.derived_switch import with_derived
from cases.matrix import quick_cases
from cases.spec import make_inputs
from goldens.stream import GoldenPass
from operators.swiglu_backward.derived import DERIVED as SWIGLU_DERIVED


def _terms(operator, case_prefix: str):
    spec = next(c for c in quick_cases(operator) if c.id.startswith(case_prefix))
    gp = GoldenPass(operator, make_inputs(spec), {"fp64": operator.schedules.FP64_GLOBAL}, terms=True)
    for _ in gp.blocks():
        pass
    return gp.terms


def test_outputs_reached_by_two_points_or_fewer_take_no_constant():
    torch.set_num_threads(1)
    terms = _terms(with_derived(operators.get("swiglu_backward"), SWIGLU_DERIVED), "M2-K96-N200-unit")
    # dg is reached by dy*fc alone, db_g by dy*fc and dg_in: every combination is a path
    assert terms.reach["dg"] == {"dy_fc"} and terms.reach["db_g"] == {"dy_fc", "dg_in"}
    assert terms.floor("dg") == 0.0 and terms.floor("db_g") == 0.0 and terms.floor("dw_fc") == 0.0
    # dx by six points: a kernel may store some and not others, which no path computes
    assert len(terms.reach["dx"]) == 6 and terms.floor("dx") == SCALE_BIAS
    assert terms.scale_bias("dx") >= SCALE_BIAS


def test_a_rescaled_point_keeps_the_constant():
    torch.set_num_threads(1)
    terms = _terms(operators.get("attention"), "M2-")
    # o is reached by P~ alone, stored at any running max: its bias depends on a factor no path takes
    assert terms.reach["o"] == {"p"} and "p" in terms.rescaled
    assert terms.floor("o") == SCALE_BIAS
    # dV^T by the backward's P alone, stored as computed from LSE: no constant
    assert terms.reach["dvt"] == {"p_bwd"} and terms.floor("dvt") == 0.0


def test_paths_share_a_result_only_for_equal_operands_and_never_add_into_it():
    from accuracy.derived import DerivedTermSums, _Memo
    memo, calls = _Memo(), []
    a = torch.arange(6.0).reshape(2, 3)

    def compute(x):
        calls.append(1)
        return x * 2

    first = memo.get((a,), lambda: compute(a))
    assert memo.get((a.clone(),), lambda: compute(a)) is first and len(calls) == 1   # equal values
    other = a.clone()
    other[1, 2] += 2.0 ** -20
    assert memo.get((other,), lambda: compute(other)) is not first and len(calls) == 2
    assert memo.get((a.double(),), lambda: compute(a.double())) is not first       # another dtype
    # a part shared by two paths: each path's sum is its own
    terms = DerivedTermSums()
    part = torch.ones(1, 3)
    terms.add_path_operand("db", "fp32", part)
    terms.add_path_operand("db", "all stored", part)
    terms.add_path_operand("db", "fp32", part)
    assert terms._err_sums["db"]["fp32"].tolist() == [[2.0, 2.0, 2.0]]
    assert terms._err_sums["db"]["all stored"].tolist() == [[1.0, 1.0, 1.0]] and part.tolist() == [[1.0, 1.0, 1.0]]
