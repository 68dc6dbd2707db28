"""Known failures: conditioned on measured platform facts, bounded by measured size.

Each test feeds the logic the values a platform can produce (every value of every
fact), so both branches of a conditioned entry are exercised on any machine; the
wrong-kernel tests run the real pipeline with a wrong kernel under an expected name.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from runs.platform_facts import FACT_VALUES, SHAPE_DEPENDENT
from cases import expectations as E
from cases.evaluate import evaluate_case
from cases.spec import CaseSpec
from operators.swiglu_backward.kernels.mutants import MUTANTS
from operators.swiglu_backward import OPERATOR as SWIGLU
from kernels.registry import Backend
from operators.swiglu_backward.kernels.torch_autograd import torch_eager

FLUSHING = {"bf16_gemm_keeps_subnormals": False, "fp32_keeps_subnormals": True}
KEEPING = {"bf16_gemm_keeps_subnormals": True, "fp32_keeps_subnormals": True}


def _entry(**kw) -> E.Expectation:
    base = dict(backend="kern", case="M*", output="dw_*", golden="faithful", reason="r", source="t.toml#0",
                bounds={"dw_g": E.Bound(0.01, 0.0, 0.5)})
    return E.Expectation(**{**base, **kw})


def _metrics(numel=10_000, mismatches=0, rms=1.0, max_abs=0.0, nonfinite=0) -> dict:
    return {"numel": numel, "mismatches": mismatches, "mismatches_exact": True, "mismatches_upper": mismatches,
            "golden_rms": rms, "max_abs_err": max_abs, "nonfinite_disagreements": nonfinite}


@pytest.mark.parametrize("fact", sorted(FACT_VALUES))
def test_a_condition_holds_exactly_where_the_measured_fact_has_its_value(fact):
    for wanted in FACT_VALUES[fact]:
        entry = _entry(when={fact: wanted})
        for measured in FACT_VALUES[fact]:
            facts = {**KEEPING, fact: measured}
            found = E.find([entry], "kern", "M1", "dw_g", "faithful", "cpu", facts)
            assert (found is entry) == (measured == wanted), (fact, wanted, measured)
        assert E.find([entry], "kern", "M1", "dw_g", "faithful", "cpu", {}) is None   # a fact not measured


def test_the_torch_tiny_entries_apply_only_where_the_bf16_gemm_flushes():
    entries = E.load(SWIGLU)
    for value in FACT_VALUES["bf16_gemm_keeps_subnormals"]:
        facts = {**KEEPING, "bf16_gemm_keeps_subnormals": value}
        for output in ("dw_g", "dw_fc", "dx"):
            found = E.find(entries, "torch-eager", "M2048-K96-N200-tiny-s0", output, "reference", "cpu", facts)
            assert (found is not None) == (value is False), (value, output)


def test_an_entry_without_a_bound_for_an_output_expects_nothing_there():
    entry = _entry()
    assert E.find([entry], "kern", "M1", "dw_fc", "faithful", "cpu", KEEPING) is None
    assert E.judge_output([entry], "kern", "M1", "dw_fc", "faithful", False, _metrics(mismatches=1, max_abs=0.1),
                          facts=KEEPING).status == "fail"


def test_within_the_allowance_is_expected_beyond_it_fails_and_says_by_how_much():
    entry = _entry()   # dw_g: 1% of elements, err 0.5 rms; allowance at 10000: 100 + 3 x 10 = 130, 1.0 rms
    judge = lambda m: E.judge(entry, "dw_g", False, m)   # noqa: E731
    assert judge(_metrics(mismatches=130, max_abs=1.0)).status == "expected_failure"
    over_count = judge(_metrics(mismatches=131, max_abs=0.1))
    assert over_count.status == "fail" and over_count.exceeds_entry
    assert "mismatched elements 131 > allowed 130 (1.01x; measured 100)" in over_count.note
    over_size = judge(_metrics(mismatches=5, max_abs=3.0))
    assert over_size.status == "fail" and "max |error| / rms(golden) 3 > allowed 1 (3x" in over_size.note
    nan = judge(_metrics(mismatches=5, max_abs=0.1, nonfinite=1))
    assert nan.status == "fail" and "non-finite disagreements 1 > allowed 0" in nan.note
    assert E.judge(entry, "dw_g", True, _metrics()).status == "unexpected_pass"


def test_shares_scale_with_the_output_size():
    bound = E.Bound(0.01, 0.0, 1.0)
    assert bound.allowance(100)["mismatch_share"] == pytest.approx(1 + 3)
    assert bound.allowance(1_000_000)["mismatch_share"] == pytest.approx(10_000 + 300)
    assert bound.allowance(10**6)["nonfinite_share"] == 0


def test_a_failure_on_an_inactive_entry_says_which_condition_did_not_hold():
    entry = _entry(when={"bf16_gemm_keeps_subnormals": False})
    judged = E.judge_output([entry], "kern", "M1", "dw_g", "faithful", False, _metrics(mismatches=1),
                            facts=KEEPING)
    assert judged.status == "fail"
    assert "t.toml#0 does not apply here: it holds where bf16_gemm_keeps_subnormals = false" in judged.note


@pytest.mark.parametrize("bad, message", [
    ('when = { cpu_is_fast = true }', "not a measured platform fact"),
    ('when = { bf16_gemm_keeps_subnormals = "maybe" }', "not a measured platform fact"),
    ('bound.dw_g = { mismatch_share = 0.1 }', "must give exactly"),
    ('bound.dx = { mismatch_share = 0.1, nonfinite_share = 0, err_rms = 1 }', "outside its output pattern"),
    ('machine = "ci-3"', "unknown keys"),
])
def test_malformed_entries_are_refused_by_the_loader(bad, message):
    text = f'[[expected]]\nbackend = "b"\ncase = "c"\noutput = "dw_*"\ngolden = "faithful"\n{bad}\nreason = "r"\n'
    with pytest.raises(ValueError, match=message):
        E.parse(text, Path("x.toml"))


def _judge_case(spec: CaseSpec, name: str, fn, facts: dict) -> dict[str, E.Judgement]:
    outcome = evaluate_case(spec, [Backend(name, fn)])
    entries = E.load(SWIGLU)
    metrics = outcome.comparison["backends"][name]
    return {o: E.judge_output(entries, name, spec.id, o, v.golden, v.passed, metrics[o][v.golden], facts=facts)
            for o, v in outcome.verdicts[name].items()}


def _doubled_dw_g_nan_dx(**inputs):
    out = torch_eager(**inputs)
    dx = out["dx"].clone()
    dx[7, 3] = float("nan")
    return {**out, "dw_g": out["dw_g"] * 2, "dx": dx}


def _doubled_dw_g_zeroed_dx(**inputs):
    out = torch_eager(**inputs)
    return {**out, "dw_g": out["dw_g"] * 2, "dx": torch.zeros_like(out["dx"])}


def test_a_wrong_kernel_named_torch_eager_is_not_hidden_by_the_tiny_entries():
    """dw_g doubled and one NaN in dx under torch-eager's name at M2048 tiny, where the
    flushing-GEMM entries apply: both exceed their bounds (dw_g's error, dx's non-finite count).
    (A zeroed dx is within the dx entry there: the flushing GEMM leaves torch's own dx at ~0.)"""
    spec = CaseSpec(2048, 96, 200, "tiny", 0)
    judged = _judge_case(spec, "torch-eager", _doubled_dw_g_nan_dx, FLUSHING)
    assert judged["dw_g"].status == "fail" and judged["dw_g"].exceeds_entry, judged["dw_g"]
    assert judged["dx"].status == "fail" and judged["dx"].exceeds_entry, judged["dx"]
    assert "Exceeds known failure torch.toml#" in judged["dw_g"].note
    # where the GEMM keeps subnormals no entry applies: the gate alone fails them, a zeroed dx too
    plain = _judge_case(spec, "torch-eager", _doubled_dw_g_zeroed_dx, KEEPING)
    assert plain["dw_g"].status == plain["dx"].status == "fail" and plain["dw_g"].entry is None



def test_an_all_zero_kernel_named_pypto_fails_the_saturating_case():
    """The article's kernel is NaN at saturating g (pypto.toml#0); zeros under its name are not
    that failure: every output fails, none as expected."""
    spec = CaseSpec(1, 96, 200, "saturating", 0)
    entries = E.load(SWIGLU)
    covered = [o for o in ("dg", "dfc", "db_g", "db_fc", "dw_g", "dw_fc", "dx")
               if E.find(entries, "pypto", spec.id, o, "reference", "cpu", KEEPING)]
    assert covered, "pypto.toml has no bounded saturating entry to test against"
    judged = _judge_case(spec, "pypto", MUTANTS["all_zero"], KEEPING)
    assert all(j.status == "fail" for j in judged.values()), {o: j.status for o, j in judged.items()}
    assert all(judged[o].exceeds_entry for o in covered)


def test_measured_size_of_an_all_zero_golden():
    assert E.measured_size(_metrics(rms=0.0, max_abs=0.0)).err_rms == 0.0
    assert math.isinf(E.measured_size(_metrics(rms=0.0, max_abs=1e-3)).err_rms)
    assert E.measured_size({**_metrics(mismatches=7), "mismatches_exact": False, "mismatches_upper": 70}) \
        .mismatch_share == pytest.approx(70 / 10_000)


def test_shape_dependent_is_a_value_no_entry_is_conditioned_on():
    assert all(SHAPE_DEPENDENT not in e.when.values() for e in E.load(SWIGLU))


def test_a_backend_pattern_matches_only_registered_names():
    """``torch-*`` excuses torch-eager and torch-compile, never a user's import path that starts
    the same way (a folder named torch-mine on PYTHONPATH)."""
    from cases.expectations import backend_matches
    registered = tuple(SWIGLU.backends)
    assert backend_matches("torch-*", "torch-eager", registered) and backend_matches("torch-*", "torch-compile", registered)
    assert not backend_matches("torch-*", "torch-mine:zero_dx", registered)
    assert not backend_matches("torch-*", "torch-eager2", registered)
    assert backend_matches("mine:zero_dx", "mine:zero_dx", registered)
    assert not backend_matches("torch-*", "torch-eager", ())     # another operator's names match nothing
