import math

import torch

from accuracy.ulp import bf16_spacing, ulp_distance

BF = torch.bfloat16


def t(*v, dtype=BF):
    return torch.tensor(v, dtype=dtype)


def test_neighbours_are_one_ulp_apart_inside_a_binade():
    assert ulp_distance(t(1.0), t(1.0078125)).tolist() == [1.0]
    assert ulp_distance(t(1.0078125), t(1.0)).tolist() == [1.0]


def test_binade_edge_measures_in_the_golden_spacing():
    # below 2.0 the spacing is 2^-7, at 2.0 it is 2^-6: the distance is in the golden's ULP
    assert ulp_distance(t(2.0), t(1.9921875)).tolist() == [1.0]
    assert ulp_distance(t(1.9921875), t(2.0)).tolist() == [0.5]
    assert ulp_distance(t(0.99609375), t(1.0)).tolist() == [0.5]


def test_zero_and_subnormals_use_the_fixed_subnormal_spacing():
    sub = 2.0 ** -133
    assert bf16_spacing(t(0.0)).tolist() == [sub]
    assert ulp_distance(t(0.0), t(sub)).tolist() == [1.0]
    assert ulp_distance(t(2 ** -126), t(2 ** -126 - sub)).tolist() == [1.0]


def test_across_zero_stays_proportional_to_the_error():
    # an ordinal count would be ~32000 here; the golden-ULP distance is 256
    assert ulp_distance(t(-1.0), t(1.0)).tolist() == [256.0]


def test_fractional_against_float64_golden():
    assert ulp_distance(t(1.0), t(1.001953125, dtype=torch.float64)).tolist() == [0.25]


def test_nan_and_inf_propagate_as_nan_or_inf():
    d = ulp_distance(t(math.nan, math.inf, 1.0), t(1.0, 1.0, math.inf))
    assert math.isnan(d[0]) and math.isinf(d[1]) and math.isnan(d[2])
