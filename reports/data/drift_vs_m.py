"""The drift panels: each reduction's error against M, per shape and scale profile."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from reports.data.records import Index, finite, metrics_of, num


@dataclass
class Series:
    label: str
    kind: str                  # "tile_order" | "storage" | "backend" | "bound"
    source: str                # golden layer or backend name
    reference: str             # "global" (the faithful golden) | "fp64"
    points: list = field(default_factory=list)      # [(M, value)] sorted by M, max over seeds
    nonfinite: list = field(default_factory=list)   # M values where NaN/Inf disagreed
    zeros: list = field(default_factory=list)       # M values where the error was exactly 0


@dataclass
class DriftPanel:
    output: str
    shape: tuple            # the case's other dimensions, ``Case.shape``
    scale: str
    series: list[Series] = field(default_factory=list)


def _collect(points: dict, m: int | None, value: float | None) -> None:
    if m is None or value is None:
        return
    points[m] = max(points.get(m, value), value)


def drift_panels(idx: Index, outputs: Sequence[str] | None = None, *, normalise: bool = True) -> list[DriftPanel]:
    """The error of each tiled golden (vs the global-sum faithful golden), of the faithful golden
    (vs FP64), and of every backend (vs its faithful golden and vs FP64) for the reductions over M,
    as series over M per output x (K, N) x scale; values are max abs errors, max over seeds.
    ``bound`` series: the mean per-element rounding-model bound vs FP64 of each backend's schedule.
    ``normalise``: divide each value by its record's rms(golden), so that the input scale (which
    changes with M in the seed profile, randn/sqrt(M)) does not hide the growth with the tile count.
    ``outputs``: the operator's reductions over M unless given."""
    if outputs is None:
        outputs = idx.reductions
    groups: dict[tuple, dict[tuple, dict]] = defaultdict(lambda: defaultdict(dict))
    meta: dict[tuple, dict] = {}
    flags: dict[tuple, dict[tuple, dict]] = defaultdict(lambda: defaultdict(lambda: {"nonfinite": set(), "zeros": set()}))

    def scaled(m, name):
        v = finite(getattr(m, name))
        if v is None or not normalise:
            return v
        rms = finite(m.golden_rms)
        return v / rms if rms else None

    def add(key, skey, case, m):
        v = scaled(m, "max_abs_err")
        nf = num(m.nonfinite_disagreements) or 0
        if nf > 0:
            flags[key][skey]["nonfinite"].add(case.m)
        if v == 0.0 and nf == 0:
            flags[key][skey]["zeros"].add(case.m)
            return
        _collect(groups[key][skey], case.m, v if v and v > 0 else None)

    for (cid, layer, output, ref), rec in idx.goldens.items():
        if output not in outputs:
            continue
        case = idx.cases[cid]
        key = (output, case.shape, case.scale)
        m = metrics_of(rec)
        if layer.startswith("tiled:") and ref.startswith("faithful"):
            skey = ("tile_order", layer, "global")
        elif layer.startswith("faithful") and ref == "fp64":
            skey = ("storage", layer, "fp64")
        else:
            continue
        meta.setdefault(skey, {"label": f"{layer} vs {ref}"})
        add(key, skey, case, m)
    for (cid, backend, output, golden), rec in idx.by_golden.items():
        if output not in outputs or golden not in ("faithful", "fp64"):
            continue
        case = idx.cases[cid]
        key = (output, case.shape, case.scale)
        m = metrics_of(rec)
        ref = "global" if golden == "faithful" else "fp64"
        skey = ("backend", backend, ref)
        meta.setdefault(skey, {"label": f"{backend} vs {'faithful (global sum)' if ref == 'global' else 'FP64'}"})
        add(key, skey, case, m)
        if golden == "fp64":
            bkey = ("bound", backend, "fp64")
            meta.setdefault(bkey, {"label": f"rounding-model bound vs FP64 of {backend} (mean over elements)"})
            _collect(groups[key][bkey], case.m, scaled(m, "bound_mean"))

    kind_order = {"tile_order": 0, "storage": 1, "backend": 2, "bound": 3}
    panels = []
    order = idx.outputs
    for key in sorted(set(groups) | set(flags), key=lambda k: (order.index(k[0]) if k[0] in order else 99,
                                                               tuple(v or 0 for _, v in k[1]), k[2])):
        output, shape, scale = key
        panel = DriftPanel(output, shape, scale)
        skeys = set(groups.get(key, {})) | set(flags.get(key, {}))
        for skey in sorted(skeys, key=lambda s: (kind_order[s[0]], s[1], s[2])):
            kind, source, ref = skey
            pts = groups.get(key, {}).get(skey, {})
            fl = flags.get(key, {}).get(skey, {"nonfinite": set(), "zeros": set()})
            panel.series.append(Series(meta[skey]["label"], kind, source, ref, sorted(pts.items()),
                                       sorted(fl["nonfinite"]), sorted(fl["zeros"] - set(pts))))
        panels.append(panel)
    return panels
