"""Where the tile-order drift accumulates: replay a schedule tile by tile against the global sum.

For one case, the inputs are re-created (``cases.spec.make_inputs``) and the
reductions over M are replayed the way the schedule does them:

* db (b kernel, ``tile_m_b`` rows): per tile, the FP32 column sum of dg / dfc,
  cast to the accumulator dtype and added to the running value (``out = out + cast(partial)``);
* dw (w kernel, ``tile_m_w`` rows): per tile, x_tile^T @ dg_tile (the stored BF16
  dg/dfc, FP32 math), cast and added likewise.

Next to it runs the FP32 global running sum of the same partials (no casts):
the faithful golden's summation. After tile t, drift_t = |acc_t - S_t| per
element; the report shows its max over blocks of ``block`` columns (and over
all K rows for dw) as a tile x column-block heatmap, with the rounding-model
bound of the accumulation (Higham's recursive summation):

    |acc_t - S_t| <= [u_acc + gamma_{t-1}(u_acc) (1 + u_acc) + gamma_t(u_math)] * sum_{j<=t} |partial_j|

where u_acc is the accumulator's unit roundoff (0 when it is the math dtype).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from accuracy.bounds import accumulation_bound, unit_roundoff
from cases.spec import CaseSpec, make_inputs
from operators.swiglu_backward.schedule import TiledSchedule
from goldens.rounding import round_to
from operators.swiglu_backward.math import elementwise

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
    """Running accumulator, FP32 global running sum and sum of |partials| of one reduction."""

    def __init__(self, acc_dtype: torch.dtype, math_dtype: torch.dtype):
        self.acc_dtype, self.math_dtype = acc_dtype, math_dtype
        self.u_acc = 0.0 if acc_dtype == math_dtype else unit_roundoff(acc_dtype)
        self.u_math = unit_roundoff(math_dtype)
        self.acc = self.glob = self.abs_sum = None
        self.partial = None
        self.t = 0
        self.drift, self.max_drift, self.mean_drift, self.max_bound, self.util = [], [], [], [], []

    def add_rows(self, part: torch.Tensor) -> None:
        """Add a segment's partial to the open tile (segments are cut at tile edges)."""
        self.partial = part if self.partial is None else self.partial + part

    def close_tile(self, block: int) -> None:
        partial, self.partial = self.partial, None
        if partial is None:
            return
        cast = partial.to(self.acc_dtype)
        if self.acc is None:
            self.acc, self.glob, self.abs_sum = cast, partial, partial.abs()
        else:
            self.acc = self.acc + cast          # out = out + cast(partial), in the output dtype
            self.glob = self.glob + partial     # the FP32 global running sum
            self.abs_sum = self.abs_sum + partial.abs()
        self.t += 1
        d = (self.acc.to(self.math_dtype) - self.glob).abs()
        bound = accumulation_bound(self.abs_sum, self.t, self.u_acc, self.u_math)
        self.drift.append(_blocks(d, block))
        self.max_drift.append(float(d.max()))
        self.mean_drift.append(float(d.double().mean()))
        self.max_bound.append(float(bound.max()))
        util = torch.where(d == 0, torch.zeros_like(d), d / bound)
        self.util.append(float(util.max()))


def _cuts(m: int, tiles) -> list[int]:
    cuts = {0, m}
    for tile in tiles:
        cuts.update(range(tile, m, tile))
    return sorted(cuts)


def replay(spec: CaseSpec, schedule: TiledSchedule, *, block: int = DEFAULT_BLOCK,
           inputs: dict | None = None) -> TileDrift:
    """Replay ``schedule``'s db and dw accumulation for ``spec`` tile by tile (CPU). Rows are
    processed in segments cut at both kernels' tile edges, so the elementwise part runs once."""
    import time
    start = time.perf_counter()
    inputs = inputs if inputs is not None else make_inputs(spec, "cpu")
    plan = schedule.plan
    x, dy, g, fc = (inputs[n] for n in ("x", "dy", "g", "fc"))
    m = x.shape[0]
    result = TileDrift(spec.id, schedule.name, block=block)
    tile_b, tile_w = schedule.tile_m_b or m, schedule.tile_m_w or m
    tracks = {o: _Track(schedule.db_accumulator, plan.math) for o in ("db_g", "db_fc")}
    tracks.update({o: _Track(schedule.dw_accumulator, plan.math) for o in ("dw_g", "dw_fc")})
    cuts = _cuts(m, (tile_b, tile_w))
    open_w: list = []
    for s, e in zip(cuts, cuts[1:]):
        dg_m, dfc_m = elementwise(dy[s:e], g[s:e], fc[s:e], plan)
        dg_s, dfc_s = round_to(dg_m, plan.rounding("dg")), round_to(dfc_m, plan.rounding("dfc"))
        db_in = (dg_m, dfc_m) if plan.db_input == "math" else (dg_s, dfc_s)
        tracks["db_g"].add_rows(db_in[0].sum(0, keepdim=True))
        tracks["db_fc"].add_rows(db_in[1].sum(0, keepdim=True))
        open_w.append((s, e, dg_s, dfc_s))
        if e % tile_b == 0 or e == m:
            tracks["db_g"].close_tile(block)
            tracks["db_fc"].close_tile(block)
        if e % tile_w == 0 or e == m:
            # one FP32 matmul per w tile, as the kernel (and the tiled golden) does it
            a = open_w[0][0]
            xt = x[a:e].to(plan.math).t()
            dg_t = torch.cat([seg[2] for seg in open_w]) if len(open_w) > 1 else open_w[0][2]
            dfc_t = torch.cat([seg[3] for seg in open_w]) if len(open_w) > 1 else open_w[0][3]
            open_w.clear()
            tracks["dw_g"].add_rows(xt @ dg_t)
            tracks["dw_fc"].add_rows(xt @ dfc_t)
            tracks["dw_g"].close_tile(block)
            tracks["dw_fc"].close_tile(block)
    for o, tr in tracks.items():
        result.tile_rows[o] = tile_b if o.startswith("db") else tile_w
        result.drift[o] = tr.drift
        result.max_drift[o] = tr.max_drift
        result.mean_drift[o] = tr.mean_drift
        result.max_bound[o] = tr.max_bound
        result.utilisation[o] = tr.util
        result.finals[o] = tr.acc
    result.seconds = time.perf_counter() - start
    return result

def choose_case(cases, *, max_m: int = DEFAULT_MAX_M, min_tiles: int = 8,
                schedule: TiledSchedule | None = None) -> tuple[CaseSpec | None, str]:
    """The case to replay: the largest case with M <= max_m (the article's seed scale first,
    then unit; saturating is skipped, it is NaN under the article's sigmoid). When that case has
    fewer than ``min_tiles`` w-kernel tiles, or the results hold a larger case, the same K, N,
    scale and seed are re-created at M = max_m. Returns (spec, why)."""
    valid = [c for c in cases if c.m and c.k and c.n and c.seed is not None and c.scale not in ("saturating", "?")]
    if not valid:
        return None, "no case with known M, K, N, scale and seed in the results"
    prefer = {"seed": 0, "unit": 1}
    best_scale = min(valid, key=lambda c: prefer.get(c.scale, 2)).scale
    pool = [c for c in valid if c.scale == best_scale]
    fits = [c for c in pool if c.m <= max_m]
    tile_w = (schedule.tile_m_w if schedule is not None else None) or 2048
    if fits:
        c = max(fits, key=lambda c: (c.m, c.k * c.n))
        if -(-c.m // tile_w) >= min_tiles and c.m == max(x.m for x in pool):
            return CaseSpec(c.m, c.k, c.n, c.scale, c.seed), f"the largest {c.scale}-scale case in the results"
    c = max(pool, key=lambda c: (c.m, c.k * c.n))
    reason = ("capped to keep the replay affordable" if c.m > max_m else
              f"only {-(-c.m // tile_w)} tiles of {tile_w} rows there, too few to show accumulation")
    why = (f"re-created at M={max_m} with K={c.k}, N={c.n}, {c.scale} scale, seed {c.seed}; the largest "
           f"{c.scale}-scale case in the results has M={c.m} ({reason})")
    return CaseSpec(max_m, c.k, c.n, c.scale, c.seed), why
