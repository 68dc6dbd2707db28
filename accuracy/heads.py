"""Each head of an operator over heads (``contract.heads``) compared and gated on its own.

A head is an instance of the one-head operator: its goldens, allowances, fitted scale, localized
windows and own-upstream checks are the one-head operator's, so a head's verdict means what a
one-head case's does. An output passes only if it passes in every head. Its record is one head's:
the failing head with the most elements beyond the gate (the lowest index on a tie), or where
every head passes, the head with the largest error; its metrics say which (``head``, ``heads``)
and every element index in them leads with the head, so an index reads in the [H, ...] tensor the
kernel returned. A case of H heads is H times as many tests as one head's: the false-alarm rate
per case is up to H times a head's, measured per head count in ``docs/attention.md``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from accuracy.compare import compare_case
from accuracy.dual import DualVerdict, dual_verdicts
from accuracy.gate import Verdict, gated_verdicts
from contract.heads import head_of
from contract.operator import Operator
from contract.schedule import TiledSchedule


@dataclass
class HeadsComparison:
    comparison: dict      # ``compare_case``'s shape, each output's metrics those of the head it shows
    verdicts: dict[str, dict[str, Verdict]]   # backend -> output -> the shown head's verdict
    shown: dict[str, dict[str, int]]          # backend -> output -> the head shown
    per_head: list[dict]                      # each head's ``compare_case`` result
    case: str

    def dual(self, benchmark: str, runs: Mapping | None = None
             ) -> tuple[dict[str, dict[str, DualVerdict]], str | None]:
        """The dual-benchmark verdicts head by head (a backend's head against the benchmark's same
        head); per output the first head whose verdict fails, else the head shown."""
        count = len(self.per_head)
        per = [dual_verdicts(c, benchmark, case=head_label(self.case, h, count), runs=runs)
               for h, c in enumerate(self.per_head)]
        if per[0][1] is not None:
            return {}, per[0][1]
        merged: dict[str, dict[str, DualVerdict]] = {}
        for b, outputs in per[0][0].items():
            merged[b] = {}
            for o in outputs:
                failing = [h for h in range(count) if not per[h][0][b][o].passed]
                merged[b][o] = per[failing[0] if failing else self.shown[b][o]][0][b][o]
        return merged, None


def head_label(case: str, h: int, count: int) -> str:
    """How a message names head ``h`` of a case (0-based, as the kernel's tensors index it)."""
    return f"{case}, head {h} (of {count}; index 0 first)"


def _lead_with_head(value, h: int):
    """``value`` with every element index (a key ``index`` or ``*_index`` holding a list) led by ``h``."""
    if isinstance(value, dict):
        return {k: ([h, *v] if isinstance(k, str) and (k == "index" or k.endswith("_index"))
                    and isinstance(v, (list, tuple))
                    else _lead_with_head(v, h)) for k, v in value.items()}
    if isinstance(value, list):
        return [_lead_with_head(v, h) for v in value]
    return value


def _tagged(metrics: Mapping, h: int, count: int, failing: list[int] | None = None) -> dict:
    """A head's metrics (its indices already led by the head) with the head named."""
    return {**metrics, "head": h, "heads": count, "failing_heads": failing}


def _largest_error(candidates: list[tuple[int, Mapping]]) -> int:
    """The head whose metrics have the largest max |error| (the first on a tie)."""
    return max(candidates, key=lambda hm: (hm[1].get("max_abs_err") or 0.0, -hm[0]))[0]


def compare_heads(operator: Operator, inputs: Mapping[str, torch.Tensor],
                  outputs: Mapping[str, Mapping[str, torch.Tensor]], schedules: Mapping[str, TiledSchedule], *,
                  case: str, served: Mapping[str, TiledSchedule] | None = None, chunk_rows: int | None = None,
                  diagnose: bool = True, progress=None) -> HeadsComparison:
    """``accuracy.compare.compare_case`` and ``accuracy.gate.gated_verdicts`` of the one-head
    operator, head by head (one golden pass per head: the memory of one head's), merged as the
    module says."""
    one = operator.per_head
    count = int(inputs[operator.input_names[0]].shape[0])
    per_head, verdicts = [], []
    for h in range(count):
        if progress is not None:
            progress.stage(f"head {h} of {count}")
        c = compare_case(one, head_of(inputs, h), {b: head_of(o, h) for b, o in outputs.items()}, schedules,
                         served=served, chunk_rows=chunk_rows, diagnose=diagnose, progress=progress)
        c = {**c, "backends": _lead_with_head(c["backends"], h), "goldens": _lead_with_head(c["goldens"], h),
             "ideal": _lead_with_head(c["ideal"], h)}
        per_head.append(c)
        verdicts.append({b: gated_verdicts(one, c["backends"][b], case=head_label(case, h, count), backend=b,
                                           attribution=c["attribution"].get(b)) for b in c["backends"]})

    merged = {"backends": {}, "attribution": {}, "goldens": {}, "ideal": {}, "tile_drift": {}}
    shown: dict[str, dict[str, int]] = {}
    chosen_verdicts: dict[str, dict[str, Verdict]] = {}
    for b in per_head[0]["backends"]:
        merged["backends"][b], merged["attribution"][b], shown[b], chosen_verdicts[b] = {}, {}, {}, {}
        for o in operator.output_names:
            failing = [h for h in range(count) if not verdicts[h][b][o].passed]
            if failing:
                h = max(failing, key=lambda h: (per_head[h]["backends"][b][o][verdicts[h][b][o].golden]["mismatches"], -h))
            else:
                h = _largest_error([(h, per_head[h]["backends"][b][o][verdicts[h][b][o].golden]) for h in range(count)])
            v = verdicts[h][b][o]
            if failing:
                v = replace(v, message=f"{v.message}\nHeads failing this output: {len(failing)} of {count} "
                                       f"({', '.join(map(str, failing[:16]))}{', ...' if len(failing) > 16 else ''}); "
                                       f"shown: head {h}, the one with the most elements beyond the gate")
            shown[b][o], chosen_verdicts[b][o] = h, v
            merged["backends"][b][o] = {g: _tagged(m, h, count, failing) for g, m in per_head[h]["backends"][b][o].items()}
            if b in per_head[h]["attribution"]:
                merged["attribution"][b][o] = per_head[h]["attribution"][b][o]
    for pair in per_head[0]["goldens"]:
        merged["goldens"][pair] = {}
        for o in per_head[0]["goldens"][pair]:
            h = _largest_error([(h, c["goldens"][pair][o]) for h, c in enumerate(per_head)])
            merged["goldens"][pair][o] = _tagged(per_head[h]["goldens"][pair][o], h, count)
            drift = per_head[h]["tile_drift"].get(pair.layer, {})
            if o in drift:     # the tiled layer's per-tile drift, of the head its record shows
                merged["tile_drift"].setdefault(pair.layer, {})[o] = drift[o]
    for o in per_head[0]["ideal"]:
        # the head with the largest reference: a case checks nothing only where every head's is zero
        h = max(range(count), key=lambda h: (per_head[h]["ideal"][o].get("golden_max_abs") or 0.0, -h))
        merged["ideal"][o] = _tagged(per_head[h]["ideal"][o], h, count)
    return HeadsComparison(merged, chosen_verdicts, shown, per_head, case)
