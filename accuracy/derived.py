"""An operator's golden and gate derived from its math and its declared rounding points.

An operator that declares ``DerivedMath`` writes no golden and no allowance by hand:

    def math(ops, t):                       # t: the inputs by name
        h = ops.store("h", t["x"] + t["b"])     # "x + b may be stored in BF16"
        dx = t["dy"] * gelu_grad(ops, h)
        return {"dx": dx}, {"db": (None, ops.store("dx_sum", dx))}

returns its row outputs (one row per row of M) and, per reduction over M, its operands
``(lhs, rhs)``: the rows of rhs summed (``sum_over_m``) or lhs^T rhs (``contraction``, lhs an
input). ``ops.store(name, x)`` is a legitimate choice: x may be kept in BF16 there; every
other operation is FP32 math in any accurate form, and every sum over M any FP32 order within
tiles of up to 8192 rows (``accuracy.allowance``).

From that one definition (``accuracy.propagation``):

* **golden**: the same function on tensors (``TensorOps``) under a plan: the FP64 reference
  (nothing stored), the BF16-faithful path, any schedule's dtype path;
* **row allowance**: each element's legitimate spread from the rounding model run on the
  reference's values (``SpreadOps``): min(c sigma, worst case) with the framework's tail
  constant c, as the hand models' ``term_roundings``; the fitted scale's per-element variance
  from the points whose errors are independent per element, and the part a broadcast rounding
  spreads over many elements (``shared_total``) from (sum over its elements of r x coefficient)^2 / 3;
* **reduction term sums**: per term the variance and worst case of its operand's roundings
  (``DerivedTermSums``), which ``accuracy.allowance.reduction`` reads in place of the
  two-rounding cap the hand models argue;
* **diagnosis bound**: the worst case of the points a schedule's plan stores, the FP32 math
  scaled to the plan's math dtype, and the output's store.

* **rounding bias**: each legitimate path (no point stored, all stored, each alone) run in FP32
  as a kernel runs it, its errors against the exact values summed the way the fitted scale sums
  a kernel's, whole and per row and column (``DerivedTermSums.scale_bias``, ``local_bias``); a
  reduction's error is its exact sum plus the error its stored operands carried in, stored in
  BF16 (``accuracy.term_sums.stored_sum_error``), so the bias of its own store on this data is
  counted too. With up to two points these paths are every combination and no constant is added:
  the allowance is what the data's legitimate paths give; with more, the measured constant
  ``accuracy.allowance.SCALE_BIAS`` stays under them (a combination not run may lie beyond them).

* **own-upstream checks**: where the math reads an output's stored value at a point
  (``reused``: SwiGLU's dx, db, dw read dg and dfc as stored), the declared downstream outputs
  (``own``) are recomputed in FP32 from the kernel's own stored values there, and their
  allowance is the model with the kernel's value taken as it is at those points (only the
  point's own rounding and what follows it).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np
import torch

from accuracy import allowance
from accuracy.allowance import SUBNORMAL_STORE, Allowance, DirectionCounts, tail_sigmas
from accuracy.bounds import reduction_bound, unit_roundoff
from accuracy.path_errors import path_error_sums
from accuracy.products import ScaledFactor, upper_product
from accuracy.propagation import (MATH, SECOND_ORDER, U_FP32, Spread, SpreadOps, half_spacing, matmul,
                                  rescaled_half_spacing, spread_inputs)
from accuracy.term_sums import ReductionTermSums, dot64, stored_sum_error
from contract.operator import ChunkGolden, OutputDecl
from goldens.blocks import REDUCTION_BLOCK
from goldens.heap import PIECE_GROWTH_LIMIT, release_fragments
from goldens.rounding import round_to
from goldens.schedule_data import Schedules
from goldens.stream import GoldenPass

# the element-wise FP32 roundings the diagnosis bound gives a reduction's terms
BOUND_TERM_OPS = 12
# a chunk taken in at most this many pieces is left to the golden pass's check after each block
FEW_PIECES = 8


class _Frozen:
    """Read-only once built: the gate and golden a run judges with live in the framework's process
    beside the backends, so an attribute set on them (a backend replacing ``row_allowance`` to
    judge itself) is refused; their classes' functions are in ``kernels.sealed_state``'s table."""

    def _freeze(self) -> None:
        object.__setattr__(self, "_frozen", True)

    def __setattr__(self, name, value):
        if getattr(self, "_frozen", False):
            raise AttributeError(f"{type(self).__name__} is read-only: {name!r} cannot be set")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is read-only: {name!r} cannot be deleted")


class TensorOps:
    """The ``ops`` of a golden: the plan's math dtype, its stores where it names them."""

    spread = False

    def __init__(self, plan):
        self.plan = plan
        self.rescaled: set[str] = set()     # the points the math stores rescaled

    def store(self, name: str, x: torch.Tensor, rescaled: bool = False) -> torch.Tensor:
        """x as the plan stores it at ``name`` (``rescaled``: a kernel may store x times a factor
        it divides out later; the golden rounds x itself, the model allows the factor's binade)."""
        if rescaled:
            self.rescaled.add(name)
        return round_to(x, self.plan.rounding(name))

    @staticmethod
    def sum(x: torch.Tensor, dim: int) -> torch.Tensor:
        return x.sum(dim, keepdim=True)

    @staticmethod
    def mean(x: torch.Tensor, dim: int) -> torch.Tensor:
        return x.mean(dim, keepdim=True)

    @staticmethod
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b

    @staticmethod
    def max(x: torch.Tensor, dim: int) -> torch.Tensor:
        return x.amax(dim, keepdim=True)

    @staticmethod
    def where(mask: torch.Tensor, x: torch.Tensor, fill: float) -> torch.Tensor:
        return torch.where(mask, x, torch.as_tensor(fill, dtype=x.dtype))

    @staticmethod
    def value(x: torch.Tensor) -> torch.Tensor:
        return x

    def loop(self, name: str) -> int | None:
        """The plan's block for a row-local loop the math replays (None: one global pass)."""
        plan = getattr(self, "plan", None)
        return plan.loop(name) if hasattr(plan, "loop") else None

    exp, sigmoid, tanh, erf = (staticmethod(f) for f in (torch.exp, torch.sigmoid, torch.tanh, torch.erf))
    rsqrt, sqrt, log = staticmethod(torch.rsqrt), staticmethod(torch.sqrt), staticmethod(torch.log)


class _ReverseOps(TensorOps):
    """FP64 math with a zero perturbation at each of the ``wanted`` points, for the reverse pass
    that gives each point's exact share of the fitted scale's variance (``shared_variance``). A
    point no output shares is no leaf: the graph keeps nothing for it (SwiGLU's dx_g, dx_fc,
    independent per element of dx)."""

    def __init__(self, wanted: frozenset, products: "_Memo | None" = None):
        self.wanted = wanted
        self.leaves: dict[str, torch.Tensor] = {}
        self.half: dict[str, torch.Tensor] = {}
        self._products = products

    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a @ b whose value is the reference's product where the piece computed it (``_Memo``: the
        same values, a zero perturbation added), its gradients the usual ones: SwiGLU's two FP64
        [rows, N] x [N, K] products a piece, and the left factors autograd would keep for them."""
        if self._products is None:
            return a @ b
        return _ReusedProduct.apply(a, b, self._products)

    def store(self, name: str, x: torch.Tensor, rescaled: bool = False) -> torch.Tensor:
        if name not in self.wanted:
            return x
        self.half[name] = (rescaled_half_spacing if rescaled else half_spacing)(x.detach())
        self.leaves[name] = torch.zeros_like(x, requires_grad=True)
        return x + self.leaves[name]


class _ReusedProduct(torch.autograd.Function):
    """a @ b looked up in a memo of products by value (``_Memo``), differentiated as a @ b."""

    @staticmethod
    def forward(ctx, a, b, products):
        ctx.save_for_backward(a if b.requires_grad else None, b if a.requires_grad else None)
        a0, b0 = a.detach(), b.detach()
        return products.get((a0, b0), lambda: a0 @ b0)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (None if b is None else grad @ b.t(), None if a is None else a.t() @ grad, None)


def shared_variance(derived: "DerivedMath", inputs64: Mapping[str, torch.Tensor], exact: Mapping[str, torch.Tensor],
                    points: Mapping[str, set], products: "_Memo | None" = None) -> dict[str, dict[str, torch.Tensor]]:
    """Per row output and per point of ``points[output]``, the variance its roundings give the
    fitted scale's numerator sum_j r_j err_j (``exact``: r, FP64, non-finite values as 0), per
    row of the block: sum over the point's
    elements of (J^T r)^2 h^2 / 3 (first order, exact through matmuls, where the forward model
    can only bound the rows' shared part). ``products``: the piece's memo of the reference's
    products, which the forward evaluation repeats."""
    if not any(points.values()):
        return {}
    ops = _ReverseOps(frozenset().union(*points.values()), products)
    with torch.enable_grad():
        values, _ = derived.evaluate(ops, inputs64)
        out: dict[str, dict[str, torch.Tensor]] = {}
        last = [o for o, names in points.items() if any(n in ops.leaves for n in names)][-1:]
        for o, names in points.items():
            # in the math's order, never a set's: the shares are summed in this order, and a set of
            # names iterates in an order that changes with each process's string hashing
            names = [n for n in ops.leaves if n in names]
            if not names:
                continue
            r = exact[o]
            numerator = (values[o] * r).sum()
            # the graph goes with the last output's gradients
            grads = torch.autograd.grad(numerator, [ops.leaves[n] for n in names], retain_graph=[o] != last,
                                        allow_unused=True)
            rows = r.shape[0]
            out[o] = {n: _per_row(torch.zeros(1, 1, dtype=torch.float64) if g is None
                                  else (g.detach().square() * ops.half[n].square() / 3), rows)
                      for n, g in zip(names, grads)}
    return out


class OwnTensorOps(TensorOps):
    """The own-upstream recompute: FP32 math with no intermediate store, the kernel's own stored
    outputs read at their reused points."""

    def __init__(self, plan, reused: Mapping[str, str], kernel: Mapping[str, torch.Tensor]):
        super().__init__(plan)
        self.reused, self.kernel = reused, kernel

    def store(self, name: str, x: torch.Tensor, rescaled: bool = False) -> torch.Tensor:
        if name in self.reused:
            return self.kernel[self.reused[name]].to(x.dtype)
        return x


class PieceSpreadOps(SpreadOps):
    """``SpreadOps`` whose FP64 products (a matmul's value) and upper products (its magnitudes,
    variances and worst cases) are looked up in a piece's memos first: the reference, the rounding
    model and the own model multiply the same values (SwiGLU's dg @ w_g^T three times; the own
    model's three upper products of each of dx's matmuls, |dg| @ |w_g^T| and dg_in's rounding's
    two, are the rounding model's)."""

    def __init__(self, products: "_Memo | None" = None, uppers: "_Memo | None" = None):
        self._products = products if products is not None else _Memo()
        self._uppers = uppers

    def product(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self._products.get((x, y), lambda: x @ y)

    def upper(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return upper_product(x, y) if self._uppers is None else self._uppers.get((x, y), lambda: upper_product(x, y))

    def matmul(self, a, b) -> Spread:
        return matmul(a, b, product=self.product, upper=self.upper)


class OwnSpreadOps(PieceSpreadOps):
    """The rounding model of the own-upstream recompute: at a reused point the kernel's own value
    is taken as it is (its upstream errors are in it), and the point's own rounding stays (the
    kernel may have used its unrounded value downstream)."""

    def __init__(self, reused: Mapping[str, str], products: "_Memo | None" = None, uppers: "_Memo | None" = None):
        super().__init__(products, uppers)
        self.reused = reused

    def store(self, name: str, x, rescaled: bool = False):
        if name in self.reused:
            x = Spread(x.value if isinstance(x, Spread) else x.double())
        return SpreadOps.store(name, x, rescaled)


class ValueFirstOwnOps(OwnSpreadOps):
    """``OwnSpreadOps`` with the math upstream of the reused points run on values alone (FP64
    tensors, by the formulas ``SpreadOps`` gives its values, so each value is the same bits): there
    the kernel's own value replaces the model's, so the errors the full model carries up to it are
    dropped anyway (SwiGLU: the sigmoid, dy*fc and silu chains before dg and dfc, half the own
    model's time). Exact where the own outputs read no erring value but through a reused point,
    which ``_Golden`` checks against ``OwnSpreadOps`` on each operator's first rows."""

    def store(self, name: str, x, rescaled: bool = False):
        if name in self.reused or isinstance(x, Spread):
            return OwnSpreadOps.store(self, name, x, rescaled)
        return x

    @staticmethod
    def _on_values(x) -> bool:
        return not isinstance(x, Spread)

    def sum(self, x, dim: int):
        return x.sum(dim, keepdim=True) if self._on_values(x) else SpreadOps.sum(x, dim)

    def mean(self, x, dim: int):
        if self._on_values(x):
            return x.sum(dim, keepdim=True) * (1.0 / x.shape[dim % x.dim()])
        return SpreadOps.mean(x, dim)

    def matmul(self, a, b):
        return self.product(a, b) if self._on_values(a) and self._on_values(b) else PieceSpreadOps.matmul(self, a, b)

    def max(self, x, dim: int):
        return x.amax(dim, keepdim=True) if self._on_values(x) else SpreadOps.max(x, dim)

    def where(self, mask, x, fill: float):
        if self._on_values(x):
            return torch.where(mask, x, torch.as_tensor(fill, dtype=torch.float64))
        return SpreadOps.where(mask, x, fill)


def _function_on_values(name: str):
    """``ValueFirstOwnOps``'s ``name`` (exp, sigmoid, ...): torch's function on a value, the
    rounding model's on a Spread."""
    on_values, on_spread = getattr(torch, name), getattr(SpreadOps, name)

    def function(self, x):
        return on_values(x) if self._on_values(x) else on_spread(x)
    function.__name__ = name
    return function


for _name in ("exp", "sigmoid", "tanh", "erf", "rsqrt", "sqrt", "log"):
    setattr(ValueFirstOwnOps, _name, _function_on_values(_name))
del _name


@dataclass
class OutputSpread:
    """One row output's rounding model over a block of rows (FP64, the output's shape)."""
    variance: torch.Tensor
    worst: torch.Tensor
    worst_by_point: dict
    independent_var: torch.Tensor
    shared_rows: torch.Tensor
    mixed_var: torch.Tensor          # the mixed channels' part of ``variance`` (sums of many roundings)
    mixed_worst: torch.Tensor        # and of ``worst``
    own: "OutputSpread | None" = None   # the same for the own-upstream recompute

    @staticmethod
    def cat(pieces: list["OutputSpread"]) -> "OutputSpread":
        """The pieces of consecutive row blocks as one (row-local quantities, concatenated over
        rows). The pieces are emptied field by field as each is concatenated, so the chunk's
        tensors are held once and the pieces' one field at a time, not twice over (0.35 GB at
        SwiGLU's 2048-row chunk)."""
        if len(pieces) == 1:
            return pieces[0]
        shapes = [p.variance.shape for p in pieces]
        by_point = {}
        for k in list(pieces[0].worst_by_point):
            by_point[k] = torch.cat([p.worst_by_point.pop(k).expand(shape) for p, shape in zip(pieces, shapes)])
        own = None if pieces[0].own is None else OutputSpread.cat([p.own for p in pieces])
        fields = {}
        for f in ("variance", "worst", "independent_var", "shared_rows", "mixed_var", "mixed_worst"):
            fields[f] = torch.cat([getattr(p, f) for p in pieces])
            for p in pieces:
                setattr(p, f, None)
        return OutputSpread(worst_by_point=by_point, own=own, **fields)

    def allowance(self, sigmas: float) -> torch.Tensor:
        """Two bounds at the same tail probability, the smaller taken: the whole error as one
        sub-Gaussian sum (c sigma), and the few roundings of the element's own points at their
        worst case plus the mixed channels at c sigma (the hand models' split: a single term's
        rounding is no Gaussian); both capped by the worst case of everything."""
        split = (self.worst - self.mixed_worst) + torch.minimum(sigmas * self.mixed_var.sqrt(), self.mixed_worst)
        return torch.minimum(torch.minimum(sigmas * self.variance.sqrt(), split), self.worst)


@dataclass
class DerivedRowTerms:
    """What the gate reads of a block of rows: per row output its ``OutputSpread``; ``abs`` (the
    name the comparison passes to ``bound``) per output the worst case by point."""
    outputs: dict
    abs: dict = field(default_factory=dict)
    # row outputs a legitimate path rounds one-sidedly on these rows (beyond the direction test's
    # allowance): attention's o at near-uniform scores, where every P~ in (1 - 2^-9, 1) rounds up to 1
    one_sided: frozenset = frozenset()


class DerivedTermSums(ReductionTermSums):
    """The framework's term sums plus, per term, the worst case of its declared roundings, and
    the fitted scale's rounding bias of the legitimate paths on this case's data: per path and
    output, sum (path - exact) exact, whole and per row and column (``scale_bias``,
    ``local_bias``: what ``accuracy.compare`` and ``accuracy.localized`` read)."""

    def __init__(self, bias_floor: float = 0.0):
        super().__init__()
        self.bias_floor = bias_floor  # under an output's bias where the paths miss combinations
        self.reach: dict[str, frozenset] = {}      # output -> the points whose roundings reach it
        self.rescaled: set[str] = set()            # points a kernel may store rescaled
        self.worst: dict[str, torch.Tensor] = {}
        self._row_num: dict = {}      # row output -> path -> [per-row numerators of each chunk]
        self._col_num: dict = {}      # row output -> path -> per-column numerator
        self._den: dict = {}          # row output -> sum exact^2
        self._err_sums: dict = {}     # reduction -> path -> its operands' errors summed over M
        # row outputs of a reductions-only pass (``GoldenPass(rows=False)``: the drift study): their
        # paths' sums were not taken, so their bias is not known and is refused, never read as 0
        self.rows_not_summed: set[str] = set()

    def add_exact(self, output: str, exact: torch.Tensor) -> None:
        """Some rows of a row output's exact values (non-finite ones as 0): the fitted scale's denominator."""
        self._den[output] = self._den.get(output, 0.0) + dot64(exact, exact)

    def add_path_rows(self, output: str, path: str, rows: torch.Tensor, cols: torch.Tensor) -> None:
        """A path's sums of (path - exact) exact over the same rows (``path_row_sums``): per row
        and per column; they may be shared with other paths that gave the same values, so they are
        never added to in place."""
        self._row_num.setdefault(output, {}).setdefault(path, []).append(rows)
        sums = self._col_num.setdefault(output, {})
        sums[path] = sums[path] + cols if path in sums else cols

    def add_path_operand(self, output: str, path: str, part: torch.Tensor) -> None:
        """A path's operand errors of some rows summed over them (``operand_error_sum``); ``part``
        may be shared with other paths whose operand is the same, so each path's sum starts as its
        own copy and the later parts are added to it in place (attention at N = 32768 adds a
        [128, 32768] FP64 part per path and output each 16 queries: a new sum each time was 12
        fresh 32 MiB mappings a piece)."""
        sums = self._err_sums.setdefault(output, {})
        if path in sums:
            sums[path] += part
        else:
            sums[path] = part.clone()

    def note_reach(self, output: str, points: set[str], rescaled: set[str]) -> None:
        """The points whose roundings reach ``output`` (from its rounding model) and those a kernel
        may store rescaled, over the pieces seen so far."""
        self.reach[output] = self.reach.get(output, frozenset()) | frozenset(points)
        self.rescaled |= rescaled

    def floor(self, output: str) -> float:
        """``bias_floor`` where the bias paths miss combinations of the points reaching ``output``:
        none stored, all, and each alone are every combination of two points (SwiGLU's dg is
        reached by dy*fc alone, its db_g by dy*fc and dg_in), not of three (its dx, by six); a
        rescaled store's bias depends on a factor no path takes. 0 where they are every one."""
        reach = self.reach.get(output)
        covered = reach is not None and len(reach) <= 2 and not (reach & self.rescaled)
        return 0.0 if covered else self.bias_floor

    def scale_bias(self, output: str, exact: torch.Tensor | None = None) -> float:
        """The largest |fitted scale| a legitimate path's roundings give ``output`` on this data, not
        below its ``floor``."""
        self._check_summed(output)
        return max(self.floor(output), self._path_bias(output, exact))

    def _check_summed(self, output: str) -> None:
        if output in self.rows_not_summed:
            raise ValueError(f"row output {output!r}: its legitimate paths' bias was not summed in a "
                             f"reductions-only pass (rows=False)")

    def _path_bias(self, output: str, exact: torch.Tensor | None) -> float:
        if output in self._row_num:
            den = self._den.get(output, 0.0)
            return (max(abs(float(np.add.reduce(torch.cat(n).numpy()))) / den for n in self._row_num[output].values())
                    if den > 0 else 0.0)
        if exact is None or output not in self._err_sums:
            return 0.0
        r = torch.where(torch.isfinite(exact), exact.double(), 0.0)
        den = dot64(r, r)
        if den == 0:
            return 0.0
        return max(abs(dot64(stored_sum_error(r, e.double().reshape(r.shape)), r)) / den
                   for e in self._err_sums[output].values())

    def local_bias(self, output: str, exact: torch.Tensor | None = None) -> dict | None:
        """``scale_bias``'s numerators per row and per column of the output, one row per path."""
        self._check_summed(output)
        if output in self._row_num:
            paths = list(self._row_num[output])
            return {"rows": torch.stack([torch.cat(self._row_num[output][p]) for p in paths]).numpy(),
                    "columns": torch.stack([self._col_num[output][p] for p in paths]).numpy()}
        if exact is None or output not in self._err_sums:
            return None
        r = torch.where(torch.isfinite(exact), exact.double(), 0.0)
        r = r.reshape(-1, r.shape[-1])
        prods = [stored_sum_error(r, e.double().reshape(r.shape)) * r for e in self._err_sums[output].values()]
        return {"rows": torch.stack([q.sum(1) for q in prods]).numpy() if r.shape[0] > 1 else None,
                "columns": torch.stack([q.sum(0) for q in prods]).numpy()}

    def add_worst(self, output: str, part: torch.Tensor) -> None:
        part = part.double()
        if output in self.worst:
            self.worst[output] += part
        else:
            self.worst[output] = part.clone()

    def add_blocks(self, output: str, per_block: Mapping[int, list], rows: int) -> None:
        """A chunk's operand of a reduction over M, as ``operand_parts`` per canonical block (summed
        over the blocks of rows it was evaluated in), added in block order; ``rows``: the chunk's."""
        for b in sorted(per_block):
            abs_part, var_part, floor_part, shared_part, worst_part = per_block[b]
            self.add_part(output, abs_part, var_part, floor_part, shared_part)
            self.add_worst(output, worst_part)
        self.rows_seen += rows


def operand_parts(lhs: torch.Tensor | None, var: torch.Tensor, worst: torch.Tensor, mag: torch.Tensor,
                  offset: int, block: int) -> dict[int, list]:
    """A reduction operand's term sums over some rows (the first at row ``offset`` of a chunk whose
    first row is a canonical block's), per canonical block of ``block`` rows they meet: |terms|,
    their variance, the subnormal floor's count, the per-column shared part (contractions; None
    for sums) and the worst case, each summed over the block's rows among these. Summed over the
    pieces of a block they are the block's (``DerivedTermSums.add_part``)."""
    out: dict[int, list] = {}
    n = mag.shape[0]
    edges = [offset, *range((offset // block + 1) * block, offset + n, block), offset + n]
    for a, b in zip(edges, edges[1:]):
        rows, index = slice(a - offset, b - offset), a // block
        if lhs is None:
            out[index] = [mag[rows].sum(0, keepdim=True), var[rows].sum(0, keepdim=True),
                          torch.full((1, 1), float(rows.stop - rows.start), dtype=torch.float64), None,
                          worst[rows].sum(0, keepdim=True)]
            continue
        l_abs, l_sq = lhs[rows].abs().t(), lhs[rows].square().t()
        # one rounded rhs[m, n] moves a whole column n of the [K, N] sum: per column the
        # Cauchy-Schwarz bound sum_m var_mn |lhs[m, :]|^2 (exact for one row)
        shared = lhs[rows].square().sum(1, keepdim=True).t() @ var[rows]
        # the sums of |terms|, their variances and worst cases are bounds: each from one FP32
        # product bounded from above (``accuracy.products``)
        out[index] = [upper_product(l_abs, mag[rows]), upper_product(l_sq, var[rows]), l_abs.sum(1, keepdim=True),
                      shared, upper_product(l_abs, worst[rows])]
    return out


def _per_row(group_var: torch.Tensor, rows: int) -> torch.Tensor:
    """A shared rounding's variance in the fitted scale's numerator, per row of the block: a
    group within a row counts in its row; one that spans the rows (broadcast over M) is spread
    evenly over them."""
    if group_var.shape[0] == rows:
        return group_var.reshape(rows, -1).sum(1)
    return group_var.sum().expand(rows) / rows


def _points_in(s) -> set[str]:
    """The rounding points whose errors a value carries (none for a value without a model)."""
    if not isinstance(s, Spread):
        return set()
    return (set(s.exact) | set(s.mixed)) - {MATH, SECOND_ORDER}


def shared_points(s: Spread) -> set[str]:
    """The points whose roundings reach several elements of this output together (broadcast, or
    through a reduction whose outputs share them): the fitted scale's shared variance."""
    full = tuple(n > 1 for n in s.shape)
    out = {name for name, (_, src) in s.exact.items() if tuple(n > 1 for n in src) != full}
    out |= {name for name, m in s.mixed.items()
            if name not in (MATH, SECOND_ORDER) and not all(m.independent)}
    return out


def _output_spread(s: Spread, r: torch.Tensor) -> tuple[OutputSpread, list]:
    """Totals of one row output: the variance independent per element, and, per shared rounding,
    what it adds to the fitted scale's numerator sum r_j err_j per row, bounded by (sum |r| sigma)^2
    over the elements sharing it (``bounded``: (point, per-row part) pairs, in the Spread's order).
    ``with_shared`` puts them in ``shared_rows``, the reverse pass's exact ones in their place; the
    Spread can go before that pass runs (its channels are a third of a piece's working set).
    ``r``: the exact values, FP64, non-finite ones as 0."""
    shape = s.shape
    independent = torch.zeros(shape, dtype=torch.float64)
    bounded: list = []
    full = tuple(n > 1 for n in shape)
    for name, (coef, src) in s.exact.items():
        coef = coef.expand(shape)
        if tuple(n > 1 for n in src) == full:
            independent = independent + coef.square() / 3
            continue
        dims = [i for i, n in enumerate(src) if n == 1 and shape[i] > 1]
        bounded.append((name, _per_row((r * coef).sum(dims, keepdim=True).square() / 3, shape[0])))
    mixed_var = torch.zeros(shape, dtype=torch.float64)
    mixed_worst = torch.zeros(shape, dtype=torch.float64)
    for name, m in s.mixed.items():
        sd = m.sd.expand(shape)
        mixed_var = mixed_var + sd.square()
        mixed_worst = mixed_worst + m.worst
        dims = [i for i, ind in enumerate(m.independent) if not ind and shape[i] > 1]
        if not dims:
            independent = independent + sd.square()
        else:
            bounded.append((name, _per_row((r.abs() * sd).sum(dims, keepdim=True).square(), shape[0])))
    spread = OutputSpread(s.variance(), s.worst(), s.worst_by_point(), independent, None,
                          mixed_var.expand(shape), mixed_worst.expand(shape))
    return spread, bounded


def with_shared(spread: OutputSpread, bounded: list, shared_exact: Mapping[str, torch.Tensor] | None = None
                ) -> OutputSpread:
    """``spread`` with its ``shared_rows``: exact per point where ``shared_exact`` has it
    (``_ReverseOps``: (J^T r)^2 h^2 / 3), the Cauchy-Schwarz bound of ``_output_spread`` else."""
    shared_exact = shared_exact or {}
    shared_rows = torch.zeros(spread.variance.shape[0], dtype=torch.float64)
    for rows in shared_exact.values():
        shared_rows += rows
    for name, part in bounded:
        if name not in shared_exact:
            shared_rows += part
    spread.shared_rows = shared_rows
    return spread


class _NotEvaluated:
    """A value only row outputs read, left out of a reductions-only pass: every operation on it is
    itself."""

    def _itself(self, *args):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _itself
    __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __neg__ = t = square = _itself

    def __repr__(self):
        return "NOT_EVALUATED"


NOT_EVALUATED = _NotEvaluated()


class _ReductionsOnly:
    """An ``ops`` whose matmuls are left out (``NOT_EVALUATED``), and whose every other operation
    on a value left out is left out too."""

    def __init__(self, ops):
        self._ops = ops

    @staticmethod
    def matmul(a, b):
        return NOT_EVALUATED

    def __getattr__(self, name):
        attr = getattr(self._ops, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if any(a is NOT_EVALUATED for a in (*args, *kwargs.values())):
                return NOT_EVALUATED
            return attr(*args, **kwargs)
        return call


class DerivedMath(_Frozen):
    """An operator's math with its rounding points (see the module's docstring). ``points``:
    name -> what a kernel may store there; ``outputs``: the operator's output declarations
    (``contract.operator.OutputDecl``); ``operand_points``: per reduction the point its operand
    may be stored at (the diagnosis bound's stored input). ``golden``, ``gate`` and
    ``schedules`` are what ``contract.operator.Operator`` takes."""

    def __init__(self, math: Callable, points: Mapping[str, str], outputs: tuple[OutputDecl, ...],
                 operand_points: Mapping[str, str] | None = None, reused: Mapping[str, str] | None = None,
                 own: Mapping[str, tuple[str, ...]] | None = None, row_index: str | None = None,
                 row_elements: int | None = None):
        """``reused``: point -> the output whose stored value a kernel may read there (SwiGLU's
        dg_in is dg as stored); ``own``: output -> the upstream outputs it is recomputed from, with
        the kernel's own values at their points (the own-upstream checks); ``row_index``: the name
        under which the math receives each row's index in M, [rows, 1] (a causal mask reads it);
        ``row_elements``: evaluate the math on at most this many rows x the widest input read whole
        at a time (attention's [rows, N] scores: a 1024-row block at N = 32768 held 7 GB in the
        rounding model), for a math whose rows are independent and whose points are all per row
        (none broadcast over M)."""
        if row_index is not None and own:
            raise ValueError("own-upstream checks do not pass the row index: declare one or the other")
        self.math = math
        self.row_index = row_index
        self.row_elements = row_elements
        self.points = MappingProxyType(dict(points))
        self.reused = MappingProxyType(dict(reused or {}))
        self.own = MappingProxyType({o: tuple(up) for o, up in (own or {}).items()})
        unknown = {u for up in self.own.values() for u in up} - set(self.reused.values())
        if unknown:
            raise ValueError(f"own-upstream checks read {sorted(unknown)}, which no reused point stores")
        self.output_decls = tuple(outputs)
        self.outputs = tuple(o.name for o in outputs)
        self.row_outputs = frozenset(o.name for o in outputs if o.kind == "rows")
        self.kernel_of = MappingProxyType({o.name: o.kernel for o in outputs if o.kernel is not None})
        self.operand_points = MappingProxyType(dict(operand_points or {}))
        kernels = tuple(dict.fromkeys(self.kernel_of.values()))
        self.schedules = Schedules(points=(*self.points, *self.outputs), kernels=kernels,
                                   outputs={o.name: o.dtype or torch.bfloat16 for o in outputs})
        self._bias_paths = MappingProxyType(self._make_bias_paths())
        self.golden = _Golden(self)
        self.gate = _Gate(self)
        self._freeze()

    def bias_paths(self) -> dict:
        return dict(self._bias_paths)

    def _make_bias_paths(self) -> dict:
        """The legitimate paths whose rounding bias the fitted scale allows: FP32 math with no
        point stored, every point stored, and each point alone (a bias is a property of the
        values a store rounds; these bracket the combinations)."""
        base = self.schedules.BF16_FAITHFUL
        bf16 = torch.bfloat16
        paths = {"fp32": base, "all stored": base.with_store(**dict.fromkeys(self.points, bf16))}
        if len(self.points) > 1:
            paths.update({f"{p} stored": base.with_store(**{p: bf16}) for p in self.points})
        return paths

    def rows_per_evaluation(self, weights: Mapping[str, torch.Tensor]) -> int:
        """Rows of a chunk evaluated at once: at most one canonical block (1024 rows), fewer where
        ``row_elements`` says so; a power of two, so that a block of rows never straddles a
        canonical block and a row's bits never depend on the chunk it is in (the model's products
        and the reference's, by shape: ``goldens.blocks.row_product``)."""
        width = max([int(t.shape[-1]) for t in weights.values()] + [1])
        rows = REDUCTION_BLOCK if self.row_elements is None else max(1, self.row_elements // width)
        return min(1 << (rows.bit_length() - 1), REDUCTION_BLOCK)

    def evaluate(self, ops, inputs: Mapping, want_rows: bool = True) -> tuple[dict, dict]:
        """The math under ``ops``: its row outputs and its reductions' operands. ``want_rows=False``
        (a reductions-only pass: the drift study's): the matmuls are first left out, as the hand
        golden leaves out SwiGLU's dx products; a row output they reach comes back as
        ``NOT_EVALUATED``. A math whose reductions read a matmul, or that computes with such a
        value outside ``ops`` (a mask from it), is evaluated whole instead."""
        if not want_rows:
            try:
                rows, operands = self._checked(*self.math(_ReductionsOnly(ops), dict(inputs)))
            except Exception:     # noqa: BLE001 - a value left out met an operation ops does not wrap
                rows = operands = None
            if operands is not None and not any(x is NOT_EVALUATED for pair in operands.values() for x in pair):
                return rows, operands
        return self._checked(*self.math(ops, dict(inputs)))

    def _checked(self, rows: dict, operands: dict) -> tuple[dict, dict]:
        row_names = self.row_outputs
        if set(rows) != row_names or set(operands) != set(self.outputs) - row_names:
            raise ValueError(f"the math returned rows {sorted(rows)} and reductions {sorted(operands)}; the "
                             f"operator declares rows {sorted(row_names)} and reductions "
                             f"{sorted(set(self.outputs) - row_names)}")
        return rows, operands


def operand_error_sum(lhs: "ScaledFactor | None", err: torch.Tensor) -> torch.Tensor:
    """A reduction's operand errors over some rows summed as the reduction sums its operand: the
    rows of ``err`` (a sum over M, FP64), or lhs^T err (a contraction; ``lhs``: lhs^T scaled once a
    piece) from one scaled FP32 product (``accuracy.products.ScaledFactor``: SwiGLU's dw, 8 products
    of [K, rows] x [rows, N] a piece, 0.72 s of 6.9 in FP64 at M8192-K512-N1024; the hand model's
    are FP32 too). ``err`` is scratch: it is scaled in place."""
    return err.sum(0, keepdim=True) if lhs is None else lhs.times(err, scratch=True)


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a and b read the same elements of one storage (a weight transposed by each of a
    piece's evaluations, ``w.t()``): equal without comparing them (SwiGLU: 14 of the 66 whole
    comparisons a piece were of a weight with itself)."""
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride())


class _Memo:
    """Results keyed by tensors compared by value: a computation whose arguments equal an earlier
    one's (element for element, same shape and dtype) returns the earlier result. Each argument's
    fingerprint (the bytes of about 4096 evenly spaced elements, summed) is compared first: equal
    tensors have equal fingerprints, so only a candidate that may be equal is compared whole
    (SwiGLU's dx takes 8 distinct values over its paths: 28 whole comparisons a piece before)."""

    SAMPLES = 4096

    def __init__(self):
        self._seen: list[tuple[tuple[torch.Tensor, ...], tuple, object]] = []
        self._remember = True

    def lookups_only(self) -> "_Memo":
        """From now on a result not found is computed and not kept (its arguments would be held)."""
        self._remember = False
        return self

    @classmethod
    def _fingerprint(cls, t: torch.Tensor) -> tuple:
        """Sampled along each dimension, so a transposed weight is read in place (a flattened view
        of one is a copy: 2094 copies, 0.32 s of SwiGLU's derived gate at M8192)."""
        per_dim = max(1, round(cls.SAMPLES ** (1 / t.dim()))) if t.dim() else 1
        sample = t[tuple(slice(None, None, max(1, n // per_dim)) for n in t.shape)].reshape(-1).contiguous()
        return tuple(t.shape), t.dtype, int(sample.view(torch.uint8).sum(dtype=torch.int64))

    def get(self, args: tuple[torch.Tensor, ...], compute: Callable[[], object]):
        prints = tuple(self._fingerprint(a) for a in args)
        for key, key_prints, result in self._seen:
            if key_prints == prints and all(_same_view(a, k) or torch.equal(a, k) for a, k in zip(args, key)):
                return result
        result = compute()
        if self._remember:
            self._seen.append((args, prints, result))
        return result


class _PathOps(TensorOps):
    """A bias path's ``ops``: its plan's golden, with the matmuls of the paths before it reused
    where their operands are the same values (the paths of one piece share ``matmuls``)."""

    def __init__(self, plan, matmuls: _Memo):
        super().__init__(plan)
        self._matmuls = matmuls

    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self._matmuls.get((a, b), lambda: a @ b)


def _rows_into(whole: torch.Tensor | None, part: torch.Tensor, first: int, count: int) -> torch.Tensor:
    """``part`` (rows ``first`` onward of a chunk of ``count`` rows) written into ``whole``, the
    chunk's tensor, made at the first part; a part that is the whole chunk is kept as it is."""
    if part.shape[0] == count:
        return part
    if whole is None:
        whole = torch.empty((count, *part.shape[1:]), dtype=part.dtype)
    whole[first:first + part.shape[0]] = part
    return whole


class _Golden(_Frozen):
    """``Operator.golden``: the chunk under a plan, and the reference's rounding model."""

    # A chunk is evaluated a canonical block at a time, and what the gate reads of the model (each
    # row output's totals, worst cases by point, own-upstream ones: about 8 FP64 values an element)
    # is held for the whole chunk: SwiGLU's derived gate at M8192-K512-N1024 peaked at 3.1 GB with
    # 2048-row chunks and 2.3-2.4 GB with 1024 (7.0-7.6 s against 8.2-10.1 s; the hand gate's
    # 1.5 GB, 2.6-3.1 s and 1.2 GB, 2.2-2.5 s)
    max_chunk_rows = REDUCTION_BLOCK

    def __init__(self, derived: DerivedMath):
        self.derived = derived
        # the bias paths (none stored, all, each alone) are every combination of up to two points;
        # an output reached by more takes paths none of them is (a SwiGLU kernel storing dg and
        # dfc for dx but not dx's products), whose bias is not computed: the measured constant
        # stays under the computed ones there (allowance.SCALE_BIAS, ``DerivedTermSums.floor``)
        self.bias_floor = 0.0 if len(derived.points) <= 2 else allowance.SCALE_BIAS
        self._own_mode: dict = {}      # "value first": whether ``ValueFirstOwnOps`` serves (``_own_spreads``)
        self._freeze()

    def term_sums(self, inputs: Mapping[str, torch.Tensor]) -> DerivedTermSums:
        return DerivedTermSums(self.bias_floor)

    def chunk(self, rows, weights, plan, *, want_rows: bool, terms: DerivedTermSums | None = None,
              raw=None, block: int = 1024, start: int = 0) -> ChunkGolden:
        count = next(iter(rows.values())).shape[0]
        if self.derived.row_index is not None:
            rows = {**rows, self.derived.row_index: torch.arange(start, start + count).unsqueeze(1)}
        step = self.derived.rows_per_evaluation(weights)
        pieces, by_block = [], {}     # the operands' term sums per canonical block, summed as the pieces come
        # the pieces' values and operands are copied into the chunk's tensors as they come, so a
        # piece's are freed before the next is evaluated: attention's operands are [rows, N] (two
        # FP64 [1024, 32768] at N = 32768, 268 MB each), held twice by a concatenation at the end
        values: dict = {}
        operands: dict = {}
        for a in range(0, count, step):
            piece = self._piece({k: v[a:a + step] for k, v in rows.items()}, weights, plan, want_rows, terms, a, block)
            for o, per_block in piece.pop("terms", {}).items():
                mine = by_block.setdefault(o, {})
                for b, parts in per_block.items():
                    mine[b] = parts if b not in mine else [None if x is None else x.add_(y) for x, y in zip(mine[b], parts)]
            for o, v in piece.pop("values").items():
                values[o] = _rows_into(values.get(o), v, a, count)
            for o, (lhs, rhs) in piece.pop("operands").items():
                lhs0, rhs0 = operands.get(o, (None, None))
                operands[o] = (None if lhs is None else _rows_into(lhs0, lhs, a, count), _rows_into(rhs0, rhs, a, count))
            pieces.append(piece)
            # A few pieces of many rows free a working set of more than 512 MiB that the next piece
            # takes again: checked after each, it was given back and faulted in again every piece
            # (SwiGLU M8192-K512-N1024, one canonical block a piece: 8 releases a pass, 10.7-11.8 s
            # against 7.7-8.8 s without; RMSNorm M8192-N4096, 4 pieces of 256 rows a chunk: 87
            # releases, 12.4-13.3 s against 7.1-9.1 s). Checked where a chunk takes many pieces of a
            # few rows, whose buffers fragment the heap within it (attention at N = 32768: 64
            # pieces of 16 queries; goldens.heap: why); the block's own check, at 1 GiB, stays
            if count // step > FEW_PIECES:
                release_fragments(PIECE_GROWTH_LIMIT)
        out = {o: round_to(v, plan.rounding(o)) for o, v in values.items()} if want_rows else {}
        row_terms = None
        if terms is not None:
            if want_rows:
                per_output = {o: OutputSpread.cat([p["spreads"][o] for p in pieces]) for o in pieces[0]["spreads"]}
                row_terms = DerivedRowTerms(per_output, {o: p.worst_by_point for o, p in per_output.items()})
            for o, per_block in by_block.items():
                terms.add_blocks(o, per_block, count)
            counts: dict = {}
            for p in pieces:
                for key, c in p["directions"].items():
                    counts.setdefault(key, DirectionCounts()).add(c)
            if row_terms is not None:
                row_terms.one_sided = frozenset(o for (o, _), c in counts.items() if c.one_sided())
        return ChunkGolden(out, operands, row_terms)

    def _piece(self, rows, weights, plan, want_rows: bool, terms: DerivedTermSums | None, offset: int,
               block: int) -> dict:
        """Some rows of a chunk (from its row ``offset``) under ``plan``: their row outputs and
        operands, and with ``terms`` (the reference's pass) their rounding model: the row outputs'
        spreads, the operands' term sums per canonical block of ``block`` rows (``operand_parts``:
        the parts of the blocks these rows are in, summed over them) and each legitimate path's
        direction counts."""
        inputs = {**rows, **weights}
        # the reference's FP64 products, which the rounding model's and the own model's values repeat
        products = _Memo()
        ops = _PathOps(plan, products)
        values, operands = self.derived.evaluate(ops, inputs, want_rows)
        if not want_rows:
            values = {}
        rescaled = ops.rescaled
        piece = {"values": values, "operands": operands}
        if terms is None:
            return piece
        # the own model first: its upper products are the rounding model's, which finds them in
        # ``uppers`` and keeps none of its own (the memo holds the own model's few operands, not the
        # rounding model's many: SwiGLU's 6 of 14 a piece, 8 MB each)
        uppers = _Memo()
        own = {}
        # the exact row outputs with non-finite values as 0, which the fitted scale's sums read
        finite = {o: torch.where(torch.isfinite(v), v.double(), 0.0) for o, v in values.items()}
        if want_rows and self.derived.own:
            own_spreads = self._own_spreads(rows, inputs, products, uppers)
            own = {o: with_shared(*_output_spread(own_spreads.pop(o), finite[o]))
                   for o in self.derived.own if o in self.derived.row_outputs}
            del own_spreads
        spreads, spread_operands = self.derived.evaluate(PieceSpreadOps(products, uppers.lookups_only()),
                                                         spread_inputs(inputs), want_rows)
        uppers = None
        if not want_rows:
            spreads = {}
        for o, sp in spreads.items():
            terms.note_reach(o, _points_in(sp), rescaled)
        for o, (lhs, rhs) in spread_operands.items():
            terms.note_reach(o, _points_in(lhs) | _points_in(rhs), rescaled)
        piece["terms"] = {}
        for o, (lhs, rhs) in spread_operands.items():
            rhs = rhs if isinstance(rhs, Spread) else Spread(rhs.double())
            lhs = None if lhs is None else (lhs.value if isinstance(lhs, Spread) else lhs).double()
            piece["terms"][o] = operand_parts(lhs, rhs.variance(), rhs.worst(), rhs.value.abs(), offset, block)
        lhs = rhs = spread_operands = None
        piece["spreads"] = {}
        if want_rows:
            # the model's channels go before the reverse pass and the paths run
            points = {o: shared_points(sp) for o, sp in spreads.items()}
            partial = {o: _output_spread(spreads.pop(o), finite[o]) for o in list(spreads)}
            exact_shared = shared_variance(self.derived, inputs, finite, points, products)
            piece["spreads"] = {o: with_shared(sp, bounded, exact_shared.get(o)) for o, (sp, bounded) in partial.items()}
            del partial, exact_shared
            for o, own_spread in own.items():
                piece["spreads"][o].own = own_spread
        del spreads, own
        ops = products = None     # the reference's products and their operands, shared up to here
        piece["directions"] = self._add_path_bias(terms, inputs, finite, operands, want_rows)
        if not want_rows:
            terms.rows_not_summed |= self.derived.row_outputs
        return piece

    def _own_spreads(self, rows: Mapping, inputs: Mapping, products: "_Memo", uppers: "_Memo | None" = None) -> dict:
        """The own-upstream outputs' rounding model (``OwnSpreadOps``), by ``ValueFirstOwnOps`` where
        that gives the same on the operator's first two rows (checked once per operator: whether its
        own outputs read an erring value other than through a reused point is the math's structure)."""
        reused = self.derived.reused
        if "value first" not in self._own_mode:
            probe = {k: v[:2] if k in rows else v for k, v in inputs.items()}
            full, _ = self.derived.evaluate(OwnSpreadOps(reused), spread_inputs(probe))
            fast, _ = self.derived.evaluate(ValueFirstOwnOps(reused), {k: v.double() for k, v in probe.items()})
            self._own_mode["value first"] = all(
                isinstance(fast[o], Spread) and set(fast[o].exact) == set(full[o].exact)
                and set(fast[o].mixed) == set(full[o].mixed) and torch.equal(fast[o].variance(), full[o].variance())
                and torch.equal(fast[o].worst(), full[o].worst()) for o in self.derived.own if o in full)
        if self._own_mode["value first"]:
            spreads, _ = self.derived.evaluate(ValueFirstOwnOps(reused, products, uppers),
                                               {k: v.double() for k, v in inputs.items()})
        else:
            spreads, _ = self.derived.evaluate(OwnSpreadOps(reused, products, uppers), spread_inputs(inputs))
        return spreads

    def _add_path_bias(self, terms: DerivedTermSums, inputs64, finite, exact_operands, want_rows: bool = True) -> dict:
        """Round to nearest is biased on some data (an exact product of two BF16 values rounds
        toward zero more often than away): each legitimate path (``DerivedMath.bias_paths``) run
        in FP32 as a kernel runs it, its stored outputs' and its operands' errors against the
        exact values kept for the fitted scale (the row outputs of ``finite``, the exact values with
        non-finite ones as 0, only: none in a reductions-only pass). Returns each (row output, path)'s rounding-direction
        counts, which the direction test's allowance judges: where a path is one-sided that test
        cannot tell a biased store from a legitimate path, and the fitted scale (which allows the
        paths' bias) judges the direction alone."""
        f32 = {k: v.float() for k, v in inputs64.items()}
        counts: dict = {}
        # the paths differ in a point or two: most of a path's matmuls, operands and row outputs are
        # another's (SwiGLU: dg_in is the same in 5 of its 8 paths, dg in 6), each computed once per
        # piece and its errors' sums and direction counts with it
        matmuls = _Memo()
        operand_sums = {o: _Memo() for o in exact_operands}
        row_sums = {o: _Memo() for o in finite}
        lhs_scaled: dict = {}         # a contraction's exact lhs^T, scaled into FP32 once
        for o, v in finite.items():
            terms.add_exact(o, v)
        for path, plan in self.derived.bias_paths().items():
            values, operands = self.derived.evaluate(_PathOps(plan, matmuls), f32, want_rows)
            for o, v in values.items():
                if o not in row_sums:
                    continue
                rows, cols, counts[(o, path)] = row_sums[o].get(
                    (v,), lambda o=o, v=v: path_error_sums(v, finite[o], plan.rounding(o)))
                terms.add_path_rows(o, path, rows, cols)
            for o, (lhs, rhs) in operands.items():
                if lhs is not None and o not in lhs_scaled:
                    lhs_scaled[o] = ScaledFactor(exact_operands[o][0].double().t())
                part = operand_sums[o].get(
                    (rhs,), lambda: operand_error_sum(lhs_scaled.get(o), _error(rhs, exact_operands[o][1])))
                terms.add_path_operand(o, path, part)
        return counts


def _error(value: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """value - exact in FP64, a fresh tensor, non-finite differences as 0."""
    err = value.to(torch.float64, copy=True)
    return err.sub_(exact).nan_to_num_(0.0, 0.0, 0.0)


class _Gate(_Frozen):
    """``Operator.gate``: the derived allowances and bounds, and the own-upstream checks the math
    declares (``DerivedMath.own``)."""

    def __init__(self, derived: DerivedMath):
        self.derived = derived
        self.OWN_READS = MappingProxyType(dict(derived.own))
        self.OWN_SOURCE = MappingProxyType({o: f"its math with its own stored {', '.join(up)}"
                                            for o, up in derived.own.items()})
        self.UPSTREAM = "/".join(dict.fromkeys(u for up in derived.own.values() for u in up))
        self.LEGITIMATE_CHOICES = (*self.derived.points.values(), "FP32 math, any accurate form of each function",
                                   "any FP32 summation order within tiles of up to 8192 rows")
        self._freeze()

    @staticmethod
    def row_allowance(output: str, exact: torch.Tensor, rows: DerivedRowTerms, terms, sizes) -> Allowance:
        p = rows.outputs[output]
        sigmas = tail_sigmas(_numel(exact, sizes))
        # half a subnormal spacing (2^-134) for the kernel's store and the reference's: a rounding
        # among the subnormals is not relative
        allow = p.allowance(sigmas) + 2 * SUBNORMAL_STORE
        own = None if p.own is None else p.own.allowance(sigmas) + SUBNORMAL_STORE
        return Allowance(allow, own, p.independent_var, shared_total=float(p.shared_rows.sum()),
                         shared_rows=p.shared_rows, element_var=p.variance,
                         direction=output not in getattr(rows, "one_sided", ()))

    def bound(self, output: str, exact: torch.Tensor, abs_terms, sched, sizes) -> torch.Tensor:
        plan = sched.plan
        u_math = unit_roundoff(plan.math)
        if isinstance(abs_terms, Mapping):       # a row output: the worst case by point
            by_point = abs_terms[output]
            total = torch.zeros_like(exact, dtype=torch.float64)
            for point, worst in by_point.items():
                if point == MATH:
                    total = total + worst * (u_math / U_FP32)
                elif plan.rounding(point) is not None:
                    total = total + worst * (unit_roundoff(plan.rounding(point)) / 2.0 ** -8)
            return total + unit_roundoff(plan.rounding(output)) * exact.abs()
        return reduction_bound(abs_terms, exact, length=sizes[next(iter(sizes))], sched=sched,
                               kernel=self.derived.kernel_of[output],
                               inputs_stored=self.derived.operand_points.get(output), output=output,
                               elementwise_ops=BOUND_TERM_OPS)

    def own(self, rows, weights, kernel) -> ChunkGolden:
        """The declared downstream outputs recomputed in FP32 from the kernel's own stored
        upstream ones over a chunk of rows (``rows``: BF16 row inputs; ``weights`` in FP32)."""
        if not self.derived.own:
            return ChunkGolden({}, {})
        plan = self.derived.schedules.BF16_FAITHFUL
        values, operands = self.derived.evaluate(
            OwnTensorOps(plan, self.derived.reused, kernel), {**{k: v.float() for k, v in rows.items()}, **weights})
        return ChunkGolden({o: v for o, v in values.items() if o in self.derived.own},
                           {o: (None if lhs is None else lhs.float(), rhs.float())
                            for o, (lhs, rhs) in operands.items() if o in self.derived.own})


def reference_and_allowances(operator, inputs: Mapping[str, torch.Tensor]) -> tuple[dict, dict]:
    """Every output of the FP64 reference over a whole case, and every element's allowance against
    it as the gate computes it: the row outputs block by block from the reference's golden pass,
    the reductions from its term sums (one pass for both)."""
    sizes = operator.sizes(inputs)
    gp = GoldenPass(operator, inputs, {"fp64": operator.schedules.FP64_GLOBAL}, terms=True)
    rows: dict[str, list] = {o: [] for o in operator.row_outputs}
    allow: dict[str, list] = {o: [] for o in operator.row_outputs}
    for block in gp.blocks():
        for o in operator.row_outputs:
            rows[o].append(block.rows["fp64"][o])
            allow[o].append(operator.gate.row_allowance(o, block.rows["fp64"][o], block.terms, gp.terms,
                                                        sizes).vs_reference.double())
    exact = {o: torch.cat(parts) for o, parts in rows.items()}
    exact.update(gp.reductions["fp64"])
    out = {o: torch.cat(parts) for o, parts in allow.items()}
    for o in operator.reduction_outputs:
        out[o] = allowance.reduction(gp.terms, o, operator.output(o).kind, sizes[operator.dims[0]]).vs_reference.double()
    return exact, out


def case_allowances(operator, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every output element's allowance against the reference over a whole case (FP64), as the
    gate computes it (``reference_and_allowances``)."""
    return reference_and_allowances(operator, inputs)[1]


def _numel(exact: torch.Tensor, sizes) -> int:
    """The output's element count over the whole case: its per-row size times M."""
    return int(exact[0].numel()) * int(sizes[next(iter(sizes))]) if exact.dim() else 1
