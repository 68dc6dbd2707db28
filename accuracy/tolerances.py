"""The one tolerance table of the gate, per output.

Every output starts from the operator's acceptance criterion (the article's
``numpy.testing.assert_allclose(rtol=1/128, atol=1e-4)``): rtol = 1/128 = 2^-7
is one BF16 ULP at the bottom of a binade (a value's ULP is 2^-8..2^-7 of it),
so two correct BF16 results that round differently still pass; atol = 1e-4 is
the article's floor for elements near zero. rtol and atol always come as a pair:
with atol = 0 an element whose golden is 0 would have to be exact.

Magnitude-aware atol. The article's atol is an absolute number chosen for
activations of order one, but at its own case every element of dg, dfc, dx,
dw_g and dw_fc is below 1e-4 (max |dx| 2.7e-5): the gate then accepts an
all-zero output. The gate therefore uses

    atol_effective = min(atol, rtol * rms(golden))

An element of typical size is then allowed at most about twice its rtol share,
and an all-zero output (error = |golden| per element) fails as soon as one
element exceeds rms/127, which every non-constant output has. Why rms rather
than the bound: at M = 220000 the worst-case bound gamma_M(u_fp32) * sum|terms|
is about 4x the value itself for dw, which would accept zeros again; why rms
rather than max: one outlier (the outliers profile) must not loosen every
other element. The record says when atol was capped and by how much.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from contract.operator import Operator

ACCEPTANCE_RTOL = 1 / 128
ACCEPTANCE_ATOL = 1e-4


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    golden: str = "reference"         # which golden layer the gate compares against
    magnitude_aware: bool = True      # cap atol at rtol * rms(golden)

    def effective_atol(self, golden_rms: float) -> float:
        if not self.magnitude_aware or not math.isfinite(golden_rms):
            return self.atol
        return min(self.atol, self.rtol * golden_rms)

    def element_bound(self, reference, allowance=None, golden_rms: float = math.inf):
        """The gate's element test as a tensor: an element fails when |output - reference| exceeds
        atol_effective + rtol |reference| + allowance (``accuracy.metrics`` fuses the same test
        into its pass; this form is for studies that need the bound itself)."""
        bound = self.effective_atol(golden_rms) + self.rtol * reference.double().abs()
        return bound if allowance is None else bound + allowance


ACCEPTANCE = Tolerance(ACCEPTANCE_RTOL, ACCEPTANCE_ATOL)

# An FP32 output (attention's LSE) under the same criterion scaled to its format: rtol = 2^-23 is
# one FP32 ULP at the bottom of a binade, as 1/128 is one BF16 ULP, so two correct FP32 results
# that round differently pass; atol = 1e-5 is torch.testing's FP32 default, capped at rtol x rms
# like the BF16 one. The derived allowance carries the legitimate FP32 spread (the sum over N keys
# in any order, exp and log within a few ULPs); the BF16 criterion would let an LSE rounded through
# BF16 pass (2^-9 of |LSE|: 0.02 at LSE = 10, a 2% error in every probability read back from it).
FP32_ACCEPTANCE = Tolerance(2.0 ** -23, 1e-5)
BY_DTYPE = {torch.bfloat16: ACCEPTANCE, torch.float32: FP32_ACCEPTANCE}


def tolerances_for(operator: Operator) -> dict[str, Tolerance]:
    """Every output of ``operator`` under the acceptance criterion of its dtype (the operator's
    own, rtol 1/128 and atol 1e-4, for its BF16 outputs). An output in a dtype without one is an
    error naming it: no format's criterion is silently another's."""
    missing = {name: operator.output_dtype(name) for name in operator.output_names
               if operator.output_dtype(name) not in BY_DTYPE}
    if missing:
        raise ValueError(f"operator {operator.name!r}: no acceptance criterion for outputs {missing} "
                         f"(accuracy.tolerances.BY_DTYPE has {sorted(str(d) for d in BY_DTYPE)})")
    return {name: BY_DTYPE[operator.output_dtype(name)] for name in operator.output_names}


# The article itself checks only dx, dw_g, dw_fc, db_g and db_fc; dg and dfc are
# gated here too because a wrong dg/dfc that happens to cancel in db would pass otherwise.
