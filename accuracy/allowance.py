"""The gate's allowance: what a correct kernel may add to the article's criterion, and the tail
constant that turns a rounding model's variance into a per-element allowance.

The gate compares every kernel with one reference, fixed by the operator: FP64 math from
the BF16 inputs, each output rounded once to BF16 (``goldens.stream``'s FP64 layer). A
correct kernel may differ from it by the article's rtol (one BF16 ULP: its own store and
the reference's) plus what its legitimate internal choices add. The operator lists those
choices and the model of each (``operators.<name>.gate``: SwiGLU's are in
``operators.swiglu_backward.gate``); here is what every operator shares:

* an ``Allowance`` per output element, against the reference and against the kernel's own
  upstream outputs, with the variances the aggregate tests read;
* the reductions over M (``reduction``), from the reference's term sums that the operator's
  golden keeps (``abs``, ``var``, ``prefix``, ``block``, ``floor_l1``, ``shared``): each term
  carries up to two independent roundings, each uniform in +-half the BF16 spacing of the
  value rounded (Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019), adding in quadrature,
  capped by the worst case 2 u sum|t|; any FP32 summation order whose partial sums stay within
  the reference's running sums plus 8 canonical blocks (tiles of up to 8192 rows) adds
  sum_j d_j S_j, |d_j| <= u32, sigma <= u32 sqrt(L/3) max|S_j|;
* how far a kernel that follows a tiled schedule may be from that schedule's emulation
  (``tile_chain``), for diagnosis.

Not legitimate for any operator (they fail): BF16 math, BF16 cross-tile accumulation beyond
what the element-wise allowance absorbs, flushing subnormals to zero (a platform that does it
is recorded by ``runs.platform_facts`` and expected, conditioned on that fact), rounding
toward zero.

The tail constant. Uniform rounding errors are strictly sub-Gaussian (variance proxy =
variance), and so are their sums: P(|S| > c sigma) <= 2 exp(-c^2/2). A case run makes
14 element-wise checks (7 outputs, each against the reference and, for db, dw, dx, against
the kernel's own dg/dfc; dg/dfc's second slot is spare), and a correct kernel may raise a
false alarm in a case run with probability at most FALSE_ALARM_PER_CASE = 1e-5, split evenly
over the checks and, by the union bound, over the check's elements: an output of n elements
gets c = sqrt(2 ln(2 n x 14 / 1e-5)) (``tail_sigmas``): 6.3 for db at N=200, 7.4 for dw at
K=96 N=200, 8.2 for dx at the article's case (1.1e8 elements). The 200-seed sweep of
docs/gate-power.md runs about 1e4 case runs of correct kernels, so the bound allows 0.1 false
alarm in all of it. The aggregate tests (fitted scale, rounding direction: one test each per
output) keep c = 7.5 (1.3e-12 each).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from accuracy.ulp import MIN_NORMAL_EXP

MIN_NORMAL = 2.0 ** MIN_NORMAL_EXP
# Half BF16's subnormal spacing (2^-133 / 2): the largest error of one BF16 store of a value below
# the normal range, absolute, not relative to the value. Against the reference rounded to BF16 two
# such stores meet (the kernel's and the reference's: 1 subnormal ULP apart when the exact value
# lies near a midpoint, seen at attention's tiny profile, M=1), against its own recompute one.
SUBNORMAL_STORE = MIN_NORMAL * 2.0 ** -8

U_BF16 = 2.0 ** -8
U_FP32 = 2.0 ** -24
TAIL_SIGMAS = 7.5                 # the aggregate tests and the diagnosis' chain model
FALSE_ALARM_PER_CASE = 1e-5
ELEMENTWISE_CHECKS = 14
# sum over 8 canonical blocks of |terms| bounds the partial sums inside a tile of up to 8192 rows
ORDER_WINDOW_BLOCKS = 8
# The rounding-direction test counts errors between 1/4 and 1 ULP, the size of a store's
# rounding: a correct kernel's smaller differences from FP64 (a sigmoid that is exactly 1 in
# FP32, an exactly representable product) are one-sided but far below a rounding, and its
# larger ones are either symmetric (reductions) or FP32 range limits far below atol (FP32
# sigmoid underflows to 0 for g < -88.7 while the FP64 dg is still a normal BF16 number).
SIGN_MIN_ULP = 0.25
SIGN_MAX_ULP = 1.0
# Round to nearest is not unbiased on every input. An exact product of two BF16 values (dg = dy*fc
# once sigmoid is 1 in FP32, dfc = dy*g likewise, dw at M=1 = x dg) rounds toward zero in 51.3% of
# its 1/4..1-ULP errors, ties excluded or not (4e6 products of randn BF16 pairs), with mean
# relative error -4.1e-5; at M1-K96-N200-saturating, where dw_g is the outer product of x and such
# a dg, 60.4%. The direction test allows a share toward zero of 0.5 +- 0.25 beyond its 7.5-sigma
# noise, the fitted scale +-1e-4 (twice the products' bias; pinned by tests/core/test_allowance.py).
# The same share bounds the errors above the FP64 value: a bias toward zero is at most 75% up or
# down whatever the values' signs, while a store rounding toward +inf or -inf is 100% one way.
# Round-toward-zero stores put 100% of those errors toward zero and move beta by about -3e-3; a
# uniform 1/128 error moves it by 7.8e-3.
# dx and dw share upstream roundings (a dg row feeds K elements of dx, a dg column K of dw): over
# 6 correct kernels at the full profile's 120 cases with M <= 4097 (seed 0), the 9 small quick
# cases x 15 seeds and M2048/M4096-K512-N1024 x 2 seeds (7770 records of dg, db_g, dw and dx),
# dw's and dx's upward share stayed within 4.0 binomial sigmas of 0.5 and never failed, but their
# share toward zero reached 85% at M2-K512-N1024-cancellation (dw_g of torch-eager and of
# stores_every_intermediate: there the sum cancels and its error comes from the terms' roundings,
# not from its own store). So dx and dw are tested upward only (``Allowance.toward_zero``);
# truncating stores still fail them by the fitted scale. Stores rounding toward +inf in db, dw
# and dx only (``operators.swiglu_backward.kernels.plain:round_up_downstream_stores``) put 85-95% of dw's and dx's counted
# errors upward and fail at every quick case: dw at all but the cancellation ones (the dg
# roundings a dw element sums drown its store's direction there), dx wherever it counts more than
# 225 errors (all but M1 and M2, 96 and 192 elements at K = 96).
DIRECTION_BIAS = 0.25
SCALE_BIAS = 1e-4


@dataclass
class DirectionCounts:
    """The rounding-direction test's counts over some elements: errors of 1/4 to 1 ULP of the
    FP64 value (``counted``), those toward zero and those upward."""
    counted: int = 0
    toward: int = 0
    up: int = 0

    def add(self, other: "DirectionCounts") -> None:
        self.counted += other.counted
        self.toward += other.toward
        self.up += other.up

    @property
    def toward_imbalance(self) -> int:
        return 2 * self.toward - self.counted

    @property
    def up_imbalance(self) -> int:
        return 2 * self.up - self.counted

    @property
    def allowed(self) -> float:
        """One share allowance for both tests: at most 75% one-sided (DIRECTION_BIAS) beyond 7.5 sigma."""
        return direction_allowed(self.counted)

    def one_sided(self) -> bool:
        return max(abs(self.toward_imbalance), abs(self.up_imbalance)) > self.allowed


def direction_allowed(counted: int) -> float:
    return 2 * DIRECTION_BIAS * counted + TAIL_SIGMAS * math.sqrt(counted)


def direction_counts(error: torch.Tensor, exact: torch.Tensor, spacing: torch.Tensor) -> DirectionCounts:
    """The counts of ``error`` (value - FP64 value ``exact``) with ``spacing`` the BF16 spacing at exact."""
    ulps = error / spacing
    size = ulps.abs()
    counted = (size >= SIGN_MIN_ULP) & (size <= SIGN_MAX_ULP)
    # toward zero: the error's sign is opposite to the value's
    return DirectionCounts(int(torch.count_nonzero(counted)), int(torch.count_nonzero(counted & (ulps * exact < 0))),
                           int(torch.count_nonzero(counted & (error > 0))))


def tail_sigmas(elements: int) -> float:
    """The element-wise checks' tail constant for an output of ``elements`` elements (see above)."""
    return math.sqrt(2 * math.log(2 * max(elements, 1) * ELEMENTWISE_CHECKS / FALSE_ALARM_PER_CASE))


@dataclass
class Allowance:
    """Per element: ``vs_reference`` added to rtol |reference| + atol; ``vs_own`` likewise
    for the kernel's own downstream check. For the fitted scale's variance: ``noise_var``, the
    variance of a correct kernel's error beyond its own store that is independent per element,
    and the part one rounded upstream value spreads over many output elements: a whole column
    of a contraction (``shared_var`` per column, to be weighted by the column's sum of squares,
    ``shared_axis`` 1; SwiGLU's dw) or rows of a row output (``shared_total``, already summed;
    SwiGLU's dx). ``direction``: whether the rounding-direction test applies (every output of
    SwiGLU and RMSNorm); ``toward_zero``: whether its share toward zero is tested besides the
    share upward, not where an output sums terms whose own roundings can all lean toward zero
    relative to a cancelling sum (SwiGLU's dx and dw; see ``DIRECTION_BIAS``).
    For the localized tests (``accuracy.localized``): ``shared_rows``, ``shared_total`` per row of
    the block (so row windows get their own part); ``element_var``, the marginal variance of a
    correct kernel's error beyond its store per element, shared parts included (default
    ``noise_var``), which the excess-variance test compares the errors' squares with."""
    vs_reference: torch.Tensor
    vs_own: torch.Tensor | None
    noise_var: torch.Tensor
    shared_var: torch.Tensor | None = None
    shared_axis: int | None = None
    shared_total: float = 0.0
    direction: bool = True
    toward_zero: bool = True
    shared_rows: torch.Tensor | None = None
    element_var: torch.Tensor | None = None


def term_roundings(var: torch.Tensor, worst: torch.Tensor, roundings: int, sigmas: float) -> torch.Tensor:
    """The allowance of the terms' legitimate roundings: ``sigmas`` x their standard deviation,
    capped by the worst case of ``roundings`` roundings per term. Against the kernel's own
    upstream outputs (one rounding: the store it skipped or made) the variance of both bounds it."""
    return torch.minimum(sigmas * var.sqrt(), roundings * U_BF16 * worst)


def reduction(terms, output: str, kind: str, length: int, rows: slice = slice(None)) -> Allowance:
    """A reduction over M rows: a sum of a row quantity (``sum_over_m``, SwiGLU's db) or an outer
    product (``contraction``, SwiGLU's dw), from the reference's term sums (``terms``: the
    operator golden's ``term_sums``), for the output's ``rows`` (element by element, so a slice
    of rows gets the same values as the whole: the comparison takes a [K, N] dw in slices);
    ``kind``: the output's declared kind."""
    sigmas = tail_sigmas(terms.abs[output].numel())
    worst = terms.part("abs", output, rows) + MIN_NORMAL * terms.part("floor_l1", output, rows)
    var = terms.part("var", output, rows)
    partial = terms.part("prefix", output, rows) + ORDER_WINDOW_BLOCKS * terms.part("block", output, rows)
    order_sigma = U_FP32 * math.sqrt(length / 3) * partial
    order = sigmas * order_sigma
    declared = getattr(terms, "worst", {}).get(output)
    if declared is not None:
        # a derived model (``accuracy.derived``) knows each term's worst case over all its declared
        # roundings: it caps both checks in place of the two-rounding argument of the hand models
        cap = declared[rows].double() + MIN_NORMAL * terms.part("floor_l1", output, rows)
        own_allow = torch.minimum(sigmas * var.sqrt(), cap) + order + SUBNORMAL_STORE
        ref_allow = own_allow + SUBNORMAL_STORE
    else:
        ref_allow = term_roundings(var, worst, 2, sigmas) + order + 2 * SUBNORMAL_STORE
        own_allow = term_roundings(var, worst, 1, sigmas) + order + SUBNORMAL_STORE
    if kind == "sum_over_m":    # each element sums its own column of terms: independent
        return Allowance(ref_allow, own_allow, var + order_sigma ** 2)
    return Allowance(ref_allow, own_allow, order_sigma ** 2,
                     shared_var=terms.shared[output].reshape(-1), shared_axis=1, toward_zero=False,
                     element_var=var + order_sigma ** 2)


def tile_chain(terms, output: str, base: torch.Tensor, tiles: int, tile_rows: int,
               accumulator_unit_roundoff: float, rows: slice = slice(None)) -> torch.Tensor:
    """How far a kernel that follows a tiled schedule may legitimately be from that schedule's
    emulation, for db / dw: its FP32 tile partials differ from the emulation's in the last bits
    (another summation order), and a difference at a BF16 cross-tile add flips that add's
    rounding by up to one ULP of the running sum, which every later add carries. Model: each of
    the ``tiles`` casts and adds moves the difference by a step uniform in +-1 ULP of the value
    rounded, the running sum or the tile's partial, B <= prefix + (tile_rows / 1024) x max |block
    sum| (the operator's term sums), independently: sigma = 2 u_acc B sqrt(2 tiles / 3);
    plus ``base``, the per-term allowance of one rounding (``reduction(...).vs_own``), for the same
    ``rows`` of the output. ``tests/mutants/
    test_gate_power.py`` replays an ensemble of valid FP32 partial orders through the article's
    chain and checks every member is within this allowance, and the tiling mutants are not."""
    if tiles <= 1 or accumulator_unit_roundoff <= U_FP32:
        return base
    blocks = max(1, -(-tile_rows // 1024))
    rounded = terms.part("prefix", output, rows) + blocks * terms.part("segment", output, rows)
    sigma = 2 * accumulator_unit_roundoff * rounded * math.sqrt(2 * tiles / 3)
    return base + TAIL_SIGMAS * sigma
