"""Each head of an operator over heads (``contract.heads``) compared and gated on its own.

A head is an instance of the one-head operator: its goldens, allowances, fitted scale, localized
windows and own-upstream checks are the one-head operator's, so a head's verdict means what a
one-head case's does. One test pools the heads: the fitted scale over all of them
(``pooled_scale``), which sees a bias every head shares with the noise of H heads, as a one-head
case of H times the rows would; judged head by head alone, such a bias could pass each head
(every head's V scaled by 1 + 3e-4 at M = N = 257, D = 128, H = 8 did, under one head's floor of
4.7e-4). An output passes only if it passes in every head and the pooled test. Its record is one
head's: the head failing on its own with the most elements beyond the gate (the lowest index on a
tie), the head leaning most where only the pooled test fails, or where all pass, the head with the
largest error; its metrics say which (``head``, ``heads``, ``failing_heads``, ``heads_scale``) and
every element index in them leads with the head, so an index reads in the [H, ...] tensor the
kernel returned. A case of H heads is about H times as many tests as one head's: its false alarms
are measured over seeds in ``docs/attention.md``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from accuracy.allowance import TAIL_SIGMAS
from accuracy.compare import compare_case
from accuracy.dual import DualVerdict, dual_verdicts
from accuracy.gate import Verdict, gated_verdicts
from accuracy.tolerances import tolerances_for
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


def pooled_scale(gated: list[Mapping]) -> dict | None:
    """The fitted scale pooled over the heads of one output: each head's beta weighted by the inverse
    of its noise variance (the heads' errors are independent), so a bias every head shares is seen
    with the noise of all of them, sigma / sqrt(H) for H alike heads, as a one-head case of H times
    the rows sees it; allowed: TAIL_SIGMAS of that noise plus the same weighting of the heads'
    rounding-bias bounds (a legitimate path's pooled bias is at most that). None where a head has
    no fitted scale or a zero noise (its beta is then exact and its own test decides)."""
    aggs = [m.get("aggregate") for m in gated]
    if len(aggs) < 2 or any(not a or a.get("scale_beta") is None or not a.get("scale_sigma") for a in aggs):
        return None
    weights = [1 / a["scale_sigma"] ** 2 for a in aggs]
    total = sum(weights)
    beta = sum(w * a["scale_beta"] for w, a in zip(weights, aggs)) / total
    bias = sum(w * a["scale_bias"] for w, a in zip(weights, aggs)) / total
    sigma = total ** -0.5
    allowed = TAIL_SIGMAS * sigma + bias
    return {"heads": len(aggs), "beta": beta, "sigma": sigma, "bias": bias, "allowed": allowed,
            "passed": bool(abs(beta) <= allowed)}


def _scale_ratio(metrics: Mapping) -> float:
    agg = metrics.get("aggregate") or {}
    return abs(agg.get("scale_beta") or 0.0) / agg["scale_allowed"] if agg.get("scale_allowed") else 0.0


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
    per_head = []
    for h in range(count):
        if progress is not None:
            progress.stage(f"head {h} of {count}")
        c = compare_case(one, head_of(inputs, h), {b: head_of(o, h) for b, o in outputs.items()}, schedules,
                         served=served, chunk_rows=chunk_rows, diagnose=diagnose, progress=progress)
        per_head.append({**c, "backends": _lead_with_head(c["backends"], h), "goldens": _lead_with_head(c["goldens"], h),
                         "ideal": _lead_with_head(c["ideal"], h)})
    golden = {o: t.golden for o, t in tolerances_for(one).items()}
    for b in per_head[0]["backends"]:
        for o in operator.output_names:
            pooled = pooled_scale([c["backends"][b][o][golden[o]] for c in per_head])
            if pooled is not None:
                for c in per_head:
                    c["backends"][b][o][golden[o]]["heads_scale"] = pooled
    verdicts = [{b: gated_verdicts(one, c["backends"][b], case=head_label(case, h, count), backend=b,
                                   attribution=c["attribution"].get(b)) for b in c["backends"]}
                for h, c in enumerate(per_head)]

    merged = {"backends": {}, "attribution": {}, "goldens": {}, "ideal": {}, "tile_drift": {}}
    shown: dict[str, dict[str, int]] = {}
    chosen_verdicts: dict[str, dict[str, Verdict]] = {}
    for b in per_head[0]["backends"]:
        merged["backends"][b], merged["attribution"][b], shown[b], chosen_verdicts[b] = {}, {}, {}, {}
        for o in operator.output_names:
            gated = [per_head[h]["backends"][b][o][golden[o]] for h in range(count)]
            failing = [h for h in range(count) if verdicts[h][b][o].fails_on_its_own]
            if failing:
                h = max(failing, key=lambda h: (gated[h]["mismatches"], -h))
            elif not verdicts[0][b][o].passed:      # the pooled fitted scale alone: the head leaning most
                h = max(range(count), key=lambda h: (_scale_ratio(gated[h]), -h))
            else:
                h = _largest_error(list(enumerate(gated)))
            v = verdicts[h][b][o]
            if not v.passed:
                which = (f"{len(failing)} of {count} ({', '.join(map(str, failing[:16]))}"
                         f"{', ...' if len(failing) > 16 else ''}); shown: head {h}, the one with the most elements "
                         f"beyond the gate") if failing else (f"none on its own; shown: head {h}, the one whose fitted "
                                                              f"scale is nearest its own limit")
                v = replace(v, message=f"{v.message}\nHeads failing this output: {which}")
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
