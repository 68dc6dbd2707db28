"""The localized aggregate tests (``accuracy.localized``): a wrong part of an output fails where
the whole-output tests dilute it, a correct store passes, and the numbers do not depend on how
the rows were chunked."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from accuracy.localized import BASE_SIGMAS, LocalSums, scan_sigmas, scan_windows


def _reference(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=gen, dtype=torch.float64)


def _sums(actual, exact, chunks=(None,), **model) -> LocalSums:
    local = LocalSums(tuple(exact.shape))
    start = 0
    for stop in (*chunks[:-1], exact.shape[0]) if chunks != (None,) else (exact.shape[0],):
        local.add(actual[start:stop], exact[start:stop], start, **model)
        start = stop
    return local


def test_every_run_of_rows_is_within_a_factor_two_of_a_scanned_window():
    n = 1000
    values = np.random.default_rng(1).normal(size=n)
    starts, stops, (sums,) = scan_windows(n, values)
    windows = set(zip(starts.tolist(), stops.tolist()))
    assert len(windows) == len(starts)
    for s, e, total in zip(starts.tolist(), stops.tolist(), sums.tolist()):
        assert math.isclose(total, values[s:e].sum(), rel_tol=1e-9, abs_tol=1e-9)
    assert (0, n) in windows
    gen = np.random.default_rng(0)
    for _ in range(2000):
        a = int(gen.integers(0, n))
        b = int(gen.integers(a + 1, n + 1))
        length = b - a
        # a window inside the run covering at least a quarter of it
        inside = [(s, e) for s, e in windows if a <= s and e <= b and 4 * (e - s) >= length]
        assert inside, (a, b)


def test_one_window_keeps_the_whole_output_tests_tail_constant():
    from accuracy.allowance import TAIL_SIGMAS
    assert BASE_SIGMAS == TAIL_SIGMAS
    assert scan_sigmas(1) == pytest.approx(BASE_SIGMAS)
    # 8.8e5 windows (dx's rows at M=220000): about 9.1
    assert 9.0 < scan_sigmas(len(scan_windows(220000)[0])) < 9.2, scan_sigmas(len(scan_windows(220000)[0]))


def test_a_correct_store_passes_every_localized_test():
    exact = _reference(4096, 96)
    actual = exact.to(torch.bfloat16)
    result = _sums(actual, exact).result(1e-4, atol=1e-5)
    assert result["rows"]["passed"] and result["columns"]["passed"] and result["variance"]["passed"]
    assert result["variance"]["ratio"] == pytest.approx(1.0, abs=0.1)   # the store's own ULP^2/12


def test_one_wrong_tile_fails_the_row_scan_and_is_named():
    exact = _reference(8192, 96)
    wrong = exact.clone()
    wrong[3072:4096] *= 1 + 1 / 128
    result = _sums(wrong.to(torch.bfloat16), exact).result(1e-4, atol=1e-5)
    rows = result["rows"]
    assert not rows["passed"]
    assert 3072 <= rows["worst"]["start"] and rows["worst"]["stop"] <= 4096
    # the whole output's fitted scale is moved by 1/8 of the error only
    assert abs(float(((wrong - exact) * exact).sum() / (exact * exact).sum())) < 1.1e-3


def test_a_few_wrong_columns_fail_the_column_scan():
    exact = _reference(4096, 96)
    wrong = exact.clone()
    wrong[:, 40:42] *= 1 - 1 / 64
    result = _sums(wrong.to(torch.bfloat16), exact).result(1e-4, atol=1e-5)
    assert not result["columns"]["passed"]
    assert result["columns"]["worst"]["start"] >= 40 and result["columns"]["worst"]["stop"] <= 42


def test_random_sign_errors_of_one_rtol_fail_the_variance_test():
    exact = _reference(4096, 96)
    gen = torch.Generator().manual_seed(1)
    sign = torch.randint(0, 2, exact.shape, generator=gen).double() * 2 - 1
    wrong = exact * (1 + sign / 128)
    result = _sums(wrong.to(torch.bfloat16), exact).result(1e-4, atol=1e-5)
    # the whole output's fitted scale stays inside its 7.5-sigma threshold (~1e-4)
    assert abs(float(((wrong - exact) * exact).sum() / (exact * exact).sum())) < 1e-4
    assert not result["variance"]["passed"] and result["variance"]["ratio"] > 5


def test_the_legitimate_noise_in_the_model_is_allowed():
    """An error of the model's declared noise (an intermediate BF16 store: uniform +-2^-8 r)
    passes when the model declares it and fails the variance test when it does not."""
    exact = _reference(4096, 96)
    gen = torch.Generator().manual_seed(2)
    noise = (torch.rand(exact.shape, generator=gen, dtype=torch.float64) * 2 - 1) * 2 ** -8
    actual = (exact * (1 + noise)).to(torch.bfloat16)
    declared = (2 ** -8) ** 2 / 3 * exact * exact
    assert _sums(actual, exact, noise_var=declared).result(1e-4, atol=1e-5)["variance"]["passed"]
    assert not _sums(actual, exact).result(1e-4, atol=1e-5)["variance"]["passed"]


def test_per_row_sums_do_not_depend_on_the_chunking():
    exact = _reference(3000, 50)
    actual = (exact * 1.001).to(torch.bfloat16)
    whole = _sums(actual, exact)
    chunked = _sums(actual, exact, chunks=(7, 1000, 2999, None))
    assert np.array_equal(whole.row, chunked.row)
    a, b = whole.result(1e-4, 1e-5), chunked.result(1e-4, 1e-5)
    assert a["rows"] == b["rows"] and a["variance"] == b["variance"]
    assert a["columns"]["passed"] == b["columns"]["passed"]
    # chunks of whole groups of rows: the column sums too, bit for bit
    aligned = _sums(actual, exact, chunks=(256, 768, 2816, None))
    assert np.array_equal(whole.col, aligned.col) and aligned.result(1e-4, 1e-5) == a


def test_elements_near_zero_get_the_atol():
    """A row of values far below the atol, each off by most of itself (an FP32 range limit of a
    correct kernel: sigmoid underflowing to 0), does not fail its one-row window; without the
    atol's share of the variance it would."""
    exact = _reference(64, 8)
    exact[10] = 1e-9
    actual = exact.clone()
    actual[10] = 0.0
    assert _sums(actual.to(torch.bfloat16), exact).result(1e-4, atol=1e-4)["rows"]["passed"]
    result = _sums(actual.to(torch.bfloat16), exact).result(1e-4, atol=0.0)
    assert not result["rows"]["passed"] and result["rows"]["worst"]["start"] == 10


def test_a_window_gets_the_bias_of_the_legitimate_paths_over_it():
    """A legitimate path whose rounding bias sits in some rows only (values it rounds one way
    there): a kernel on that path passes its windows with the path's bias per row, and fails
    them with the whole output's bias alone."""
    exact = _reference(4096, 96)
    path = exact.clone()
    path[1000:1100] *= 1 + 3e-3
    path = path.to(torch.bfloat16)
    numerators = ((path.double() - exact) * exact).sum(1).numpy()[None, :]
    whole_bias = float(numerators.sum() / (exact * exact).sum())
    sums = _sums(path, exact)
    assert sums.result(max(whole_bias, 1e-4), 1e-5, {"rows": numerators})["rows"]["passed"]
    assert not sums.result(max(whole_bias, 1e-4), 1e-5)["rows"]["passed"]
