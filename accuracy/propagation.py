"""First-order propagation of an operator's legitimate roundings through its math, written once.

An operator writes its math once against an ``ops`` namespace (``accuracy.derived``): run on
tensors with ``TensorOps`` it is a golden (the FP64 reference, or a plan's dtype path with the
plan's stores); run on ``Spread`` values with ``SpreadOps`` it is the rounding model the gate's
allowance reads. Nothing per output is derived by hand.

The model. A ``Spread`` holds a value in FP64 and its legitimate error to first order, as a sum
of independent rounding errors:

* **Named rounding points** (``ops.store(name, x)``: "x may be stored in BF16"): per element an
  error e in [-1, 1] (round to nearest: uniform, variance 1/3) times half the BF16 spacing at
  |x| (variance spacing^2 / 12, exact per element, as the hand models' term sums; the spacing
  is taken at |x| (1 + 2^-7), the top of the binade a kernel's FP32 value may be in). Kept as
  signed coefficients per point (``Spread.exact``), so one rounding that reaches an element
  along two paths adds linearly (RMSNorm's dx = r (g - xhat c): g's rounding is in both terms),
  and a rounding broadcast over a dimension (a per-row value) sums linearly over it.
* **Mixed channels** (``Spread.mixed``): where a reduction sums a point's errors over the
  elements it varies along (a mean over N, a matmul's inner dimension), the errors become one
  variable per remaining element: kept as its standard deviation and worst case, with the
  dimensions along which those variables are independent. Two mixed channels of the same point
  meeting again add their standard deviations (the Cauchy-Schwarz bound: no correlation is
  assumed away); different points add in quadrature. The correlation a mixed channel keeps with
  its own point's unreduced errors (one term of N in a mean) is dropped: O(1/N).
* **Second order**: where f' vanishes a rounding still moves f by f'' delta^2 / 2: each function
  declares a bound on |f''| over its argument's worst-case interval, a product of two erring
  values their product of worst cases; kept as a worst case (``SECOND_ORDER``).
* **FP32 math**: every operation's result carries one FP32 rounding, <= u32 |result| (a mixed
  channel of its own, ``MATH``); a function a kernel may compute in any accurate form
  (``exp``, ``sigmoid``, ``erf``, ...) carries ``FUNCTION_ULPS`` FP32 ulps.

Linearisation: an element-wise f moves every channel by f'(x); a product by the other factor;
a matmul by the matrix, in squares for the variances (those products of non-negative matrices
bounded from above by one FP32 product each, ``accuracy.products``: up to 6e-5 relative above
the FP64 one at N = 1024, never below). Exact for the linear parts (sums, products by exact
values), first order plus the second-order bound elsewhere. A Monte-Carlo of
the roundings (``tests/core/test_propagation.py``) checks the variances and the worst cases.

A Spread's totals per element: ``variance()`` (sum of exact coefficients^2 / 3 plus mixed
sd^2) and ``worst()`` (sum of |coefficients| plus mixed worst cases); per point
(``worst_by_point``) for the diagnosis bound of a plan that stores only some points.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from accuracy.products import upper_product
from accuracy.ulp import bf16_spacing

U_FP32 = 2.0 ** -24
# a kernel rounds its FP32 value, whose binade is at most that of |exact| (1 + 2^-7)
STORE_BINADE_MARGIN = 1 + 2.0 ** -7
MATH = "fp32 math"
SECOND_ORDER = "second order"
# an accurate FP32 exp / sigmoid / erf / tanh / rsqrt is within a few ulps (glibc's and SLEEF's
# are within 1-4); 4 ulps = 8 u32 relative, before its argument's error is carried
FUNCTION_ULPS = 4


@dataclass
class Mixed:
    """A point's errors after a reduction mixed them: per element a standard deviation and a worst
    case, per dimension whether the elements along it are independent (False: shared by a
    matmul's outputs), and along which dimensions the value was broadcast from one element."""
    sd: torch.Tensor
    worst: torch.Tensor
    independent: tuple[bool, ...]
    # dimensions along which the value was broadcast from one element: the copies are one
    # variable, so a later sum along them adds standard deviations (delta [M, 1] in attention's
    # dS = P (dP - delta), summed over the keys by dQ = dS K). Read by the reductions only: the
    # fitted scale's shared variance (``accuracy.derived``) reads ``independent``, as measured
    broadcast: tuple[bool, ...] | None = None

    def along(self) -> tuple[bool, ...]:
        return self.broadcast or (False,) * len(self.independent)

    def scaled(self, c: torch.Tensor, c_abs: torch.Tensor | None = None) -> "Mixed":
        a = c.abs() if c_abs is None else c_abs
        return Mixed(self.sd * a, self.worst * a, self.independent, self.broadcast)

    def broadcast_to(self, shape) -> "Mixed":
        """The channel of a value broadcast to ``shape`` (``broadcast``: where it had one element)."""
        own = tuple(self.sd.shape)
        if len(own) != len(shape):
            return self
        flags = tuple(b or (n == 1 and k > 1) for b, n, k in zip(self.along(), own, shape))
        return self if flags == self.along() else Mixed(self.sd, self.worst, self.independent, flags)

    def plus(self, other: "Mixed") -> "Mixed":
        """The same point's channel arriving along two paths: standard deviations add (Cauchy-Schwarz)."""
        broadcast = tuple(a or b for a, b in zip(self.along(), other.along()))
        return Mixed(self.sd + other.sd, self.worst + other.worst,
                     tuple(a and b for a, b in zip(self.independent, other.independent)), broadcast)


def _dims(shape) -> int:
    return len(shape)


def _expand(t: torch.Tensor, shape) -> torch.Tensor:
    return t.expand(shape) if tuple(t.shape) != tuple(shape) else t


@dataclass
class Spread:
    """A value (FP64) and its first-order legitimate error (see the module's docstring):
    ``exact`` point -> (coefficient times e, the point's own shape), ``mixed`` point -> Mixed."""
    value: torch.Tensor
    exact: dict = field(default_factory=dict)     # name -> (coef tensor, source shape)
    mixed: dict = field(default_factory=dict)     # name -> Mixed
    # the totals below, computed once: a Spread is not changed after it is made (every operation
    # makes a new one), and the math reads a value's worst case several times (exp's second-order
    # term and its argument's, a product's two factors, the gate's totals)
    _totals: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def shape(self):
        return tuple(self.value.shape)

    # --- totals
    def variance(self) -> torch.Tensor:
        if "variance" not in self._totals:
            v = torch.zeros(self.shape, dtype=torch.float64)
            for coef, _ in self.exact.values():
                v = v + coef.square() / 3
            for m in self.mixed.values():
                v = v + m.sd.square()
            self._totals["variance"] = _expand(v, self.shape)
        return self._totals["variance"]

    def worst_by_point(self) -> dict[str, torch.Tensor]:
        if "by_point" not in self._totals:
            out: dict[str, torch.Tensor] = {}
            for name, (coef, _) in self.exact.items():
                out[name] = _expand(coef.abs(), self.shape)
            for name, m in self.mixed.items():
                out[name] = out.get(name, 0) + _expand(m.worst, self.shape)
            self._totals["by_point"] = out
        return dict(self._totals["by_point"])

    def worst(self) -> torch.Tensor:
        if "worst" not in self._totals:
            w = torch.zeros(self.shape, dtype=torch.float64)
            for part in self.worst_by_point().values():
                w = w + part
            self._totals["worst"] = w
        return self._totals["worst"]

    # --- linear maps of the error
    def scaled(self, c: torch.Tensor, value: torch.Tensor) -> "Spread":
        """The error times c (element-wise, broadcast), carried to a new ``value``."""
        shape = tuple(value.shape)
        c_abs = c.abs() if self.mixed else None
        return Spread(value, {k: (coef * c, src) for k, (coef, src) in self.exact.items()},
                      {k: m.broadcast_to(shape).scaled(c, c_abs) for k, m in self.mixed.items()})

    def merged(self, other: "Spread", value: torch.Tensor) -> "Spread":
        shape = tuple(value.shape)
        exact = dict(self.exact)
        for k, (coef, src) in other.exact.items():
            exact[k] = (exact[k][0] + coef, src) if k in exact else (coef, src)
        mixed = {k: m.broadcast_to(shape) for k, m in self.mixed.items()}
        for k, m in other.mixed.items():
            m = m.broadcast_to(shape)
            mixed[k] = mixed[k].plus(m) if k in mixed else m
        return Spread(value, exact, mixed)

    def __add__(self, other):
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other):
        return add(self, -other if not isinstance(other, Spread) else negate(other))

    def __rsub__(self, other):
        return add(negate(self), other)

    def __neg__(self):
        return negate(self)

    def __mul__(self, other):
        return mul(self, other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return div(self, other)

    def __rtruediv__(self, other):
        return div(other, self)

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def square(self):
        return mul(self, self)

    def t(self) -> "Spread":
        return _transposed(self)

    @property
    def has_error(self) -> bool:
        return bool(self.exact or self.mixed)


def _value(x) -> torch.Tensor:
    return x.value if isinstance(x, Spread) else torch.as_tensor(x, dtype=torch.float64)


def _erring(x) -> bool:
    """Whether x carries an error to propagate (an input is a Spread without one)."""
    return isinstance(x, Spread) and x.has_error


def _spread(x) -> Spread:
    return x if isinstance(x, Spread) else Spread(torch.as_tensor(x, dtype=torch.float64))


def _joined(parts: list, value: torch.Tensor) -> Spread:
    if not parts:
        return Spread(value)
    return parts[0] if len(parts) == 1 else parts[0].merged(parts[1], value)


def with_math_rounding(s: Spread, ulps: float = 1.0) -> Spread:
    """The FP32 rounding of an operation's result: up to ``ulps`` x u32 |result|, uniform."""
    bound = (ulps * U_FP32) * s.value.abs()
    m = Mixed(bound / math.sqrt(3), bound, (True,) * _dims(s.shape))
    mixed = dict(s.mixed)
    mixed[MATH] = mixed[MATH].plus(m) if MATH in mixed else m
    return Spread(s.value, s.exact, mixed)


def negate(a: Spread) -> Spread:
    return Spread(-a.value, {k: (-c, src) for k, (c, src) in a.exact.items()}, dict(a.mixed))


def add(a, b) -> Spread:
    a, b = _spread(a), _spread(b)
    value = a.value + b.value
    return with_math_rounding(a.merged(b, value))


def mul(a, b) -> Spread:
    va, vb = _value(a), _value(b)
    value = va * vb
    parts = [x.scaled(v, value) for x, v in ((a, vb), (b, va)) if _erring(x)]
    out = with_math_rounding(_joined(parts, value))
    if len(parts) == 2:       # the product of the two errors
        out = with_second_order(out, a.worst() * b.worst())
    return out


def div(a, b) -> Spread:
    va, vb = _value(a), _value(b)
    value = va / vb
    parts = []
    if _erring(a):
        parts.append(a.scaled(1 / vb, value))
    if _erring(b):
        parts.append(b.scaled(-value / vb, value))
    out = with_math_rounding(_joined(parts, value))
    if _erring(b):          # 1/b's curvature over [|b| - w, |b| + w], and the cross term with a's error
        wb = b.worst()
        low = (vb.abs() - wb).clamp(min=0)
        wa = a.worst() if _erring(a) else 0.0
        out = with_second_order(out, (va.abs() + wa) * wb.square() / low.pow(3) + wa * wb / low.square())
    return out


def with_second_order(s: Spread, bound: torch.Tensor) -> Spread:
    """A second-order term of at most ``bound`` per element: where f' vanishes (GELU'' at
    h = +-sqrt(2)) a rounding of the argument still moves f by f'' delta^2 / 2, which the first
    order calls zero. Kept as a worst case (its standard deviation taken as large as it)."""
    m = Mixed(bound, bound, (True,) * _dims(s.shape))
    mixed = dict(s.mixed)
    mixed[SECOND_ORDER] = mixed[SECOND_ORDER].plus(m) if SECOND_ORDER in mixed else m
    return Spread(s.value, s.exact, mixed)


def elementwise(a: Spread, value: torch.Tensor, derivative: torch.Tensor, ulps: float,
                second: torch.Tensor | None = None) -> Spread:
    """f(a) with f(a.value) = ``value``, f'(a.value) = ``derivative``: ``ulps`` FP32 ulps of its
    own; ``second``: max |f''| over the argument's worst-case interval (the second-order term)."""
    out = with_math_rounding(a.scaled(derivative, value), ulps)
    if second is not None and a.has_error:
        out = with_second_order(out, 0.5 * second * a.worst().square())
    return out


def half_spacing(value: torch.Tensor) -> torch.Tensor:
    """The largest error of one BF16 rounding of a kernel's value near ``value``: half the spacing
    at |value| (1 + 2^-7); below half the smallest subnormal spacing (2^-134) a value rounds to
    zero, and its error is itself."""
    mag = value.abs() * STORE_BINADE_MARGIN
    return torch.minimum(bf16_spacing(mag) / 2, mag)


def rescaled_half_spacing(value: torch.Tensor) -> torch.Tensor:
    """The largest error of one BF16 rounding of ``value`` times any positive factor, taken back:
    2^-8 |value| wherever value lies in its binade (attention's P stored before its running max
    is final: exp(s - m_j) = P exp(m - m_j) moves each value within its binade)."""
    return torch.maximum(half_spacing(value), value.abs() * 2.0 ** -8)


def store(name: str, a: Spread, rescaled: bool = False) -> Spread:
    """Point ``name``: a may be stored in BF16 here (one rounding, half the spacing at |a|;
    ``rescaled``: a times any positive factor may be, ``rescaled_half_spacing``)."""
    half = rescaled_half_spacing(a.value) if rescaled else half_spacing(a.value)
    exact = dict(a.exact)
    if name in exact:
        raise ValueError(f"rounding point {name!r} is used twice in the math")
    exact[name] = (half, a.shape)
    return Spread(a.value, exact, dict(a.mixed))


def _reduce_exact(coef: torch.Tensor, src: tuple, shape: tuple, dim: int, name: str,
                  mixed: dict, exact: dict) -> None:
    """Sum one point's coefficients over ``dim``: linear where the point is broadcast along it,
    mixed where its own elements vary along it."""
    full = _expand(coef, shape)
    if src[dim] == 1:
        exact[name] = (full.sum(dim, keepdim=True), src)
        return
    independent = tuple(s > 1 for s in src)
    m = Mixed((full.square() / 3).sum(dim, keepdim=True).sqrt(), full.abs().sum(dim, keepdim=True),
              tuple(ind if i != dim else True for i, ind in enumerate(independent)))
    mixed[name] = mixed[name].plus(m) if name in mixed else m


def _reduce_mixed(m: Mixed, shape: tuple, dim: int) -> Mixed:
    sd, worst = _expand(m.sd, shape), _expand(m.worst, shape)
    if m.independent[dim] and not m.along()[dim]:
        sd = sd.square().sum(dim, keepdim=True).sqrt()
    else:
        sd = sd.sum(dim, keepdim=True)
    broadcast = tuple(b and i != dim for i, b in enumerate(m.along()))
    return Mixed(sd, worst.sum(dim, keepdim=True), m.independent, broadcast)


def sum_over(a: Spread, dim: int) -> Spread:
    """Sum over ``dim`` (kept, size 1), in FP32 in any order: each partial sum's rounding is an
    FP32 ulp of at most the sum of |terms| (L - 1 of them, in quadrature, worst case gamma)."""
    shape = a.shape
    dim = dim % len(shape)
    value = a.value.sum(dim, keepdim=True)
    exact: dict = {}
    mixed: dict = {}
    for name, (coef, src) in a.exact.items():
        _reduce_exact(coef, src, shape, dim, name, mixed, exact)
    for name, m in a.mixed.items():
        r = _reduce_mixed(m, shape, dim)
        mixed[name] = mixed[name].plus(r) if name in mixed else r
    length = shape[dim]
    abs_sum = a.value.abs().sum(dim, keepdim=True)
    order = Mixed(U_FP32 * math.sqrt(max(length - 1, 0) / 3) * abs_sum, max(length - 1, 0) * U_FP32 * abs_sum,
                  (True,) * len(shape))
    mixed[MATH] = mixed[MATH].plus(order) if MATH in mixed else order
    return Spread(value, exact, mixed)


def matmul(a, b, product=None, upper=None) -> Spread:
    """a @ b for 2-D a [M, N], b [N, K], either a Spread: the error of each carried through the
    other's exact value (first order), summed over N in any FP32 order. ``product(x, y)``: how
    the value's FP64 product is computed (default x @ y; a piece's evaluations share it,
    ``accuracy.derived``). The model's products of non-negative matrices (variances, worst
    cases, magnitudes) are bounded from above by ``upper(x, y)`` (default
    ``accuracy.products.upper_product``; a piece's own model reuses its rounding model's)."""
    product = product or _product
    upper = upper or upper_product
    va, vb = _value(a), _value(b)
    value = product(va, vb)
    parts = []
    if _erring(a):
        parts.append(_matmul_left(a, vb, value, upper))
    if _erring(b):
        # (a @ b)^T = b^T @ a^T: b's error carried on the left of a^T
        parts.append(_transposed(_matmul_left(_transposed(b), va.t(), value.t(), upper)))
    out = _joined(parts, value)
    n = va.shape[-1]
    abs_sum = upper(va.abs(), vb.abs())
    order = Mixed(U_FP32 * math.sqrt(n / 3) * abs_sum, n * U_FP32 * abs_sum, (True,) * 2)
    mixed = dict(out.mixed)
    mixed[MATH] = mixed[MATH].plus(order) if MATH in mixed else order
    return Spread(value, out.exact, mixed)


def _product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x @ y


def _transposed(s: Spread) -> Spread:
    return Spread(s.value.t(), {k: (c.t() if c.dim() == 2 else c, tuple(reversed(src)))
                                for k, (c, src) in s.exact.items()},
                  {k: Mixed(m.sd.t(), m.worst.t(), tuple(reversed(m.independent)),
                            None if m.broadcast is None else tuple(reversed(m.broadcast)))
                   for k, m in s.mixed.items()})


def _matmul_left(a: Spread, w: torch.Tensor, value: torch.Tensor, upper=upper_product) -> Spread:
    """a's error [M, N] carried through a @ w, w exact [N, K]: a point broadcast along N stays
    exact (its coefficient times w); one varying along N mixes (variances times w^2, bounded
    from above by ``upper``, default ``upper_product``), and the K outputs of one row share it (not independent
    along K)."""
    shape = a.shape
    exact: dict = {}
    mixed: dict = {}
    w_sq, w_abs = w.square(), w.abs()
    for name, (coef, src) in a.exact.items():
        full = _expand(coef, shape)
        if src[1] == 1:
            exact[name] = (full @ w, (src[0], value.shape[1]))
            continue
        m = Mixed(upper(full.square() / 3, w_sq).sqrt(), upper(full.abs(), w_abs), (src[0] > 1, False))
        mixed[name] = mixed[name].plus(m) if name in mixed else m
    for name, m in a.mixed.items():
        sd, worst = _expand(m.sd, shape), _expand(m.worst, shape)
        sd = (upper(sd.square(), w_sq).sqrt() if m.independent[1] and not m.along()[1] else upper(sd, w_abs))
        r = Mixed(sd, upper(worst, w_abs), (m.independent[0], False), (m.along()[0], False))
        mixed[name] = mixed[name].plus(r) if name in mixed else r
    return Spread(value, exact, mixed)


class SpreadOps:
    """The ``ops`` of the rounding model: every point a legitimate BF16 store, FP64 values."""

    spread = True

    @staticmethod
    def store(name: str, x: Spread, rescaled: bool = False) -> Spread:
        return store(name, _spread(x), rescaled)

    @staticmethod
    def sum(x: Spread, dim: int) -> Spread:
        return sum_over(_spread(x), dim)

    @staticmethod
    def mean(x: Spread, dim: int) -> Spread:
        s = sum_over(_spread(x), dim)
        return mul(s, 1.0 / x.shape[dim % len(x.shape)])

    @staticmethod
    def matmul(a, b) -> Spread:
        return matmul(a, b)

    # Each function: its value, f' and a bound on |f''| over the argument's worst-case interval
    # [x - w, x + w] (w = the argument's worst case: a rounding or two, 2^-8 relative)

    @staticmethod
    def exp(x: Spread) -> Spread:
        v = torch.exp(x.value)
        return elementwise(x, v, v, FUNCTION_ULPS, second=torch.exp(x.value + x.worst()))

    @staticmethod
    def sigmoid(x: Spread) -> Spread:
        s = torch.sigmoid(x.value)
        # Where sigmoid's FP32 value is 1 (1 - s < 2^-25, x > 17.3) every accurate form returns
        # exactly 1: 1 / (1 + exp(-x)), exp(x) / (1 + exp(x)), (1 + tanh(x / 2)) / 2 all do. Four
        # ulps of 1 there would be 1 - s itself 4x over, and x (1 - s) in SiLU's derivative would
        # carry it times x (8% of SwiGLU's dg at x = 3.4e5, where every real form is exact)
        ulps = torch.where(s.float() == 1.0, 0.0, float(FUNCTION_ULPS))
        return elementwise(x, s, s * (1 - s), ulps, second=torch.full_like(s, 0.1))   # |s''| <= 0.0962

    @staticmethod
    def tanh(x: Spread) -> Spread:
        t = torch.tanh(x.value)
        return elementwise(x, t, 1 - t * t, FUNCTION_ULPS, second=torch.full_like(t, 0.77))  # |tanh''| <= 0.770

    @staticmethod
    def erf(x: Spread) -> Spread:
        v = torch.erf(x.value)
        # |erf''(y)| = (4/sqrt(pi)) |y| exp(-y^2) <= 2 sqrt(2/(pi e)) = 0.968
        return elementwise(x, v, (2 / math.sqrt(math.pi)) * torch.exp(-x.value.square()), FUNCTION_ULPS,
                           second=torch.full_like(v, 0.97))

    @staticmethod
    def rsqrt(x: Spread) -> Spread:
        r = torch.rsqrt(x.value)
        low = (x.value - x.worst()).clamp(min=0)
        return elementwise(x, r, -0.5 * r / x.value, FUNCTION_ULPS, second=0.75 * low.pow(-2.5))

    @staticmethod
    def sqrt(x: Spread) -> Spread:
        r = torch.sqrt(x.value)
        low = (x.value - x.worst()).clamp(min=0)
        return elementwise(x, r, 0.5 / r, FUNCTION_ULPS, second=0.25 * low.pow(-1.5))

    @staticmethod
    def log(x: Spread) -> Spread:
        v = torch.log(x.value)
        low = (x.value - x.worst()).clamp(min=0)
        return elementwise(x, v, 1 / x.value, FUNCTION_ULPS, second=low.pow(-2))

    @staticmethod
    def max(x: Spread, dim: int) -> Spread:
        """A row's maximum, subtracted before exp for range only: softmax is invariant to the value
        subtracted, so it is taken as exact (a kernel's max of its FP32 scores is one of them,
        and exp(s - m) / sum exp(s - m) does not depend on which m)."""
        return Spread(_value(x).amax(dim, keepdim=True))

    @staticmethod
    def where(mask: torch.Tensor, x, fill: float) -> Spread:
        """x where ``mask``, else the constant ``fill`` (a masked score): no error there."""
        x = _spread(x)
        keep = mask.to(torch.float64)
        value = torch.where(mask, x.value, torch.as_tensor(fill, dtype=torch.float64))
        return Spread(value, {k: (c * keep, src) for k, (c, src) in x.exact.items()},
                      {k: Mixed(m.sd * keep, m.worst * keep, m.independent) for k, m in x.mixed.items()})

    @staticmethod
    def value(x) -> torch.Tensor:
        return _value(x)

    @staticmethod
    def loop(name: str) -> None:
        """The model is the global pass: a block order's own roundings are FP32 math."""
        return None


def spread_inputs(inputs: Mapping[str, torch.Tensor]) -> dict[str, Spread]:
    """The kernel's inputs as given (BF16 values, exact): no error of their own."""
    return {n: Spread(t.double()) for n, t in inputs.items()}
