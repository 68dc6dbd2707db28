"""``accuracy.products``: ``upper_product`` never below the exact product, by at most its stated
margin; ``ScaledFactor``'s estimate within FP32's accumulation error of it, at any scale."""
import torch

from accuracy.products import U_FP32, ScaledFactor, upper_product


def _wide(rows: int, cols: int, spread: int, seed: int) -> torch.Tensor:
    """Non-negative FP64 values over 2^spread of dynamic range, a few exact zeros among them."""
    g = torch.Generator().manual_seed(seed)
    mantissa = torch.rand(rows, cols, generator=g, dtype=torch.float64)
    exponent = torch.randint(-spread, 1, (rows, cols), generator=g).double()
    return torch.where(mantissa < 0.02, 0.0, mantissa * torch.exp2(exponent))


def test_never_below_the_fp64_product_and_within_its_margin():
    n = 1024
    x, y = _wide(96, n, 250, 0), _wide(n, 40, 60, 1)
    x[5] = 0.0                        # a row without error: its products stay exactly 0
    y[:, 7] = 0.0
    x[9] = 2.0 ** -1000 * x[9]        # a row far below FP32's range, scaled, not lost
    exact = x @ y
    upper = upper_product(x, y)
    assert bool((upper >= exact).all())
    assert float(upper[5].abs().max()) == 0.0 and float(upper[:, 7].abs().max()) == 0.0
    ratio = (upper / exact)[exact > 0]
    # the FP32 sum may itself lie up to gamma_n above the exact one, and the margin is added on top
    assert float(ratio.max()) <= 1 + (2 * n + 6) * U_FP32


def test_a_row_wider_than_fp32s_range_keeps_its_large_terms():
    """A row whose elements span 2^200 (c^2 of a dg from 1e-20 to 1e2 at the saturating profile
    spans 2^146): the small ones flush in FP32 and their terms are bounded by the underflow term,
    so the result is the large terms' product within the margin."""
    x = torch.tensor([[1.0, 2.0 ** -200, 3.0]], dtype=torch.float64)
    y = torch.tensor([[0.5], [0.125], [0.25]], dtype=torch.float64)
    exact = x @ y
    upper = upper_product(x, y)
    assert float(exact) <= float(upper) <= float(exact) * (1 + 10 * U_FP32)


def test_ranges_beyond_fp32_in_both_factors_stay_an_upper_bound():
    """Where a row's and a column's largest elements meet only terms flushed in FP32, the result
    is the underflow term (loose, 2^-138 of the row's and column's largest): still never below."""
    x = torch.tensor([[1.0, 2.0 ** -200, 3.0]], dtype=torch.float64)
    y = torch.tensor([[0.5], [2.0 ** 190], [0.25]], dtype=torch.float64)
    assert float(upper_product(x, y)) >= float(x @ y)


def test_the_scaled_estimate_is_fp32_accurate_at_any_scale_and_sign():
    """Signed factors whose rows and columns sit far outside FP32's range (a path's operand errors
    at the tiny profile are ~2^-133; here 2^-160 and 2^150): each element within gamma_n of the sum of |terms|, as an FP32
    product of in-range factors would be, where an unscaled FP32 product loses them to zero."""
    n = 1024
    g = torch.Generator().manual_seed(2)
    sign_x = torch.where(torch.rand(64, n, generator=g) < 0.5, -1.0, 1.0).double()
    sign_y = torch.where(torch.rand(n, 48, generator=g) < 0.5, -1.0, 1.0).double()
    x, y = _wide(64, n, 30, 3) * sign_x, _wide(n, 48, 30, 4) * sign_y
    x[3] *= 2.0 ** -160
    y[:, 5] *= 2.0 ** 150
    x[7] = 0.0
    exact = x @ y
    estimate = ScaledFactor(x).times(y)
    margin = 2 * n * U_FP32 * (x.abs() @ y.abs())
    assert bool(((estimate - exact).abs() <= margin).all())
    assert float(estimate[7].abs().max()) == 0.0
    assert float((x.float() @ y.float()).double()[3, :5].abs().max()) == 0.0     # what the scaling keeps
    assert float(estimate[3].abs().min()) > 0.0
    # x scaled once for several products, y scaled in place where it is scratch: the same bits
    factor, scratch = ScaledFactor(x), y.clone()
    assert torch.equal(factor.times(scratch, scratch=True), estimate) and torch.equal(factor.times(y), estimate)
    assert not torch.equal(scratch, y)
