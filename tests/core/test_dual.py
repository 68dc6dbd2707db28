"""The dual-benchmark verdict (``accuracy.dual``): msprobe's metrics, its ratios and their floor."""
from __future__ import annotations

import math

import pytest
import torch

from accuracy.dual import (REL_EPS, SMALL_VALUE, SMALL_VALUE_ATOL, dual_verdict, dual_verdicts, ratio)
from accuracy.metrics import SLICE_ELEMENTS, ErrorStats
from accuracy.tolerances import tolerances_for
from accuracy.ulp import bf16_spacing
from operators.swiglu_backward import OPERATOR as SWIGLU


def _msprobe_metrics(actual: torch.Tensor, golden: torch.Tensor) -> dict:
    """msprobe's formulas written out directly (``compare/algorithm.py``), for finite inputs."""
    a, b = actual.double().flatten(), golden.float().double().flatten()
    err = (a - b).abs()
    small = b.abs() <= SMALL_VALUE
    normal = ~small
    rel = err[normal] / (b.abs()[normal] + REL_EPS)
    d = a - b
    return {"small_value_error_ratio": float((small & (err > SMALL_VALUE_ATOL)).sum() / small.sum()),
            "rmse": float(err[normal].square().mean().sqrt()),
            "max_rel_err": float(rel.max()), "mean_rel_err": float(rel.mean()),
            "error_balance": float(abs(int((d > 0).sum()) - int((d < 0).sum())) / d.numel()),
            "ulp_over_1_share": float((err / bf16_spacing(b) > 1).double().mean())}


def test_dual_metrics_follow_msprobe_formulas_across_slices():
    gen = torch.Generator().manual_seed(7)
    rows = 3 * SLICE_ELEMENTS // 256 + 17            # several slices and a partial one
    golden = torch.randn(rows, 256, generator=gen, dtype=torch.float64) * torch.exp2(
        torch.randint(-14, 2, (rows, 256), generator=gen).double())          # small and normal values
    actual = (golden * (1 + 2.0 ** -8 * torch.randn(rows, 256, generator=gen, dtype=torch.float64))).to(torch.bfloat16)
    st = ErrorStats(tolerances_for(SWIGLU)["dg"], (rows, 256), dual=True)
    st.update(actual, golden)
    got = st.finalize()["dual"]
    want = _msprobe_metrics(actual, golden)
    assert 0 < got["small_values"] < rows * 256
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-5, abs=1e-12), name


def test_ratio_floor_and_zeros():
    assert ratio(4.0, 2.0, 1.0) == 2.0
    assert ratio(4.0, 0.5, 1.0) == 4.0          # the floor replaces a benchmark below it
    assert ratio(0.0, 0.0, 0.0) == 0.0          # nobody errs: pass
    assert ratio(1e-30, 0.0, 0.0) == math.inf   # only the kernel errs where even the ideal output is exact


def _dual(**values) -> dict:
    base = {"small_value_error_ratio": 0.5, "rmse": 1e-3, "max_rel_err": 4e-3, "mean_rel_err": 1e-3,
            "error_balance": 0.01, "ulp_over_1_share": 0.0, "nonfinite_disagreements": 0}
    return {**base, **values}


def test_verdict_limits_are_msprobes():
    bench, ideal = _dual(), _dual(rmse=5e-4, max_rel_err=2e-3, mean_rel_err=5e-4, small_value_error_ratio=0.4)
    assert dual_verdict("dg", _dual(), bench, ideal).passed
    assert dual_verdict("dg", _dual(rmse=2e-3), bench, ideal).passed                  # ratio 2: at the limit
    v = dual_verdict("dg", _dual(rmse=2.01e-3), bench, ideal)
    assert not v.passed and v.failed == ["rmse"] and "rmse" in v.message
    assert dual_verdict("dg", _dual(max_rel_err=4e-2), bench, ideal).passed            # max relative: limit 10
    assert dual_verdict("dg", _dual(max_rel_err=4.01e-2), bench, ideal).failed == ["max_rel_err"]
    assert dual_verdict("dg", _dual(error_balance=1.0), bench, ideal).passed           # reported, not gated
    assert dual_verdict("dg", _dual(nonfinite_disagreements=3), bench, ideal).failed == ["nonfinite"]


def test_the_floor_is_the_ideal_output_not_an_absolute_constant():
    """msprobe's floor 2^-8 would pass any RMSE below 2^-7; at outputs of size 1e-5 the ideal's
    RMSE is the floor, so an error 100x the ideal fails."""
    ideal = _dual(rmse=1e-8)
    bench = _dual(rmse=1.2e-8)
    assert not dual_verdict("dx", _dual(rmse=1e-6), bench, ideal).passed
    assert dual_verdict("dx", _dual(rmse=1e-6), bench, ideal).ratios["rmse"] == pytest.approx(1e-6 / 1.2e-8)


def test_no_benchmark_outputs_says_why():
    class Run:
        skipped, error, status = None, "RuntimeError: boom", None
    verdicts, why = dual_verdicts({"backends": {"k": {}}, "ideal": {}}, "torch-eager", case="C", runs={"torch-eager": Run()})
    assert verdicts == {} and "torch-eager" in why and "C" in why and "boom" in why
