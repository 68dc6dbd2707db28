"""Where the tile-order drift accumulates: the heatmap's data, read from the records.

The golden pass records, for every tiled layer of a case, each reduction's drift after every tile
against the global sum of the same partials (``accuracy.tile_drift``; the tiled layer's golden
records carry it as ``tile_drift``). The report shows one case: the largest in the results at the
operator's acceptance scale (else unit, else any), under the operator's default schedule (the
article's for the SwiGLU backward). Nothing is recomputed here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from accuracy.tile_drift import BLOCK as DEFAULT_BLOCK
from contract.declared import present, unless_absent
from contract.records import TileDrift as TileDriftRecord


@dataclass
class TileDrift:
    """Per output: ``drift[t][b]`` = max |acc - S| after tile t in column block b, ``max_bound[t]``,
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


def from_records(idx, schedule: str, operator) -> tuple[TileDrift | None, str]:
    """The heatmap of ``schedule`` (a schedule name) from the records' ``tile_drift``: the largest
    case that has it, at the scale of ``operator``'s acceptance case first. Returns (drift or None, why)."""
    op = operator
    layer = f"tiled:{schedule}"
    found: dict = {}
    for (cid, rec_layer, output, _), rec in idx.goldens.items():
        data = rec.tile_drift
        if rec_layer == layer and isinstance(data, TileDriftRecord) and data.drift:
            found.setdefault(cid, {})[output] = data
    if not found:
        return None, (f"no per-tile drift of the {schedule} schedule in these results (the golden pass records "
                      f"it for every tiled schedule a backend declares; a backend without one gets it)")
    prefer = [op.acceptance_case[-2]] if op.acceptance_case else []
    prefer.append("unit")

    def rank(cid):      # the preferred scales first, in their order; then the largest M
        case = idx.cases[cid]
        return (-prefer.index(case.scale) if case.scale in prefer else -len(prefer), case.m or 0, cid)

    cid = max(found, key=rank)
    case = idx.cases[cid]
    td = TileDrift(cid, schedule)
    for output in (o for o in op.reduction_outputs if o in found[cid]):
        data = found[cid][output]
        td.block = int(unless_absent(data.block, DEFAULT_BLOCK))
        td.tile_rows[output] = present(data.tile_rows)
        for key in ("drift", "max_drift", "mean_drift", "max_bound", "utilisation"):
            getattr(td, key)[output] = unless_absent(getattr(data, key), [])
    return td, f"the largest {case.scale}-scale case in the results with tiles of the {schedule} schedule"
