"""Ways a wrong kernel could pass without its numbers being right, each closed.

Every kernel here is wrong (all-zero outputs, or zeros filled in later); each test saw it pass
before its door was closed.
"""
from __future__ import annotations

import threading
import time

import torch

from cases.evaluate import evaluate_case, records_for
from cases.spec import CaseSpec
from kernels.registry import Backend
from operators.swiglu_backward.kernels.torch_autograd import torch_eager

SPEC = CaseSpec(1025, 96, 200, "unit", 0)


def all_zero(**inputs):
    return {k: torch.zeros_like(v) for k, v in torch_eager(**inputs).items()}


def fills_later(**inputs):
    right = torch_eager(**inputs)
    out = {k: torch.zeros_like(v) for k, v in right.items()}

    def fill():
        time.sleep(0.2)
        for k in out:
            out[k].copy_(right[k])
    threading.Thread(target=fill, daemon=True).start()
    return out


def with_a_graph(**inputs):
    w = torch.ones((), requires_grad=True)
    return {k: (v.float() * w).to(torch.bfloat16) for k, v in torch_eager(**inputs).items()}


def test_the_dual_benchmark_under_test_is_judged_by_the_absolute_gate():
    zero = Backend("zero", all_zero)
    outcome = evaluate_case(SPEC, [zero], benchmark="zero")
    for gate in ("dual", "both"):
        records = [r for r in records_for(outcome, "zero", gate=gate) if r.get("gated")]
        assert {r["status"] for r in records} == {"fail"}, gate
        assert {r["gate"] for r in records} == {"absolute"}


def test_outputs_are_judged_as_returned_not_as_later_written():
    for isolate in (False, True):
        outcome = evaluate_case(SPEC, [Backend("tests.core.test_verdict_side_doors:fills_later", fills_later)],
                                isolate=isolate, benchmark=None)
        time.sleep(0.5)
        verdicts = outcome.verdicts["tests.core.test_verdict_side_doors:fills_later"]
        assert not any(v.passed for v in verdicts.values()), isolate


def test_outputs_with_a_graph_are_detached_and_judged():
    name = "tests.core.test_verdict_side_doors:with_a_graph"
    for isolate in (False, True):
        outcome = evaluate_case(SPEC, [Backend(name, with_a_graph)], isolate=isolate, benchmark=None)
        assert outcome.runs[name].error is None, outcome.runs[name].error
        assert all(v.passed for v in outcome.verdicts[name].values())


def _constant_inputs_case(tmp_path, value: float):
    from safetensors.torch import save_file
    from cases.spec import inputs_case
    from operators.swiglu_backward import OPERATOR as SWIGLU
    path = tmp_path / f"inputs-{value}.safetensors"
    save_file({n: torch.full(s, value, dtype=torch.bfloat16) for n, s in SWIGLU.input_shapes({"M": 64, "K": 96, "N": 200}).items()}, str(path))
    return inputs_case(str(path))


def test_a_case_whose_inputs_check_nothing_cannot_pass(tmp_path):
    for value in (0.0, 0.5):
        spec = _constant_inputs_case(tmp_path, value)
        outcome = evaluate_case(spec, [Backend("torch-eager", torch_eager), Backend("zero", all_zero)], benchmark=None)
        for name in ("torch-eager", "zero"):
            records = [r for r in records_for(outcome, name) if r.get("gated")]
            assert {r["status"] for r in records} == {"fail"}, (value, name)
            assert all("checks nothing" in r["message"] and r["checks_nothing"] for r in records)
