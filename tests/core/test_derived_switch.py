"""SwiGLU and RMSNorm judged by the allowances their math derives, their own schedules serving the
rest (``accuracy.derived_switch``): their kernels' declared schedules are accepted, the reference
schedules' emulations are the operator's own golden's bits, and the reference and allowances are
the derived math's."""
from __future__ import annotations

from dataclasses import replace

import torch

import operators
from accuracy.derived import case_allowances
from cases.evaluate import declared_schedule, evaluate_case
from cases.matrix import quick_cases
from cases.spec import CaseSpec, make_inputs
from goldens.stream import materialize
from kernels.registry import resolve
from operators.swiglu_backward import schedule as swiglu
from operators.swiglu_backward.derived import rounding_in

BF16 = torch.bfloat16


def test_swiglu_kernels_declare_their_own_schedules_under_the_derived_gate():
    op = operators.get("swiglu_backward_derived")
    assert declared_schedule(op, resolve(op, "torch-eager")) is swiglu.TORCH_BF16
    assert declared_schedule(op, resolve(op, "tiled-emulation")).name == "article"


def test_the_derived_points_read_through_swiglus_plan_per_consumer():
    article, torch_path = swiglu.ARTICLE.plan, swiglu.TORCH_BF16.plan
    # the article's b kernel sums dg as computed; its w and x kernels read dg as stored
    assert rounding_in(article, "dg_in", "db_g") is None
    assert rounding_in(article, "dg_in", "dw_g") is BF16 and rounding_in(article, "dg_in", "dx") is BF16
    # PyTorch sums the stored dg, rounds each of dx's products, stores dy*fc
    assert rounding_in(torch_path, "dg_in", "db_g") is BF16 and rounding_in(torch_path, "dx_g", "dx") is BF16
    assert rounding_in(article, "dx_fc", "dx") is None and rounding_in(torch_path, "dy_fc", "dg") is BF16
    assert rounding_in(article, "db_fc", "db_fc") is BF16 and rounding_in(article, "dw_g", "dw_g") is BF16


def _small(name: str, prefix: str):
    op = operators.get(name)
    return op, make_inputs(next(c for c in quick_cases(op) if c.id.startswith(prefix)))


def test_the_schedules_emulations_are_the_operators_own_and_the_allowances_the_maths():
    torch.set_num_threads(1)
    for hand_name, schedules, prefix in (("swiglu_backward", (swiglu.ARTICLE, swiglu.TORCH_BF16), "M2049-K96-N200-unit"),
                                         ("rmsnorm_backward", None, "M2049-N200-")):
        hand, inputs = _small(hand_name, prefix)
        derived = operators.get(f"{hand_name}_derived")
        for sched in schedules or hand.schedules.study_schedules():
            mine, theirs = materialize(derived, inputs, sched), materialize(hand, inputs, sched)
            assert all(torch.equal(mine[o], theirs[o]) for o in theirs), (hand_name, sched.name)
        direct = case_allowances(derived, inputs)
        math = derived.golden.derived     # the math alone, its own generic schedules
        by_math = case_allowances(replace(hand, golden=math.golden, gate=math.gate, schedules=math.schedules), inputs)
        hand_allow = case_allowances(hand, inputs)
        for o in hand.output_names:
            assert torch.equal(direct[o], by_math[o]), (hand_name, o)
        # the derived allowances, not the hand ones (exact half spacings: below them at most elements)
        assert any(not torch.equal(direct[o], hand_allow[o]) for o in hand.output_names)


def test_a_cell_under_the_derived_gate_judges_and_diagnoses_the_kernels():
    torch.set_num_threads(1)
    op = operators.get("swiglu_backward_derived")
    spec = CaseSpec(2049, 96, 200, "unit", 0, operator=op)
    outcome = evaluate_case(spec, [resolve(op, n) for n in ("torch-eager", "article-schedule-emulated")],
                            benchmark=None)
    assert outcome.error is None and outcome.schedules == {"torch-eager": "torch-bf16",
                                                           "article-schedule-emulated": "article"}
    for backend in ("torch-eager", "article-schedule-emulated"):
        assert set(outcome.verdicts[backend]) == set(op.output_names)
        assert all(v.passed for v in outcome.verdicts[backend].values()), backend
    # the diagnosis layers of each backend's declared path, by the operator's own golden
    for backend in ("torch-eager", "article-schedule-emulated"):
        goldens = outcome.comparison["backends"][backend]["db_g"]
        assert {"reference", "faithful", "tiled"} <= set(goldens), (backend, sorted(goldens))
    # the article's schedule, served by the golden pass: its outputs are its tiled layer, the same bits
    assert outcome.comparison["backends"]["article-schedule-emulated"]["db_g"]["tiled"]["max_abs_err"] == 0
