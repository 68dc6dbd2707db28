"""The dual-benchmark verdict (``accuracy.dual``) on the wrong kernels of ``kernels.mutants``, with
torch-eager as the benchmark, at the case where the absolute gate catches each (same case outcomes
as the kill matrix, ``tests.mutants.kill_cases``: no extra golden pass).

Two mutants live where msprobe's absolute thresholds see nothing: at the tiny profile every
|golden| is ~1e-38, below the small-value atol 1e-16, so a flush to zero passes every ratio. The
verdict marks those outputs vacuous, and the absolute gate catches the mutants there."""

import pytest

from tests.mutants.kill_cases import KILLS, outcome

BLIND = {"fp16_store", "subnormals_flushed"}     # flush the tiny profile's ~1e-38 values to zero


@pytest.mark.parametrize("name", sorted(set(KILLS) - BLIND))
def test_mutant_fails_the_dual_verdict(name):
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
def test_dual_verdict_is_vacuous_where_msprobes_thresholds_are_absolute(name):
    spec, must_fail, _ = KILLS[name]
    out = outcome(spec)
    for o in must_fail:
        dual = out.dual[name][o]
        assert dual.passed and dual.vacuous and "Vacuous here" in dual.message, (o, dual.ratios)
        assert not out.verdicts[name][o].passed, o      # the absolute gate sees it


@pytest.mark.parametrize("spec", sorted({c for c, _, _ in KILLS.values()}, key=lambda c: c.id), ids=lambda c: c.id)
def test_the_benchmark_passes_against_itself(spec):
    out = outcome(spec)
    for o, v in out.dual["torch-eager"].items():
        assert v.passed and all(r <= 1 for r in v.ratios.values()), (o, v.ratios)
