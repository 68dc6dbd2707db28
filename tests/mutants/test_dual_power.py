"""The dual-benchmark verdict (``accuracy.dual``) on the wrong kernels of ``operators.swiglu_backward.kernels.mutants``, with
torch-eager as the benchmark, at the case where the absolute gate catches each (same case outcomes
as the kill matrix, ``tests.mutants.kill_cases``: no extra golden pass).

Two mutants live where msprobe's absolute thresholds see nothing: at the tiny profile every
|golden| is ~1e-38, below the small-value atol 1e-16, so a flush to zero passes every ratio. The
verdict marks those outputs vacuous and lets the scale-free ULP rule decide there, which catches
them (as the absolute gate does)."""

import pytest

from runs import platform_facts
from accuracy.dual import RATIO_LIMITS
from tests.mutants.kill_cases import KILLS, outcome

BLIND = {"fp16_store", "subnormals_flushed"}     # flush the tiny profile's ~1e-38 values to zero


@pytest.mark.parametrize("name", sorted(KILLS))
def test_mutant_fails_the_dual_verdict(name):
    if name in BLIND and not platform_facts.fp32_keeps_subnormals():
        pytest.skip(f"{name} flushes the tiny profile's subnormals, as this platform's FP32 (and so the "
                    f"benchmark) does: the dual verdict cannot tell them apart here; the absolute gate can")
    spec, _, _ = KILLS[name]
    out = outcome(spec)
    assert out.dual_missing is None, out.dual_missing
    verdicts = out.dual[name]
    failed = {o: v for o, v in verdicts.items() if not v.passed}
    assert failed, f"{name} passes the dual verdict at {spec.id}: " + "; ".join(
        f"{o} {v.ratios}" for o, v in verdicts.items())
    for o, v in failed.items():
        assert v.message.startswith("Dual-benchmark verdict failed") and spec.id in v.message and repr(o) in v.message


@pytest.mark.parametrize("name", sorted(BLIND))
def test_where_the_ratios_are_vacuous_the_ulp_rule_decides(name):
    spec, must_fail, _ = KILLS[name]
    out = outcome(spec)
    for o in must_fail:
        dual = out.dual[name][o]
        assert dual.vacuous and "Vacuous ratios here" in dual.message, (o, dual.ratios)
        gated = [r for metric, r in dual.ratios.items() if RATIO_LIMITS[metric] is not None]
        assert all(r <= 1 for r in gated), (o, dual.ratios)        # the gated ratios alone pass zeros
    failed = {o for o in must_fail if not out.dual[name][o].passed}
    assert all(out.dual[name][o].failed == ["ulp_rule"] for o in failed), failed
    if platform_facts.fp32_keeps_subnormals():
        # the benchmark's FP32 dg, dfc keep the subnormals (within 1 ULP); the mutant's are flushed
        assert {"dg", "dfc"} <= failed, failed
    else:
        # the benchmark flushes them too: the ULP rule's "no more than the benchmark" lets them pass
        pytest.skip("this platform's FP32 flushes subnormals: torch-eager, the benchmark, flushes the tiny "
                    "profile's dg/dfc as these mutants do, so the dual verdict cannot tell them apart")


@pytest.mark.parametrize("spec", sorted({c for c, _, _ in KILLS.values()}, key=lambda c: c.id), ids=lambda c: c.id)
def test_the_benchmark_passes_against_itself(spec):
    out = outcome(spec)
    for o, v in out.dual["torch-eager"].items():
        assert v.passed and all(r <= 1 for r in v.ratios.values()), (o, v.ratios)
