"""Errors in BF16 units in the last place (ULP) of the golden value.

``ulp_distance(a, b) = |a - b| / spacing(b)``, where spacing(b) is the gap
between BF16 neighbours in b's binade (2^(e-7) for 2^e <= |b| < 2^(e+1), and
2^-133 among the subnormals). Measuring in the golden's ULP keeps the number
meaningful where the golden is not a BF16 value (FP64) and across zero, where
an ordinal count of representable values between a and b would jump by tens
of thousands for a tiny absolute error. Across a binade edge it is asymmetric
by design: just below 2.0 one ULP is 2^-7, at 2.0 it is 2^-6.
"""
from __future__ import annotations

import torch

MANTISSA_BITS = 7          # BF16 stores 7 fraction bits
MIN_NORMAL_EXP = -126      # smallest normal binade, as in FP32


# The exponent field of a float: masking sign and fraction leaves 2^floor(log2|v|) (inf at inf,
# 0 among the subnormals). Three passes instead of frexp/ldexp/where's eight.
_EXPONENT_MASK = {torch.float32: (torch.int32, 0x7F800000),
                  torch.float64: (torch.int64, 0x7FF0000000000000)}


def bf16_spacing(v: torch.Tensor, smallest_binade: float = 2.0 ** MIN_NORMAL_EXP) -> torch.Tensor:
    """Gap between BF16 neighbours at |v| (the ULP of v's binade), in v's float dtype; inf at inf.
    ``smallest_binade``: where the subnormals begin in v's units (2^-126 x s for values scaled
    by a power of two s, so the spacing among them stays 2^-133 x s)."""
    v = v if v.dtype in _EXPONENT_MASK else v.double()
    int_dtype, mask = _EXPONENT_MASK[v.dtype]
    binade = torch.bitwise_and(v.contiguous().view(int_dtype), mask).view(v.dtype)
    return binade.clamp_(min=smallest_binade).mul_(2.0 ** -MANTISSA_BITS)


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|actual - expected| in ULPs of expected (float64; NaN where either is NaN)."""
    return (actual.double() - expected.double()).abs() / bf16_spacing(expected)
