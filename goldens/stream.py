"""One streaming pass over M that computes every golden layer at once.

All three layers are the same computation under a different ``TiledSchedule``:

* FP64 ideal      = float64 math, no stores, one global reduction;
* BF16-faithful   = FP32 math, BF16 stores per the rounding plan, one global FP32 reduction;
* tiled emulation = the kernel's plan, its tile_m per kernel, partials cast to
  the accumulator dtype and added tile by tile in loop order.

Rows are processed in chunks (``DEFAULT_CHUNK_ROWS``, 2048: 2048 x 1024 float64 is 16 MiB),
so the M=220000 case never holds a full-size float64 [M, N] tensor. Row-local
outputs (SwiGLU's dg, dfc, dx) are yielded chunk by chunk; reductions over M
(its db, dw) are complete after the last chunk.

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

from contract.operator import Operator
from contract.schedule import RoundingPlan, TiledSchedule
from goldens.blocks import REDUCTION_BLOCK, operand_sum
from goldens.rounding import round_to
from goldens.heap import release_fragments
from goldens.threads import comparison_threads

# Rows per streaming chunk. At the article's case (M=220000, one backend) the comparison took
# 192.9 s at 8192 rows, 127.2 s at 4096, 110.7 s at 2048 and 110.0 s at 1024, with peak RSS 4.36,
# 3.89, 3.63 and 3.63 GB: a chunk's FP64 buffers (8192 x 1024 x 8 B = 64 MiB each) are above
# glibc's largest mmap threshold (32 MiB), so each is page-faulted in afresh; at 2048 rows they
# are reused. The golden bits do not depend on it (tests/core/test_goldens.py).
DEFAULT_CHUNK_ROWS = 2048
# A wider row output gets fewer rows per chunk (down to one block), so that a chunk holds at
# most about this many elements per row output: at N=11008 (a production SwiGLU) 2048-row chunks
# held 22.5M-element FP64 tensors (180 MB each), and the comparison's per-chunk allowance
# temporaries about 2 GB on top of the term sums. Outputs up to 4096 wide keep 2048 rows.
CHUNK_ELEMENTS = DEFAULT_CHUNK_ROWS * 4096


def chunk_rows_for(operator: Operator, inputs: Mapping[str, torch.Tensor], chunk_rows: int | None = None) -> int:
    """Rows per chunk: ``chunk_rows`` when given, else DEFAULT_CHUNK_ROWS, fewer for outputs (or
    inputs read whole) wider than CHUNK_ELEMENTS / DEFAULT_CHUNK_ROWS and for a golden that holds
    more per row (its ``max_chunk_rows``); always a whole number of reduction blocks
    (chunk edges are block edges), so the goldens' bits do not depend on it."""
    if chunk_rows is None:
        sizes = operator.sizes(inputs)
        shapes = operator.output_shapes(sizes)
        # a row's math may span a whole input's last dimension too: attention's scores of one
        # query are N wide (kt [D, N]) beside an output row of D = 128; at N = 32768 a chunk of
        # 1024 rows (one canonical block, the fewest) holds its [rows, N] operands, not 2048
        whole = [t.shape(sizes)[-1] for t in operator.inputs if t.name not in operator.row_inputs]
        width = max([shapes[o][-1] for o in operator.row_outputs] + whole + [1])
        rows = min(DEFAULT_CHUNK_ROWS, CHUNK_ELEMENTS // width, getattr(operator.golden, "max_chunk_rows", None)
                   or DEFAULT_CHUNK_ROWS)
        return max(REDUCTION_BLOCK, rows // REDUCTION_BLOCK * REDUCTION_BLOCK)
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be >= 1")
    return -(-chunk_rows // REDUCTION_BLOCK) * REDUCTION_BLOCK


@dataclass
class RowBlock:
    """Golden row outputs for rows [start, stop): ``rows[layer][output]`` (plus the operator's
    per-element companions, e.g. SwiGLU's ``rows[layer]["dx_rounded_terms"]``); ``terms``: the row
    outputs' term sums from the reference's terms (the operator golden's ``row_terms``), when asked for."""
    start: int
    stop: int
    rows: dict[str, dict[str, torch.Tensor]]
    terms: object = None      # the operator's row term sums (SwiGLU: ``RowTerms``)


@dataclass
class _Accumulator:
    """Cross-tile state of one schedule for one reduction."""
    tile: int | None
    acc_dtype: torch.dtype
    partial: list = field(default_factory=list)   # open tile's partial, math dtype, [g, fc]
    total: list = field(default_factory=list)     # running value in acc_dtype, [g, fc]
    rows_in_tile: int = 0
    prefix_max: list | None = None   # when tracked: max |running partial| after each add, [g, fc]
    segment_max: list | None = None  # and max |added segment| (one canonical block's sum), [g, fc]
    abs_partials: list | None = None  # when tracked: sum over closed tiles of |tile partial|, [g, fc]
    # when set: called after each tile with (tile number from 1, the running value in acc_dtype,
    # the running sum of the same partials in the math dtype, the sum of |partials|)
    observe: object = None
    _global: object = None
    _abs: object = None
    _tiles: int = 0

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
        if self.observe is not None:
            part = self.partial[0]
            self._global = part.clone() if self._global is None else self._global + part
            self._abs = part.abs() if self._abs is None else self._abs + part.abs()
            self._tiles += 1
            self.observe(self._tiles, self.total[0], self._global, self._abs)
        self.partial, self.rows_in_tile = [], 0


class GoldenPass:
    """Streams the goldens of one case of ``operator``. Iterate ``blocks()`` once; afterwards
    ``reductions[layer]`` holds the operator's reductions over M. With ``terms`` set, ``terms``
    holds the reductions' term sums (the operator golden's ``term_sums``, its ``prefix`` from the
    FP64 layer's running sums) and every block its row outputs' term sums (when ``rows``).
    With ``accumulators`` set, ``accumulated[layer]`` holds each reduction's final accumulator
    before the output store (in the math dtype) and ``abs_partials[layer]`` the sum over its
    tiles of |tile partial|: what a drift study needs (``reports.drift_study``)."""

    def __init__(self, operator: Operator, inputs: Mapping[str, torch.Tensor], layers: Mapping[str, TiledSchedule], *,
                 chunk_rows: int | None = None, terms: bool = False,
                 rows: bool = True, accumulators: bool = False, tile_observer=None):
        """``rows=False``: the reductions only (SwiGLU: dg, dfc feed them; no dx: its two matmuls skipped).
        ``tile_observer(layer, output, tile, running, global_sum, abs_partials)``: called after each
        tile of each tiled reduction (a tile_m, not one global sum) of each layer, with the running value in the accumulator dtype, the
        running sum of the same partials in the math dtype (no casts: the global order's value)
        and the sum of |partials| so far (``reports.tile_drift``'s heatmap)."""
        self.operator = operator
        self.inputs = inputs
        self.layers = dict(layers)
        self.chunk_rows = chunk_rows_for(operator, inputs, chunk_rows)
        self.want_terms = terms
        self.want_rows = rows
        self.want_accumulators = accumulators
        self.tile_observer = tile_observer
        self.accumulated: dict[str, dict[str, torch.Tensor]] = {}
        self.abs_partials: dict[str, dict[str, torch.Tensor]] = {}
        self.reference = None
        if terms:
            # the term sums follow the reference's path: FP64 from the BF16 inputs, global sums
            self.reference = next((n for n, s in self.layers.items() if s.plan == operator.schedules.FP64_GLOBAL.plan
                                   and s.is_global), None)
            if self.reference is None:
                raise ValueError("terms=True needs the FP64 global layer among the layers")
        self.terms = operator.golden.term_sums(inputs) if terms else None
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
        """The row blocks in order, computed on the goldens' fixed threads (``goldens.threads``:
        the same bits whatever the caller's thread count)."""
        if self._done:
            raise RuntimeError("a GoldenPass streams once; make a new one")
        with comparison_threads():
            yield from self._blocks()

    def _blocks(self) -> Iterator[RowBlock]:
        op = self.operator
        reduction_outputs = op.reduction_outputs
        row_inputs = op.row_inputs
        m = self.inputs[row_inputs[0]].shape[0]
        plans = self._plans()
        whole: dict[torch.dtype, dict[str, torch.Tensor]] = {}   # the inputs read whole, per math dtype
        for p in plans:
            whole.setdefault(p.math, {n: self.inputs[n].to(p.math) for n in op.input_names if n not in row_inputs})
        kernel = {o: op.output(o).kernel for o in reduction_outputs}
        acc = {name: {o: _Accumulator(s.tile_m(kernel[o]), s.accumulator(kernel[o])) for o in reduction_outputs}
               for name, s in self.layers.items()}
        if self.reference is not None:
            for a in acc[self.reference].values():
                a.prefix_max = []
        if self.want_accumulators:
            for per_output in acc.values():
                for a in per_output.values():
                    a.abs_partials = []
        if self.tile_observer is not None:
            for name, per_output in acc.items():
                for o, a in per_output.items():
                    if a.tile is not None:   # a global sum is one "tile" with no drift: nothing to track
                        a.observe = (lambda tile, running, total, abs_sum, name=name, o=o:
                                     self.tile_observer(name, o, tile, running, total, abs_sum))

        for start in range(0, m, self.chunk_rows):
            stop = min(start + self.chunk_rows, m)
            raw = {n: self.inputs[n][start:stop] for n in row_inputs}
            rows: dict[str, dict[str, torch.Tensor]] = {}
            row_terms = None
            cast: dict[torch.dtype, dict[str, torch.Tensor]] = {}   # this chunk's row inputs per math dtype
            for plan in plans:
                users = [n for n, s in self.layers.items() if s.plan == plan]
                if plan.math not in cast:
                    cast[plan.math] = {n: t.to(plan.math) for n, t in raw.items()}
                reference = self.reference is not None and self.reference in users
                result = op.golden.chunk(cast[plan.math], whole[plan.math], plan, want_rows=self.want_rows,
                                         terms=self.terms if reference else None, raw=raw, block=REDUCTION_BLOCK,
                                         start=start)
                if reference:
                    row_terms = result.row_terms
                for name in users:
                    rows[name] = result.rows
                for o in reduction_outputs:
                    lhs, rhs = result.operands[o]
                    tiles = {n: self.layers[n].tile_m(kernel[o]) for n in users}
                    for tile, group in self._cut_groups(users, tiles).items():
                        cuts = self._cuts(start, stop, tile)
                        for a, b in zip(cuts, cuts[1:]):
                            seg = operand_sum(None if lhs is None else lhs[a - start:b - start],
                                              rhs[a - start:b - start])
                            for name in group:
                                acc[name][o].add((seg,), b - a)
                # a plan's operands ([rows, N] each for attention, 268 MB in FP64 at N = 32768) go
                # before the next plan's chunk is evaluated, and before the block is yielded
                result = lhs = rhs = None
            yield RowBlock(start, stop, rows, row_terms)
            rows = row_terms = cast = raw = None
            release_fragments()   # the block's buffers are free now (goldens.heap: why)

        for name, sched in self.layers.items():
            totals = {}
            for o, a in acc[name].items():
                a.close_tile()
                totals[o] = a.total[0].to(sched.plan.math)
            self.reductions[name] = {o: round_to(t, sched.plan.rounding(op.output(o).store_point))
                                     for o, t in totals.items()}
            if self.want_accumulators:
                self.accumulated[name] = totals
                self.abs_partials[name] = {o: a.abs_partials[0] for o, a in acc[name].items()}
        if self.reference is not None:
            ref = acc[self.reference]
            self.terms.prefix = {o: ref[o].prefix_max[0].double() for o in reduction_outputs}
            self.terms.segment = {o: ref[o].segment_max[0].double() for o in reduction_outputs}
        self._done = True


def materialize(operator: Operator, inputs: Mapping[str, torch.Tensor], schedule: TiledSchedule,
                chunk_rows: int | None = None) -> dict[str, torch.Tensor]:
    """Every output of one layer as full tensors in its math dtype (for tests and small M)."""
    golden = GoldenPass(operator, inputs, {schedule.name: schedule}, chunk_rows=chunk_rows)
    parts: dict[str, list[torch.Tensor]] = {o: [] for o in operator.row_outputs}
    for block in golden.blocks():
        for out in parts:
            parts[out].append(block.rows[schedule.name][out])
    result = {out: torch.cat(chunks) for out, chunks in parts.items()}
    result.update(golden.reductions[schedule.name])
    return result
