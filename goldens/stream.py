"""One streaming pass over M that computes every golden layer at once.

All three layers are the same computation under a different ``TiledSchedule``:

* FP64 ideal      = float64 math, no stores, one global reduction;
* BF16-faithful   = FP32 math, BF16 stores per the rounding plan, one global FP32 reduction;
* tiled emulation = the kernel's plan, its tile_m per kernel, partials cast to
  the accumulator dtype and added tile by tile in loop order.

Rows are processed in chunks (``DEFAULT_CHUNK_ROWS``, 2048: 2048 x 1024 float64 is 16 MiB),
so the M=220000 case never holds a full-size float64 [M, N] tensor. Row-local
outputs (dg, dfc, dx) are yielded chunk by chunk; reductions (db, dw) are
complete after the last chunk.

Reductions are canonical: every layer sums its rows in aligned blocks of
``REDUCTION_BLOCK`` rows (one FP32 matmul or sum per block), added block by block
in row order, so a golden's bits depend on its own schedule alone, never on the
other layers in the pass or on ``chunk_rows`` (rounded up to a multiple of the
block). A schedule whose tile is a multiple of the block (the article's 1024 and
2048) sums its tile from the same block partials; any other tile gets its own
cuts (its own matmuls), so it cannot move anyone else's golden either.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from goldens.rounding import round_to
from goldens.schedule import FP64_IDEAL, RoundingPlan, TiledSchedule
from goldens.terms import RowTerms, TermSums
import operators
from operators.swiglu_backward.math import elementwise

# Rows per streaming chunk. At the article's case (M=220000, one backend) the comparison took
# 192.9 s at 8192 rows, 127.2 s at 4096, 110.7 s at 2048 and 110.0 s at 1024, with peak RSS 4.36,
# 3.89, 3.63 and 3.63 GB: a chunk's FP64 buffers (8192 x 1024 x 8 B = 64 MiB each) are above
# glibc's largest mmap threshold (32 MiB), so each is page-faulted in afresh; at 2048 rows they
# are reused. The golden bits do not depend on it (tests/core/test_goldens.py).
DEFAULT_CHUNK_ROWS = 2048
# 1024 rows: the b and x kernels' tile and a divisor of the w kernel's (2048), so the tiled
# layers of the article's schedule share the canonical block partials at no extra cost.
REDUCTION_BLOCK = 1024
REDUCTION_OUTPUTS = operators.get().reduction_outputs   # db_g, db_fc, dw_g, dw_fc


@dataclass
class RowBlock:
    """Golden row outputs for rows [start, stop): ``rows[layer][output]`` (plus
    ``rows[layer]["dx_rounded_terms"]`` = |p_g| + |p_fc| when the plan stores dx's two
    products before adding them); ``terms``: dx's term sums from the reference's terms
    (``goldens.terms``), when asked for."""
    start: int
    stop: int
    rows: dict[str, dict[str, torch.Tensor]]
    terms: RowTerms | None = None


@dataclass
class _Accumulator:
    """Cross-tile state of one schedule for one reduction (db or dw pair)."""
    tile: int | None
    acc_dtype: torch.dtype
    partial: list = field(default_factory=list)   # open tile's partial, math dtype, [g, fc]
    total: list = field(default_factory=list)     # running value in acc_dtype, [g, fc]
    rows_in_tile: int = 0
    prefix_max: list | None = None   # when tracked: max |running partial| after each add, [g, fc]
    segment_max: list | None = None  # and max |added segment| (one canonical block's sum), [g, fc]
    abs_partials: list | None = None  # when tracked: sum over closed tiles of |tile partial|, [g, fc]

    def add(self, parts: Sequence[torch.Tensor], rows: int) -> None:
        if not self.partial:
            self.partial = [p.clone() for p in parts]
        else:
            for acc, p in zip(self.partial, parts):
                acc += p
        if self.prefix_max is not None:
            if not self.prefix_max:
                self.prefix_max = [p.abs() for p in self.partial]
                self.segment_max = [p.abs() for p in parts]
            else:
                for peak, p in zip(self.prefix_max, self.partial):
                    torch.maximum(peak, p.abs(), out=peak)
                for peak, p in zip(self.segment_max, parts):
                    torch.maximum(peak, p.abs(), out=peak)
        self.rows_in_tile += rows
        if self.tile is not None and self.rows_in_tile == self.tile:
            self.close_tile()

    def close_tile(self) -> None:
        if not self.partial:
            return
        cast = [p.to(self.acc_dtype) for p in self.partial]
        if self.abs_partials is not None:
            self.abs_partials = ([p.abs() for p in self.partial] if not self.abs_partials else
                                 [s + p.abs() for s, p in zip(self.abs_partials, self.partial)])
        if not self.total:
            # the caller zeroed the output: 0 + cast(partial) == cast(partial)
            self.total = cast
        else:
            self.total = [t + c for t, c in zip(self.total, cast)]
        self.partial, self.rows_in_tile = [], 0


class GoldenPass:
    """Streams the goldens of one case. Iterate ``blocks()`` once; afterwards
    ``reductions[layer]`` holds db_g, db_fc, dw_g, dw_fc. With ``terms`` set, ``terms``
    holds the reductions' term sums (``goldens.terms.TermSums``, its ``prefix`` from the
    FP64 layer's running sums) and every block its dx term sums (when ``rows``).
    With ``accumulators`` set, ``accumulated[layer]`` holds each reduction's final accumulator
    before the output store (in the math dtype) and ``abs_partials[layer]`` the sum over its
    tiles of |tile partial|: what a drift study needs (``reports.drift_study``)."""

    def __init__(self, inputs: Mapping[str, torch.Tensor], layers: Mapping[str, TiledSchedule], *,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS, terms: bool = False, reductions: bool = True,
                 rows: bool = True, accumulators: bool = False):
        """``reductions=False``: the row outputs only (no db, dw): half the matmuls.
        ``rows=False``: the reductions only (dg, dfc feed them; no dx: its two matmuls skipped)."""
        if chunk_rows < 1:
            raise ValueError("chunk_rows must be >= 1")
        if not (rows or reductions):
            raise ValueError("rows=False and reductions=False leave nothing to compute")
        self.inputs = inputs
        self.layers = dict(layers)
        self.chunk_rows = -(-chunk_rows // REDUCTION_BLOCK) * REDUCTION_BLOCK   # chunk edges are block edges
        self.want_terms = terms
        self.want_reductions = reductions
        self.want_rows = rows
        self.want_accumulators = accumulators
        self.accumulated: dict[str, dict[str, torch.Tensor]] = {}
        self.abs_partials: dict[str, dict[str, torch.Tensor]] = {}
        if terms and not reductions:
            raise ValueError("terms=True needs the reductions")
        self.reference = None
        if terms:
            # the term sums follow the reference's path: FP64 from the BF16 inputs, global sums
            self.reference = next((n for n, s in self.layers.items() if s.plan == FP64_IDEAL
                                   and s.is_global), None)
            if self.reference is None:
                raise ValueError("terms=True needs the FP64 global layer among the layers")
        self.terms: TermSums | None = TermSums(inputs) if terms else None
        self.reductions: dict[str, dict[str, torch.Tensor]] = {}
        self._done = False

    def _plans(self) -> list[RoundingPlan]:
        plans: list[RoundingPlan] = []
        for sched in self.layers.values():
            if sched.plan not in plans:
                plans.append(sched.plan)
        return plans

    @staticmethod
    def _cuts(start: int, stop: int, tile: int | None) -> list[int]:
        """Segment edges in [start, stop): every canonical block edge, plus ``tile``'s edges."""
        cuts = {start, stop}
        for step in (REDUCTION_BLOCK, tile):
            if step is not None:
                cuts.update(range((start // step + 1) * step, stop, step))
        return sorted(cuts)

    @staticmethod
    def _cut_groups(users: Sequence[str], tiles: Mapping[str, int | None]) -> dict[int | None, list[str]]:
        """Users grouped by the extra tile their segments need (None: the canonical blocks serve)."""
        groups: dict[int | None, list[str]] = {}
        for name in users:
            tile = tiles[name]
            groups.setdefault(None if tile is None or tile % REDUCTION_BLOCK == 0 else tile, []).append(name)
        return groups

    def blocks(self) -> Iterator[RowBlock]:
        if self._done:
            raise RuntimeError("a GoldenPass streams once; make a new one")
        x, dy, g, fc = (self.inputs[n] for n in ("x", "dy", "g", "fc"))
        m = x.shape[0]
        plans = self._plans()
        weights = {id(p): (self.inputs["w_g"].to(p.math), self.inputs["w_fc"].to(p.math)) for p in plans}
        db_acc = {name: _Accumulator(s.tile_m("b"), s.accumulator("b")) for name, s in self.layers.items()}
        dw_acc = {name: _Accumulator(s.tile_m("w"), s.accumulator("w")) for name, s in self.layers.items()}
        if self.reference is not None:
            db_acc[self.reference].prefix_max = []
            dw_acc[self.reference].prefix_max = []
        if self.want_accumulators:
            for acc in (*db_acc.values(), *dw_acc.values()):
                acc.abs_partials = []

        for start in range(0, m, self.chunk_rows):
            stop = min(start + self.chunk_rows, m)
            rows: dict[str, dict[str, torch.Tensor]] = {}
            row_terms = None
            cast: dict[torch.dtype, tuple[torch.Tensor, ...]] = {}   # this chunk's inputs per math dtype
            for plan in plans:
                users = [n for n, s in self.layers.items() if s.plan == plan]
                if plan.math not in cast:
                    cast[plan.math] = tuple(t[start:stop].to(plan.math) for t in (dy, g, fc, x))
                dy_m, g_m, fc_m, x_m = cast[plan.math]
                dg_m, dfc_m = elementwise(dy_m, g_m, fc_m, plan)
                dg_s = round_to(dg_m, plan.rounding("dg"))
                dfc_s = round_to(dfc_m, plan.rounding("dfc"))
                block = {"dg": dg_s, "dfc": dfc_s}
                if self.want_rows:
                    w_g, w_fc = weights[id(plan)]
                    p_g = round_to(dg_s @ w_g.t(), plan.rounding("dx_product"))
                    p_fc = round_to(dfc_s @ w_fc.t(), plan.rounding("dx_product"))
                    block["dx"] = dx = round_to(p_g + p_fc, plan.rounding("dx"))
                    if plan.rounding("dx_product") is not None:
                        # a rounding flip at a stored product moves dx by one ULP of the product
                        block["dx_rounded_terms"] = p_g.abs() + p_fc.abs()
                if self.reference is not None and self.reference in users:
                    var_g, var_fc = self.terms.rounding_variance(dy[start:stop], g[start:stop], fc[start:stop],
                                                                 dg_m, dfc_m)
                    if self.want_rows:
                        row_terms = self.terms.rows(dg_m, dfc_m, var_g, var_fc, p_g, p_fc, dx)
                    for a in range(start, stop, REDUCTION_BLOCK):
                        b = min(a + REDUCTION_BLOCK, stop)
                        self.terms.add_block(x[a:b], dg_m[a - start:b - start], dfc_m[a - start:b - start],
                                             var_g[a - start:b - start], var_fc[a - start:b - start])
                for name in users:
                    rows[name] = block
                if not self.want_reductions:
                    continue
                # db: the b kernel sums dg/dfc in the math dtype, before the store rounds them
                db_g_in, db_fc_in = (dg_m, dfc_m) if plan.db_input == "math" else (dg_s, dfc_s)
                tiles_b = {n: self.layers[n].tile_m("b") for n in users}
                for tile, group in self._cut_groups(users, tiles_b).items():
                    cuts = self._cuts(start, stop, tile)
                    for a, b in zip(cuts, cuts[1:]):
                        seg = (db_g_in[a - start:b - start].sum(0, keepdim=True),
                               db_fc_in[a - start:b - start].sum(0, keepdim=True))
                        for name in group:
                            db_acc[name].add(seg, b - a)
                # dw: the w kernel reads the stored dg/dfc and multiplies in the math dtype
                tiles_w = {n: self.layers[n].tile_m("w") for n in users}
                for tile, group in self._cut_groups(users, tiles_w).items():
                    cuts = self._cuts(start, stop, tile)
                    for a, b in zip(cuts, cuts[1:]):
                        xs = x_m[a - start:b - start].t()
                        seg = (xs @ dg_s[a - start:b - start], xs @ dfc_s[a - start:b - start])
                        for name in group:
                            dw_acc[name].add(seg, b - a)
            yield RowBlock(start, stop, rows, row_terms)

        for name, sched in (self.layers.items() if self.want_reductions else ()):
            db_acc[name].close_tile()
            dw_acc[name].close_tile()
            math = sched.plan.math
            totals = [t.to(math) for t in db_acc[name].total + dw_acc[name].total]
            stores = [sched.plan.rounding("db")] * 2 + [sched.plan.rounding("dw")] * 2
            self.reductions[name] = {o: round_to(t, r) for o, t, r in zip(REDUCTION_OUTPUTS, totals, stores)}
            if self.want_accumulators:
                self.accumulated[name] = dict(zip(REDUCTION_OUTPUTS, totals))
                self.abs_partials[name] = dict(zip(REDUCTION_OUTPUTS,
                                                   db_acc[name].abs_partials + dw_acc[name].abs_partials))
        if self.reference is not None:
            peaks = db_acc[self.reference].prefix_max + dw_acc[self.reference].prefix_max
            self.terms.prefix = {o: p.double() for o, p in zip(REDUCTION_OUTPUTS, peaks)}
            segments = db_acc[self.reference].segment_max + dw_acc[self.reference].segment_max
            self.terms.segment = {o: p.double() for o, p in zip(REDUCTION_OUTPUTS, segments)}
        self._done = True


def materialize(inputs: Mapping[str, torch.Tensor], schedule: TiledSchedule,
                chunk_rows: int = DEFAULT_CHUNK_ROWS) -> dict[str, torch.Tensor]:
    """All seven outputs of one layer as full tensors in its math dtype (for tests and small M)."""
    golden = GoldenPass(inputs, {schedule.name: schedule}, chunk_rows=chunk_rows)
    parts: dict[str, list[torch.Tensor]] = {"dg": [], "dfc": [], "dx": []}
    for block in golden.blocks():
        for out in parts:
            parts[out].append(block.rows[schedule.name][out])
    result = {out: torch.cat(chunks) for out, chunks in parts.items()}
    result.update(golden.reductions[schedule.name])
    return result
