"""Two runs compared record by record: what a change to the framework did to every verdict and
metric. A refactor that must keep the results (an operator moved into its own package, a faster
comparison) shows ``0 records differ``; anything else names the cell and the fields.

Timings and where a run happened (seconds, worker, host, device, the rerun command) are not
results and are left out; everything else, every metric included, must be equal, or with
``float_rtol`` (a change that moves a model quantity by its rounding, e.g. a sum kept in FP32
instead of FP64) every float within that relative difference, while verdicts, counts, indices,
flags and strings stay exactly equal; the largest relative difference per field is reported."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from contract.declared import plain, unless_absent
from contract.records import Metrics, Record, typed

# Fields of a record that describe the run, not its results.
NOT_RESULTS = frozenset({"seconds", "golden_seconds", "backend_seconds", "worker", "host", "run", "rerun",
                         "started", "finished", "device", "golden_device", "served"})


def _results_of(r: Record) -> dict:
    """The fields of ``r`` that are results, as JSON data, each declared field (``None`` where
    absent: a field absent from one record and null in the other is no difference); its metrics
    the same way, one level down, every key ``None`` where it has none (the metrics hold no timings)."""
    out = {k: plain(unless_absent(getattr(r, k))) for k in Record.keys() if k not in NOT_RESULTS}
    m = r.metrics if isinstance(r.metrics, Metrics) else None
    out["metrics"] = {k: None if m is None else plain(unless_absent(getattr(m, k))) for k in Metrics.keys()}
    return out


@dataclass
class RecordDiff:
    only_before: list = field(default_factory=list)   # keys
    only_after: list = field(default_factory=list)
    differing: dict = field(default_factory=dict)     # key -> sorted field names (metrics.<name> inside metrics)
    compared: int = 0
    float_rtol: float | None = None
    largest: dict = field(default_factory=dict)       # field -> largest relative difference within float_rtol

    @property
    def same(self) -> bool:
        return not (self.only_before or self.only_after or self.differing)


def _close(a, b, rtol: float, path: str, largest: dict) -> bool:
    """Equal, except floats within ``rtol`` of each other (the largest such difference per
    ``path`` noted); bools and ints are exact."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rtol, f"{path}.{k}", largest) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, rtol, f"{path}[]", largest) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != b:
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        rel = abs(a - b) / max(abs(a), abs(b))
        if rel > rtol:
            return False
        largest[path] = max(largest.get(path, 0.0), rel)
        return True
    return a == b


def diff_records(before: Iterable[Mapping | Record], after: Iterable[Mapping | Record],
                 float_rtol: float | None = None) -> RecordDiff:
    """``before`` and ``after``: records as loaded or typed (``contract.records.typed``)."""
    a = {r.key: _results_of(r) for r in typed(before, "before")}
    b = {r.key: _results_of(r) for r in typed(after, "after")}
    result = RecordDiff(only_before=sorted(set(a) - set(b), key=str), only_after=sorted(set(b) - set(a), key=str),
                        float_rtol=float_rtol)

    def same(x, y, name: str) -> bool:
        return x == y or (float_rtol is not None and _close(x, y, float_rtol, name, result.largest))

    for key in a.keys() & b.keys():
        result.compared += 1
        ra, rb = a[key], b[key]
        if ra == rb:
            continue
        fields = [k for k in ra if k != "metrics" and not same(ra[k], rb[k], k)]
        ma, mb = ra["metrics"], rb["metrics"]
        fields += [f"metrics.{k}" for k in ma if not same(ma[k], mb[k], f"metrics.{k}")]
        if fields:
            result.differing[key] = sorted(fields)
    return result


def describe(d: RecordDiff, listed: int = 20) -> str:
    within = "" if d.float_rtol is None else f" (floats within a relative {d.float_rtol:g})"
    lines = [f"{d.compared} records compared: {len(d.differing)} differ{within}, {len(d.only_before)} only before, "
             f"{len(d.only_after)} only after"]
    if d.largest:
        lines.append("  floats that moved, largest relative difference: "
                     + ", ".join(f"{k} {v:.1e}" for k, v in sorted(d.largest.items(), key=lambda kv: -kv[1])[:listed]))
    for key, fields in sorted(d.differing.items(), key=str)[:listed]:
        case, backend, output, golden = key
        lines.append(f"  case {case}, backend {backend!r}, output {output}, golden {golden}: {', '.join(fields[:8])}")
    for name, keys in (("only before", d.only_before), ("only after", d.only_after)):
        for case, backend, output, golden in keys[:listed]:
            lines.append(f"  {name}: case {case}, backend {backend!r}, output {output}, golden {golden}")
    return "\n".join(lines)
