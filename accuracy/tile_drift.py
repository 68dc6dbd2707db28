"""Where the tile-order drift of a tiled schedule accumulates, tile by tile, recorded by the golden
pass itself (``goldens.stream.GoldenPass(tile_observer=...)``) while it computes the case's goldens.

After tile t of a reduction, the pass reports the running value in the accumulator dtype
(``out = out + cast(partial)``) and the running sum of the same partials in the math dtype (no
casts: the global order's value). drift_t = |acc_t - S_t| per element; kept per tile: its max
over blocks of ``BLOCK`` columns (and over every row of the output), its max and mean, and the
rounding-model bound of the accumulation (Higham's recursive summation)

    |acc_t - S_t| <= [u_acc + gamma_{t-1}(u_acc) (1 + u_acc) + gamma_t(u_math)] * sum_{j<=t} |partial_j|

with the largest ratio drift / bound (``utilisation``; <= 1 when the model holds). The records
carry it (``cases.evaluate.golden_records``: ``tile_drift`` of the tiled layer's records) and the
report's heatmap reads it from there (``reports.tile_drift``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from accuracy.bounds import accumulation_bound, accumulator_roundoff, unit_roundoff

BLOCK = 64   # columns per heatmap cell: 16 cells across N = 1024


def column_blocks(values: torch.Tensor, block: int = BLOCK) -> list[float]:
    """[rows, N] -> max over rows and over blocks of ``block`` columns -> [ceil(N / block)]."""
    col = values.amax(dim=0) if values.dim() > 1 else values
    n = col.numel()
    pad = (-n) % block
    if pad:
        col = torch.cat([col, col.new_full((pad,), float("nan"))])
    return [float(v) for v in col.reshape(-1, block).nan_to_num(nan=-math.inf).amax(dim=1)]


class _Reduction:
    def __init__(self, sched, kernel: str, tile_rows: int, block: int):
        self.u_acc = accumulator_roundoff(sched, kernel)
        self.u_math = unit_roundoff(sched.plan.math)
        self.math_dtype, self.block = sched.plan.math, block
        self.final = None
        self.data = {"tile_rows": tile_rows, "block": block, "drift": [], "max_drift": [], "mean_drift": [],
                     "max_bound": [], "utilisation": []}

    def tile(self, t: int, running: torch.Tensor, total: torch.Tensor, abs_sum: torch.Tensor) -> None:
        self.final = running
        d = (running.to(self.math_dtype) - total).abs()
        bound = accumulation_bound(abs_sum, t, self.u_acc, self.u_math)
        util = torch.where(d == 0, torch.zeros_like(d), d / bound)
        self.data["drift"].append(column_blocks(d, self.block))
        self.data["max_drift"].append(float(d.max()))
        self.data["mean_drift"].append(float(d.double().mean()))
        self.data["max_bound"].append(float(bound.max()))
        self.data["utilisation"].append(float(util.max()))


class TileDriftRecorder:
    """The per-tile drift of the given layers (name -> schedule) of one golden pass: pass
    ``observe`` as its ``tile_observer``; afterwards ``result()`` is {layer: {output: data}}."""

    def __init__(self, layers: Mapping[str, object], kernel_of: Mapping[str, str], m: int, block: int = BLOCK):
        self._layers, self._kernel_of, self._m, self._block = dict(layers), dict(kernel_of), m, block
        self._tracks: dict[str, dict[str, _Reduction]] = {}

    def observe(self, layer: str, output: str, tile: int, running: torch.Tensor, total: torch.Tensor,
                abs_sum: torch.Tensor) -> None:
        sched = self._layers.get(layer)
        if sched is None:
            return
        per_layer = self._tracks.setdefault(layer, {})
        if output not in per_layer:
            kernel = self._kernel_of[output]
            per_layer[output] = _Reduction(sched, kernel, sched.tile_m(kernel) or self._m, self._block)
        per_layer[output].tile(tile, running, total, abs_sum)

    def finals(self, layer: str) -> dict[str, torch.Tensor]:
        return {o: r.final for o, r in self._tracks.get(layer, {}).items()}

    def result(self) -> dict[str, dict[str, dict]]:
        return {layer: {o: r.data for o, r in per.items()} for layer, per in self._tracks.items()}
