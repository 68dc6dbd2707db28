"""The derived rounding model (``accuracy.propagation``): exact where the error is linear in the
roundings, equal to a Monte-Carlo of the roundings where it is first order, and never below
what a real BF16 store does."""
from __future__ import annotations

import math

import torch

from accuracy import propagation
from accuracy.derived import TensorOps
from accuracy.propagation import SpreadOps, Spread, spread_inputs
from accuracy.ulp import bf16_spacing
from operators.bias_gelu_backward import DERIVED as BIAS_GELU, profiles
from operators.rmsnorm_backward.derived import DERIVED as RMSNORM
from operators.rmsnorm_backward.profiles import SCALES as RMSNORM_SCALES


def _bf16(t: dict) -> dict:
    return {k: v.to(torch.bfloat16) for k, v in t.items()}


def _half(v: torch.Tensor) -> torch.Tensor:
    """Half the BF16 spacing at |v| (1 + 2^-7), written out here so the test does not read the model's own."""
    mag = v.abs() * (1 + 2.0 ** -7)
    return torch.minimum(bf16_spacing(mag) / 2, mag)


def test_a_sum_of_stored_values_is_exact():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, generator=gen, dtype=torch.float64)
    s = propagation.sum_over(propagation.store("p", Spread(x)), 1)
    h = _half(x)
    # the point's errors are independent per element: variance sum h^2 / 3, worst case sum h
    assert torch.allclose(s.mixed["p"].sd.square(), (h.square() / 3).sum(1, keepdim=True), rtol=1e-12)
    assert torch.allclose(s.mixed["p"].worst, h.sum(1, keepdim=True), rtol=1e-12)


def test_a_broadcast_rounding_adds_linearly():
    """One rounded value per row times a row of exact values, summed over the row: the same
    rounding in every term, so its coefficient is the sum (not a quadrature)."""
    gen = torch.Generator().manual_seed(1)
    r = torch.randn(4, 1, generator=gen, dtype=torch.float64)
    y = torch.randn(4, 64, generator=gen, dtype=torch.float64)
    s = propagation.sum_over(propagation.store("r", Spread(r)) * Spread(y), 1)
    coef, _ = s.exact["r"]
    assert torch.allclose(coef, _half(r) * y.sum(1, keepdim=True), rtol=1e-12)


class _PerturbedOps(TensorOps):
    """Every point rounded by a random error uniform in +-half its BF16 spacing (FP64 math):
    a Monte-Carlo of the roundings the model propagates."""

    def __init__(self, gen):
        self.gen = gen

    def store(self, name, x):
        e = torch.rand(x.shape, generator=self.gen, dtype=torch.float64) * 2 - 1
        return x + _half(x) * e

    exp, sigmoid, tanh, erf = (staticmethod(f) for f in (torch.exp, torch.sigmoid, torch.tanh, torch.erf))
    rsqrt, sqrt = staticmethod(torch.rsqrt), staticmethod(torch.sqrt)


def _monte_carlo(derived, inputs, output, trials=200, perturbed=_PerturbedOps):
    """(model variance, Monte-Carlo variance, Monte-Carlo max |error|) of a row output, per element
    (``perturbed``: the Monte-Carlo's ops class, given the generator)."""
    exact64 = {k: v.double() for k, v in inputs.items()}
    ref = derived.evaluate(TensorOps(_Fp64Plan()), exact64)[0][output]
    gen = torch.Generator().manual_seed(7)
    errs = torch.stack([derived.evaluate(perturbed(gen), exact64)[0][output] - ref for _ in range(trials)])
    spread = derived.evaluate(SpreadOps, spread_inputs(inputs))[0][output]
    # the model's FP32 math is left out: the Monte-Carlo runs in FP64
    model = spread.variance() - (spread.mixed[propagation.MATH].sd.square().expand(spread.shape)
                                 if propagation.MATH in spread.mixed else 0)
    return model, errs.square().mean(0), errs.abs().amax(0), spread.worst()


class _Fp64Plan:
    @staticmethod
    def rounding(point):
        return None


def test_bias_gelu_model_matches_monte_carlo():
    """Element-wise math: the model's variance is the roundings' own to first order; the
    Monte-Carlo (200 trials per element) agrees within its sampling error, near GELU's zero
    slope too, where a rounding of h moves dx by GELU'' / GELU' of its spacing."""
    for scale in ("unit", "near_zero_slope"):
        inputs = _bf16(profiles.SCALES[scale](torch.Generator().manual_seed(3), 64, 200))
        model, mc, mc_max, worst = _monte_carlo(BIAS_GELU, inputs, "dx")
        ratio = float(mc.sum() / model.sum())
        assert 0.95 < ratio < 1.05, (scale, ratio)
        assert bool((mc_max <= worst * 1.001 + 1e-300).all()), scale


def test_rmsnorm_model_matches_monte_carlo():
    """dx = r (g - xhat c): g's rounding in both terms adds linearly, every g_j and xhat_j reach c
    through its mean. Dropping c's O(1/N) correlation with the element's own terms leaves the
    model within 5% of the Monte-Carlo over the output."""
    inputs = _bf16(RMSNORM_SCALES["unit"](torch.Generator().manual_seed(5), 32, 200))
    model, mc, mc_max, worst = _monte_carlo(RMSNORM, inputs, "dx")
    ratio = float(mc.sum() / model.sum())
    assert 0.95 < ratio < 1.05, ratio
    assert bool((mc_max <= worst * 1.001).all())


def test_real_bf16_paths_stay_within_the_derived_allowance():
    """PyTorch's path (x + b stored in BF16, FP32 GELU') and FP32 math with the stores: every
    element within the derived allowance, at every scale profile."""
    from operators.bias_gelu_backward import OPERATOR, TORCH_BF16
    sizes = {"M": 256, "N": 200}
    for scale, make in profiles.SCALES.items():
        inputs = _bf16(make(torch.Generator().manual_seed(11), 256, 200))
        exact = BIAS_GELU.evaluate(TensorOps(OPERATOR.schedules.FP64_GLOBAL.plan),
                                   {k: v.double() for k, v in inputs.items()})[0]["dx"]
        terms = BIAS_GELU.golden.chunk({k: v.double() for k, v in inputs.items() if k != "b"},
                                       {"b": inputs["b"].double()}, OPERATOR.schedules.FP64_GLOBAL.plan,
                                       want_rows=True, terms=BIAS_GELU.golden.term_sums(inputs)).row_terms
        allow = BIAS_GELU.gate.row_allowance("dx", exact, terms, None, sizes).vs_reference
        for plan in (TORCH_BF16.plan, OPERATOR.schedules.BF16_FAITHFUL):
            f32 = {k: v.float() for k, v in inputs.items()}
            kernel = BIAS_GELU.evaluate(TensorOps(plan), f32)[0]["dx"].double()   # before its own store
            excess = (kernel - exact).abs() - allow
            assert float(excess.max()) <= 0, (scale, float(excess.max()))


def _scale_numerator_variance(derived, inputs, output, trials=300):
    """(model, Monte-Carlo) variance of the fitted scale's numerator sum r err over the output."""
    from accuracy.derived import DerivedTermSums
    plan = _Fp64Plan()
    exact64 = {k: v.double() for k, v in inputs.items()}
    rows = {k: v for k, v in exact64.items() if v.shape[0] == next(iter(exact64.values())).shape[0]}
    weights = {k: v for k, v in exact64.items() if k not in rows}
    golden = derived.golden.chunk(rows, weights, plan, want_rows=True, terms=DerivedTermSums())
    spread = golden.row_terms.outputs[output]
    r = derived.evaluate(TensorOps(plan), exact64)[0][output]
    model = float((r.square() * spread.independent_var).sum() + spread.shared_rows.sum())
    gen = torch.Generator().manual_seed(9)
    nums = torch.stack([((derived.evaluate(_PerturbedOps(gen), exact64)[0][output] - r) * r).sum()
                        for _ in range(trials)])
    return model, float(nums.square().mean())


def test_the_fitted_scales_variance_matches_monte_carlo_through_shared_roundings():
    """RMSNorm's c (a mean over the row) and SwiGLU's dx (dg's roundings through a matmul reach a
    whole row of dx together): the model's variance of sum r err, from the reverse pass for the
    shared points, within the Monte-Carlo's sampling error (300 trials: +-17% at 2 sigma)."""
    from operators.swiglu_backward.derived import DERIVED as SWIGLU
    from operators.swiglu_backward.profiles import SCALES as SWIGLU_SCALES
    cases = ((RMSNORM, _bf16(RMSNORM_SCALES["unit"](torch.Generator().manual_seed(5), 16, 200)), "dx"),
             (SWIGLU, _bf16(SWIGLU_SCALES["unit"](torch.Generator().manual_seed(5), 16, 96, 200)), "dx"))
    for derived, inputs, output in cases:
        model, mc = _scale_numerator_variance(derived, inputs, output)
        assert 0.8 < mc / model < 1.2, (output, mc / model)


class _PerturbedAttentionOps(_PerturbedOps):
    """The Monte-Carlo's ops for attention's math: its P~ store is a plain one here (the model
    allows more, any running max's binade) and it takes logs."""

    def store(self, name, x, rescaled=False):
        return super().store(name, x)

    log = staticmethod(torch.log)


def test_a_per_row_error_broadcast_over_the_keys_is_not_averaged_away():
    """Attention's delta = rowsum(dO * O) carries one error per query row (O's stores); dS = P (dP
    - delta) repeats it for every key and dQ = dS K sums it over the keys: the same error in every
    term. At the cancellation profile (dP - delta is 1% of dP) it dominates dQ's error. The model
    must not add the copies in quadrature: per element its variance is not below half the
    Monte-Carlo's (200 trials: largest Monte-Carlo / model 0.66; adding the copies in quadrature
    left the model 10x below at one element of this case). It adds them by |P K|, where the true
    error sums P K with its signs: over the output its variance is 11x the Monte-Carlo's (0.092),
    and the test keeps it within 20x."""
    from operators.attention import DERIVED as ATTENTION
    from operators.attention.profiles import SCALES as ATTENTION_SCALES
    inputs = _bf16(ATTENTION_SCALES["cancellation"](torch.Generator().manual_seed(2), 16, 64, 32))
    model, mc, _, _ = _monte_carlo(ATTENTION, inputs, "dq", perturbed=_PerturbedAttentionOps)
    assert float((mc / model).max()) < 2.0, float((mc / model).max())
    assert float(mc.sum() / model.sum()) > 0.05, float(mc.sum() / model.sum())


def test_a_saturated_sigmoid_carries_no_function_error():
    """Where sigmoid's FP32 value is 1 every real form returns exactly 1, so the model allows no
    function ulps there (x (1 - s) in SiLU's derivative would carry them times x)."""
    from accuracy.propagation import SpreadOps, Spread
    x = torch.tensor([2.0, 17.0, 18.0, 3.4e5], dtype=torch.float64)
    x32 = x.float()
    forms = {"torch": torch.sigmoid(x32), "reciprocal": 1 / (1 + torch.exp(-x32)),
             "tanh": (1 + torch.tanh(x32 / 2)) / 2}
    for name, s in forms.items():
        assert bool((s[2:] == 1.0).all()), name
    worst = SpreadOps.sigmoid(Spread(x)).worst()
    assert bool((worst[2:] == 0).all())
    assert bool((worst[:2] > 0).all())       # below saturation: 4 ulps of s
