"""Metrics on known values, the bounds, and the gate's verdicts and messages."""
import math

import pytest
import torch

from accuracy import allowance
from accuracy.bounds import gamma, reduction_bound
from accuracy.gate import AccuracyError, assert_accurate, verdict
from accuracy.metrics import ErrorStats
from accuracy.tolerances import ACCEPTANCE_ATOL, ACCEPTANCE_RTOL, Tolerance
from operators.swiglu_backward.schedule import FAITHFUL_GLOBAL
from operators.swiglu_backward.schedule import ARTICLE
from tests.core.helpers import errors_around_the_atol
from operators.swiglu_backward import OPERATOR as SWIGLU

TOL = Tolerance(ACCEPTANCE_RTOL, ACCEPTANCE_ATOL)


def stats(actual, expected, tol=TOL, **kw):
    a, b = torch.tensor(actual, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64)
    st = ErrorStats(tol, tuple(a.shape))
    st.update(a, b, **kw)
    return st.finalize()


def test_known_errors_and_their_indices():
    m = stats([[1.0, 2.0], [3.0, 4.5]], [[1.0, 2.0], [3.0, 4.0]])
    assert m["max_abs_err"] == 0.5 and m["max_abs_index"] == [1, 1]
    assert m["max_rel_err"] == pytest.approx(0.125)
    assert m["mismatches"] == 1 and m["mismatch_fraction"] == 0.25
    assert m["worst"][0]["index"] == [1, 1] and m["worst"][0]["actual"] == 4.5
    assert m["ulp_max"] == pytest.approx(0.5 / 2 ** -5)      # ULP of 4.0 is 2^-5
    assert m["sign_bias"] == 1.0 and m["exact_elements"] == 3


def test_zeros_nan_and_inf_are_data_not_exceptions():
    m = stats([0.0, math.nan, math.nan, math.inf, 1.0], [0.0, math.nan, 1.0, math.inf, -math.inf])
    nf = m["nonfinite"]
    assert nf == {"nan_both": 1, "nan_actual_only": 1, "nan_expected_only": 0, "inf_match": 1, "inf_mismatch": 1}
    assert m["mismatches"] == 2 and m["nonfinite_disagreements"] == 2


def test_empty_input_never_raises():
    st = ErrorStats(TOL, (0, 3))
    st.update(torch.zeros(0, 3), torch.zeros(0, 3))
    assert st.finalize()["mismatches"] == 0


def test_cosine_and_sign_bias():
    m = stats([1.0, 2.0, 3.0], [1.1, 2.1, 3.1])
    assert m["sign_bias"] == -1.0
    assert 0.99 < m["cosine"] < 1.0


def test_magnitude_aware_atol_and_vacuity():
    small = [1e-5, -2e-5, 3e-5]
    zeros = stats([0.0, 0.0, 0.0], small)
    assert zeros["zero_passes_seed_gate"] and zeros["mismatches_seed_gate"] == 0   # the article's gate: vacuous
    assert zeros["atol_capped"] and zeros["atol_effective"] == pytest.approx(ACCEPTANCE_RTOL * math.sqrt(sum(v * v for v in small) / 3))
    assert zeros["mismatches"] == 3                                                 # ours: caught
    big = stats([1.0, 2.0], [1.0, 2.0])
    assert not big["atol_capped"] and big["atol_effective"] == ACCEPTANCE_ATOL


def test_small_value_share():
    m = stats([0.0] * 4, [1e-5, 1.0, 2.0, 3.0])
    assert m["small_value_share"] == 0.25 and not m["zero_passes_seed_gate"]


def test_gamma():
    assert gamma(10, 2.0 ** -24) == pytest.approx(10 * 2 ** -24 / (1 - 10 * 2 ** -24))
    assert gamma(256, 2.0 ** -8) == math.inf


def test_reduction_bound_holds_for_an_fp32_sum():
    gen = torch.Generator().manual_seed(1)
    terms = torch.randn(20000, 64, generator=gen, dtype=torch.float64)
    exact = terms.sum(0)
    computed = terms.float().cumsum(0)[-1].double()          # recursive FP32 summation, the worst order
    bound = reduction_bound(terms.abs().sum(0), exact, length=20000, sched=FAITHFUL_GLOBAL, kernel="b",
                            inputs_stored=None, output=None)
    assert ((computed - exact).abs() <= bound).all()
    # the allowance's FP32-order term (partial sums, accuracy.allowance) is far below the worst case and
    # still covers the recursive sum, whose partial sums are the running sums themselves
    order = allowance.tail_sigmas(64) * allowance.U_FP32 * math.sqrt(20000 / 3) * terms.cumsum(0).abs().max(0).values
    assert ((computed - exact).abs() <= order).all() and (order < bound / 10).all()


def test_bf16_accumulation_across_tiles_widens_the_bound():
    s = torch.ones(1, 4)
    one_tile = reduction_bound(s, s, length=1024, sched=ARTICLE, kernel="b", inputs_stored=None, output="db")
    many = reduction_bound(s, s, length=220000, sched=ARTICLE, kernel="b", inputs_stored=None, output="db")
    assert (many > one_tile * 10).all()


def test_failure_message_reads_like_assert_close_and_locates_the_error():
    m = stats([[1.0, 2.0], [3.0, 4.5]], [[1.0, 2.0], [3.0, 4.0]])
    v = verdict("dx", "faithful", m, case="M2-K2-N2-unit-s0", backend="my.pkg:kern")
    assert not v.passed
    for text in ("Accuracy gate failed: case M2-K2-N2-unit-s0, backend 'my.pkg:kern', output 'dx' vs golden 'faithful'",
                 "Mismatched elements: 1 / 4 (25%)",
                 "Greatest absolute difference: 0.5 at index (1, 1)",
                 "Greatest relative difference: 0.125 at index (1, 1) (up to 0.0078125 allowed)",
                 "Worst element (1, 1): kernel 4.5, golden 4"):
        assert text in v.message, (text, v.message)
    with pytest.raises(AccuracyError, match="Mismatched elements: 1 / 4"):
        assert_accurate({"dx": v})


def test_message_says_when_the_articles_gate_would_pass_zeros():
    m = stats([0.0, 0.0, 0.0], [1e-5, -2e-5, 3e-5])
    v = verdict("dw_g", "faithful", m, case="c", backend="b")
    assert "capped to" in v.message and "would PASS" in v.message and "all-zero output" in v.message


def test_a_nan_failure_names_the_first_disagreeing_element():
    from accuracy.gate import verdict
    from accuracy.metrics import ErrorStats
    from accuracy.tolerances import tolerances_for
    golden = torch.arange(1, 13, dtype=torch.float64).reshape(3, 4)
    kernel = golden.clone().to(torch.bfloat16)
    kernel[1, 2] = float("nan")
    kernel[2, 0] = float("inf")
    st = ErrorStats(tolerances_for(SWIGLU)["dx"], (3, 4))
    st.update(kernel[:2], golden[:2], row_offset=0)
    st.update(kernel[2:], golden[2:], row_offset=2)
    v = verdict("dx", "faithful", st.finalize(), case="c", backend="b")
    assert not v.passed
    assert "NaN in kernel only 1, NaN in golden only 0, Inf mismatched 1" in v.message
    assert "First non-finite disagreement at index (1, 2): kernel nan, golden 7" in v.message
    assert "Greatest absolute difference among finite pairs" in v.message


def test_mismatch_count_is_exact_when_the_reference_rms_is_known_first(monkeypatch):
    """With the reference rms given up front (as ``compare_case`` does) every mismatch is counted as
    it streams past. Without it the count comes from the kept excess: when more than the cap is
    held, the largest half is counted and let go, so an all-wrong output (its excess far above
    the atol) is still counted exactly, with at most the cap held at once."""
    import accuracy.metrics as metrics_module
    from accuracy.metrics import ErrorStats
    from accuracy.tolerances import tolerances_for
    monkeypatch.setattr(metrics_module, "EXCESS_CAP", 1000)
    gen = torch.Generator().manual_seed(3)
    golden = torch.randn(4096, 64, generator=gen, dtype=torch.float64)
    actual = torch.zeros(4096, 64, dtype=torch.bfloat16)          # all wrong
    tol = tolerances_for(SWIGLU)["dg"]
    rms = float(golden.float().double().square().mean().sqrt())
    atol = tol.effective_atol(rms)
    want = int((golden.float().abs() - tol.rtol * golden.float().abs() > atol).sum())
    known = ErrorStats(tol, (4096, 64), scale_rms=rms)
    capped = ErrorStats(tol, (4096, 64))
    held = 0
    for start in range(0, 4096, 1024):
        known.update(actual[start:start + 1024], golden[start:start + 1024], row_offset=start)
        capped.update(actual[start:start + 1024], golden[start:start + 1024], row_offset=start)
        held = max(held, capped.n_excess_kept)
    k, c = known.finalize(), capped.finalize()
    assert k["mismatches_exact"] and k["mismatches"] == want > 1000
    assert c["mismatches_exact"] and c["mismatches"] == want and held <= 1000


@pytest.mark.parametrize("fused", [True, False])
def test_a_count_is_a_range_when_the_kept_ceiling_falls_below_the_atol(monkeypatch, fused):
    """Errors spread over 0..1.1 atol, with the atol unknown while they stream and no floor: most
    of the excess lies below the final atol, so the cap's ceiling falls below it and the values
    counted above the ceiling are on an unknown side: the count is a range holding the exact
    count, never a wrong number called exact (``compare_case`` then compares again with the rms
    known)."""
    import accuracy.metrics as metrics_module
    from accuracy.metrics import ErrorStats
    from accuracy.tolerances import tolerances_for
    monkeypatch.setattr(metrics_module, "EXCESS_CAP", 1000)
    tol = tolerances_for(SWIGLU)["dx"]
    gen = torch.Generator().manual_seed(5)
    rows, width = 4096, 64
    golden, actual, rms = errors_around_the_atol(tol, rows, width, gen)
    known = ErrorStats(tol, (rows, width), scale_rms=rms)
    capped = ErrorStats(tol, (rows, width))
    if not fused:
        for st in (known, capped):
            monkeypatch.setattr(st, "_update_compiled", lambda *a, **k: False)
    for start in range(0, rows, 512):
        part = slice(start, start + 512)
        known.update(actual[part], golden[part], row_offset=start)
        capped.update(actual[part], golden[part], row_offset=start)
    capped.settle_atol(rms)
    assert capped.overflowed
    k, c = known.finalize(), capped.finalize()
    assert k["mismatches_exact"] and not c["mismatches_exact"]
    assert c["mismatches"] <= k["mismatches"] <= c["mismatches_upper"]
    assert c["mismatches"] < c["mismatches_upper"]


@pytest.mark.parametrize("fused", [True, False])
def test_a_rising_excess_floor_keeps_the_count_exact_and_the_buffer_small(monkeypatch, fused):
    """While the atol is unknown a comparison keeps only the excess above a lower bound of it
    (``raise_excess_floor``, as ``compare_case`` raises it with the rms of the rows so far): the
    count once the atol is known is the known-atol count, on the compiled pass and the eager one,
    while the values held at once stay a small share of the elements with a positive excess.
    Data: errors of 0-1.1 atol on goldens whose rtol share is far below the atol (one large
    column sets the rms), so nearly every element has a positive excess and the count depends on
    where the atol falls."""
    import numpy as np
    from accuracy.tolerances import tolerances_for
    tol = tolerances_for(SWIGLU)["dx"]
    gen = torch.Generator().manual_seed(5)
    rows, width = 4096, 64
    golden, actual, rms = errors_around_the_atol(tol, rows, width, gen)
    atol = tol.effective_atol(rms)
    assert atol < tol.atol                      # the rms sets it, not the article's 1e-4
    known = ErrorStats(tol, (rows, width), scale_rms=rms)
    floored = ErrorStats(tol, (rows, width))
    if not fused:
        for st in (known, floored):
            monkeypatch.setattr(st, "_update_compiled", lambda *a, **k: False)
    sq, held = 0.0, 0
    positive = 0
    for start in range(0, rows, 512):
        part = slice(start, start + 512)
        sq += float(golden[part].float().double().square().sum())
        floor = tol.effective_atol(math.sqrt(sq / (rows * width)))
        assert floor <= atol
        floored.raise_excess_floor(floor)
        assert floored.excess_floor <= floor and np.float32(floored.excess_floor) == floored.excess_floor
        known.update(actual[part], golden[part], row_offset=start)
        floored.update(actual[part], golden[part], row_offset=start)
        held = max(held, sum(t.numel() for t in floored.excess_kept))
        excess = (actual[part] - golden[part].float().double()).abs() - tol.rtol * golden[part].float().double().abs()
        positive += int((excess > 0).sum())
    floored.settle_atol(rms)
    k, f = known.finalize(), floored.finalize()
    assert f["mismatches_exact"] and f["mismatches"] == k["mismatches"] > 0
    # measured: 98% of the elements with a positive excess, at most 17% of them held at once
    assert positive > 0.9 * rows * width and held < 0.25 * positive


def test_the_excess_floor_is_the_largest_fp32_value_not_above_the_bound():
    """An FP32 excess above the atol must be above the floor: the floor rounds the bound down."""
    import numpy as np
    from accuracy.tolerances import tolerances_for
    for bound in (1e-7, 3e-7, 2.0 ** -20, 1 / 3 * 1e-5):
        st = ErrorStats(tolerances_for(SWIGLU)["dx"], (1, 1))
        st.raise_excess_floor(bound)
        f = np.float32(st.excess_floor)
        assert float(f) == st.excess_floor <= bound < float(np.nextafter(f, np.float32(np.inf)))
