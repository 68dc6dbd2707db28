"""Where the tile-order drift accumulates: a schedule's reductions over M, tile by tile, against
the global sum of the same partials.

For one case, the inputs are re-created (``cases.spec.make_inputs``) and the golden pass
(``goldens.stream.GoldenPass``, the engine of every golden) runs the schedule's reductions only;
after each tile it reports the running value in the accumulator dtype (``out = out +
cast(partial)``) and the running sum of the same partials in the math dtype (no casts: the
faithful golden's summation). drift_t = |acc_t - S_t| per element; the report shows its max over
blocks of ``block`` columns (and over all rows of a contraction) as a tile x column-block
heatmap, with the rounding-model bound of the accumulation (Higham's recursive summation):

    |acc_t - S_t| <= [u_acc + gamma_{t-1}(u_acc) (1 + u_acc) + gamma_t(u_math)] * sum_{j<=t} |partial_j|

where u_acc is the accumulator's unit roundoff (0 when it is the math dtype).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

import operators
from accuracy.bounds import accumulation_bound, unit_roundoff
from cases.spec import CaseSpec, make_inputs
from goldens.stream import GoldenPass

DEFAULT_BLOCK = 64
DEFAULT_MAX_M = 32768


@dataclass
class TileDrift:
    """Per output: ``drift[t][b]`` = max |acc - S| after tile t in column block b, ``bound[t]`` and
    ``max_drift[t]``, ``mean_drift[t]``, ``utilisation[t]`` = max over elements of drift / bound."""
    case: str
    schedule: str
    tile_rows: dict = field(default_factory=dict)     # output -> tile_m
    drift: dict = field(default_factory=dict)         # output -> [[float]] tiles x blocks
    max_drift: dict = field(default_factory=dict)     # output -> [float] per tile
    mean_drift: dict = field(default_factory=dict)
    max_bound: dict = field(default_factory=dict)
    utilisation: dict = field(default_factory=dict)
    block: int = DEFAULT_BLOCK
    seconds: float = 0.0
    finals: dict = field(default_factory=dict, repr=False)   # output -> final accumulator (tests)

    CACHED = ("case", "schedule", "tile_rows", "drift", "max_drift", "mean_drift", "max_bound",
              "utilisation", "block", "seconds")

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.CACHED}

    @classmethod
    def from_json(cls, data: dict) -> "TileDrift":
        return cls(**{k: data[k] for k in cls.CACHED})


def _blocks(values: torch.Tensor, block: int) -> list[float]:
    """[rows, N] -> max over rows and over blocks of ``block`` columns -> [ceil(N / block)]."""
    col = values.amax(dim=0) if values.dim() > 1 else values
    n = col.numel()
    pad = (-n) % block
    if pad:
        col = torch.cat([col, col.new_full((pad,), float("nan"))])
    return [float(v) for v in col.reshape(-1, block).nan_to_num(nan=-math.inf).amax(dim=1)]


class _Track:
    """The per-tile drift of one reduction under one schedule."""

    def __init__(self, acc_dtype: torch.dtype, math_dtype: torch.dtype, block: int):
        self.u_acc = 0.0 if acc_dtype == math_dtype else unit_roundoff(acc_dtype)
        self.u_math = unit_roundoff(math_dtype)
        self.math_dtype, self.block = math_dtype, block
        self.final = None
        self.drift, self.max_drift, self.mean_drift, self.max_bound, self.util = [], [], [], [], []

    def tile(self, t: int, running: torch.Tensor, total: torch.Tensor, abs_sum: torch.Tensor) -> None:
        self.final = running
        d = (running.to(self.math_dtype) - total).abs()
        bound = accumulation_bound(abs_sum, t, self.u_acc, self.u_math)
        self.drift.append(_blocks(d, self.block))
        self.max_drift.append(float(d.max()))
        self.mean_drift.append(float(d.double().mean()))
        self.max_bound.append(float(bound.max()))
        util = torch.where(d == 0, torch.zeros_like(d), d / bound)
        self.util.append(float(util.max()))


def replay(spec: CaseSpec, schedule, *, block: int = DEFAULT_BLOCK, inputs: dict | None = None) -> TileDrift:
    """``schedule``'s reductions over M for ``spec``, tile by tile (CPU), from the golden pass."""
    import time
    start = time.perf_counter()
    inputs = inputs if inputs is not None else make_inputs(spec, "cpu")
    op = operators.get()
    tracks = {o: _Track(schedule.accumulator(op.output(o).kernel), schedule.plan.math, block)
              for o in op.reduction_outputs}
    golden = GoldenPass(inputs, {schedule.name: schedule}, rows=False,
                        tile_observer=lambda layer, o, t, running, total, abs_sum: tracks[o].tile(t, running, total, abs_sum))
    for _ in golden.blocks():
        pass
    m = op.sizes(inputs)[op.dims[0]]
    result = TileDrift(spec.id, schedule.name, block=block)
    for o, tr in tracks.items():
        result.tile_rows[o] = schedule.tile_m(op.output(o).kernel) or m
        result.drift[o] = tr.drift
        result.max_drift[o] = tr.max_drift
        result.mean_drift[o] = tr.mean_drift
        result.max_bound[o] = tr.max_bound
        result.utilisation[o] = tr.util
        result.finals[o] = tr.final
    result.seconds = time.perf_counter() - start
    return result


def choose_case(cases, *, max_m: int = DEFAULT_MAX_M, min_tiles: int = 8, schedule=None) -> tuple[CaseSpec | None, str]:
    """The case to replay: the largest case with M <= max_m, at the scale of the operator's
    acceptance case first, then unit. When that case has fewer than ``min_tiles`` tiles of the
    schedule's longest tile, or the results hold a larger case, the same other sizes, scale and
    seed are re-created at M = max_m. Returns (spec, why)."""
    op = operators.get()
    valid = [c for c in cases if c.m and c.shape and None not in c.sizes and c.seed is not None
             and c.scale in op.scales]
    if not valid:
        return None, "no case with known sizes, scale and seed in the results"
    prefer = {op.article_case[-2]: 0, "unit": 1} if op.article_case else {"unit": 0}
    best_scale = min(valid, key=lambda c: prefer.get(c.scale, 2)).scale
    pool = [c for c in valid if c.scale == best_scale]
    fits = [c for c in pool if c.m <= max_m]
    tiles = [schedule.tile_m(op.output(o).kernel) for o in op.reduction_outputs] if schedule is not None else []
    tile = max((t for t in tiles if t), default=2048)

    def size(c):
        return (c.m, math.prod(c.sizes))

    def spec(m, c):
        return CaseSpec(m, *c.sizes, c.scale, c.seed)

    if fits:
        c = max(fits, key=size)
        if -(-c.m // tile) >= min_tiles and c.m == max(x.m for x in pool):
            return spec(c.m, c), f"the largest {c.scale}-scale case in the results"
    c = max(pool, key=size)
    reason = ("capped to keep the replay affordable" if c.m > max_m else
              f"only {-(-c.m // tile)} tiles of {tile} rows there, too few to show accumulation")
    why = (f"re-created at M={max_m} with {c.shape_label}, {c.scale} scale, seed {c.seed}; the largest "
           f"{c.scale}-scale case in the results has M={c.m} ({reason})")
    return spec(max_m, c), why
