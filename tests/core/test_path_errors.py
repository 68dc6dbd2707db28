"""The bias paths' compiled pass (``accuracy.path_errors``) gives what the torch expressions it
replaces give: the same direction counts, the same sums up to their summation order."""
from __future__ import annotations

import pytest
import torch

from accuracy.allowance import direction_counts
from accuracy.path_errors import path_error_sums
from accuracy.ulp import bf16_spacing
from goldens.rounding import round_to


def _torch_sums(value, exact):
    err = torch.nan_to_num(round_to(value, torch.bfloat16).double() - exact, 0.0, 0.0, 0.0)
    prod = (err * exact).reshape(exact.shape[0], -1)
    return prod.sum(1), prod.sum(0), direction_counts(err, exact, bf16_spacing(exact))


@pytest.mark.parametrize("scale", [1.0, 2.0 ** -130, 2.0 ** 100])
def test_the_compiled_pass_matches_torch(scale):
    gen = torch.Generator().manual_seed(0)
    exact = torch.randn(300, 200, generator=gen, dtype=torch.float64) * scale
    value = (exact * (1 + 1e-3 * torch.randn(300, 200, generator=gen, dtype=torch.float64))).float()
    value[3, 4], value[5, 6], exact[7, 8] = float("nan"), float("inf"), 0.0
    rows, cols, counts = path_error_sums(value, exact)
    rows_t, cols_t, counts_t = _torch_sums(value, exact)
    assert counts == counts_t and counts.counted > 10000
    assert torch.allclose(rows, rows_t, rtol=1e-10, atol=0) and torch.allclose(cols, cols_t, rtol=1e-10, atol=0)


def test_the_store_rounds_to_nearest_even_as_torch_does():
    """Every rounding case of the BF16 store: random bits, ties both ways, subnormals, the largest
    finite values (which round to infinity: an error counted as zero)."""
    gen = torch.Generator().manual_seed(1)
    bits = torch.randint(-2 ** 31, 2 ** 31 - 1, (1 << 16,), generator=gen, dtype=torch.int64).to(torch.int32)
    ties = (torch.arange(1 << 10, dtype=torch.int32) << 16) | 0x8000
    value = torch.cat([bits, ties, ties | (1 << 31)]).view(torch.float32).reshape(-1, 1)
    value = torch.where(torch.isfinite(value), value, torch.zeros_like(value))
    exact = value.double() * (1 + 2.0 ** -30)        # errors are the store's and this shift's
    rows, _, counts = path_error_sums(value, exact)
    rows_t, _, counts_t = _torch_sums(value, exact)
    assert counts == counts_t
    assert torch.equal(rows, rows_t)                  # one element a row: the same products


def test_an_fp32_output_is_taken_as_the_path_computed_it():
    """An FP32 output (attention's LSE) is not stored in BF16: its errors are the path's own, and
    at FP32 size none counts in the direction test's BF16 ULPs."""
    gen = torch.Generator().manual_seed(2)
    exact = torch.randn(300, 1, generator=gen, dtype=torch.float64) * 5
    value = exact.float()
    rows, cols, counts = path_error_sums(value, exact, torch.float32)
    err = value.double() - exact
    assert torch.allclose(rows, (err * exact).reshape(300), rtol=1e-12, atol=0)
    assert torch.allclose(cols, (err * exact).sum(0), rtol=1e-10, atol=0)
    assert counts.counted == 0
    assert not torch.allclose(path_error_sums(value, exact)[0], rows, rtol=1e-3, atol=0)   # the BF16 store's
    with pytest.raises(ValueError, match="stored in BF16 or FP32"):
        path_error_sums(value, exact, torch.float16)
