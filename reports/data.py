"""The data behind every table and plot of the report, as plain Python (no matplotlib, no HTML).

Everything here reads result records defensively: a record may lack keys, floats
may be the strings "inf", "-inf", "nan" (``accuracy.results.to_json``), the
record format may gain fields. Nothing here raises on a strange record; it is
skipped or shown as missing.

Record kinds (see ``cases.evaluate``):

* backend records: ``backend`` is a registered name or an import path, one per
  case x output x golden (``reference``, ``fp64``, ``faithful``, ``tiled``, and ``own`` for
  db, dw, dx); the gated one (``reference``) has
  ``gated: true`` and the cell's ``status``; a skipped/errored cell has one record
  with ``output == "*"``;
* golden records: ``backend == "golden:<layer>"``, ``golden`` = the layer it is
  compared with (``golden:faithful:...`` vs ``fp64`` is the BF16 storage error,
  ``golden:tiled:<schedule>`` vs ``faithful:...`` the tile-order drift).
"""
from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from accuracy.results import from_json_number
from cases import case_id



def operator_outputs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The operator's outputs in its declared order, and those reduced over M (the drift panels)."""
    import operators     # torch: imported once a report reads records, not by this module's readers
    op = operators.get()
    return op.output_names, op.reduction_outputs

GOLDENS = ("reference", "fp64", "faithful", "tiled")
VERDICT_STATUSES = ("pass", "fail", "expected_failure", "unexpected_pass", "skipped", "error")
FAILING = ("fail", "error", "unexpected_pass")
GOLDEN_PREFIX = "golden:"
# The article's gate (numpy.testing.assert_allclose(rtol=1/128, atol=1e-4)).
SEED_RTOL, SEED_ATOL = 1 / 128, 1e-4

# Baseline "noise": a metric got worse only when it moved by more than this.
NOISE_ULP_P99 = 1.0          # BF16 ULP, absolute increase of the 99th percentile
NOISE_MAX_ABS_FACTOR = 2.0   # max abs error more than doubled (or became non-zero / non-finite)


# --------------------------------------------------------------------------- basics

num = from_json_number   # a record's number as a float: None for missing or unparsable


def finite(value) -> float | None:
    v = num(value)
    return v if v is not None and math.isfinite(v) else None


def metrics_of(rec: Mapping) -> Mapping:
    m = rec.get("metrics") if isinstance(rec, Mapping) else None
    return m if isinstance(m, Mapping) else {}


def is_golden_record(rec: Mapping) -> bool:
    return str(rec.get("backend", "")).startswith(GOLDEN_PREFIX)


def slug(*parts) -> str:
    """An HTML id / file name for any strings (hostile ones included): readable part + hash."""
    text = "|".join(str(p) for p in parts)
    readable = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48]
    return f"{readable}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Case:
    """A case as the report reads it from its records: M, the operator's other dimensions
    (``shape``: (name, size) pairs in the operator's order, e.g. (("K", 512), ("N", 1024))), the
    scale profile and the seed; a size the record does not give is None."""
    id: str
    m: int | None
    shape: tuple[tuple[str, int | None], ...]
    scale: str
    seed: int | None

    @property
    def sizes(self) -> tuple[int | None, ...]:
        return tuple(v for _, v in self.shape)

    @property
    def shape_label(self) -> str:
        return " ".join(f"{d}{v}" for d, v in self.shape) or "?"

    @property
    def sort_key(self):
        big = 1 << 62
        return (self.m if self.m is not None else big, *(v or big for v in self.sizes), self.scale,
                self.seed if self.seed is not None else big, self.id)


_NOT_DIMS = ("m", "scale", "seed", "id", "inputs_file")


def case_of(rec: Mapping) -> Case:
    cid = str(rec.get("case", "?"))
    spec = rec.get("case_spec") if isinstance(rec.get("case_spec"), Mapping) else {}

    def as_int(v):
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    m = as_int(spec.get("m"))
    shape = tuple((str(k).upper(), as_int(v)) for k, v in spec.items() if k not in _NOT_DIMS)
    scale, seed = spec.get("scale"), as_int(spec.get("seed"))
    parsed = case_id.parse(cid)
    if parsed and (m is None or seed is None or not shape or None in (v for _, v in shape)):
        sizes, id_scale, seed = parsed
        m = sizes.get("M")
        shape = tuple((d, v) for d, v in sizes.items() if d != "M")
        scale = scale or id_scale
    return Case(cid, m, shape, str(scale if scale is not None else "?"), seed)


def _order(values: Iterable[str], preferred: Sequence[str]) -> list[str]:
    seen = list(dict.fromkeys(values))
    return [v for v in preferred if v in seen] + sorted(v for v in seen if v not in preferred)


# --------------------------------------------------------------------------- index

@dataclass
class Index:
    """Records grouped for look-up."""
    cases: dict[str, Case]
    backends: list[str]                       # kernels under test, in first-seen order
    outputs: list[str]
    gated: dict[tuple[str, str, str], dict]   # (case, backend, output) -> gated record
    by_golden: dict[tuple[str, str, str, str], dict]   # (case, backend, output, golden) -> record
    cell_status: dict[tuple[str, str], dict]  # (case, backend) -> the "*" record of a skip / error
    goldens: dict[tuple[str, str, str, str], dict]     # (case, golden layer, output, reference) -> record
    n_records: int = 0

    def case_list(self) -> list[Case]:
        return sorted(self.cases.values(), key=lambda c: c.sort_key)


def index(records: Iterable[Mapping]) -> Index:
    cases: dict[str, Case] = {}
    backends: list[str] = []
    outputs: list[str] = []
    gated, by_golden, cell_status, goldens = {}, {}, {}, {}
    n = 0
    for rec in records:
        if not isinstance(rec, Mapping):
            continue
        n += 1
        case = case_of(rec)
        cases.setdefault(case.id, case)
        backend, output, golden = str(rec.get("backend", "?")), str(rec.get("output", "?")), str(rec.get("golden", "?"))
        if is_golden_record(rec):
            goldens[(case.id, backend[len(GOLDEN_PREFIX):], output, golden)] = rec
            continue
        if backend not in backends:
            backends.append(backend)
        if output == "*":
            cell_status[(case.id, backend)] = rec
            continue
        if output not in outputs:
            outputs.append(output)
        by_golden[(case.id, backend, output, golden)] = rec
        if rec.get("gated"):
            gated[(case.id, backend, output)] = rec
    return Index(cases, backends, _order(outputs, operator_outputs()[0]), gated, by_golden, cell_status, goldens, n)


# --------------------------------------------------------------------------- verdict matrix

@dataclass
class Cell:
    status: str               # pass | fail | expected_failure | unexpected_pass | skipped | error | missing
    vacuous: bool = False     # the article's gate would accept an all-zero output here
    atol_capped: bool = False
    golden: str | None = None
    message: str = ""
    reason: str = ""
    anchor: str = ""
    origin: str = ""          # "host H, device D" in a merged run of many machines (accuracy.merge)

    @property
    def css(self) -> str:
        if self.status == "pass" and self.vacuous:
            return "pass-vacuous"
        return self.status.replace("_", "-")

    @property
    def symbol(self) -> str:
        base = {"pass": "✓", "fail": "✗", "expected_failure": "x", "unexpected_pass": "!",
                "skipped": "s", "error": "E", "missing": "·"}.get(self.status, "?")
        return base + ("⚠" if self.vacuous else "")


def row_anchor(case: str, backend: str, output: str) -> str:
    return "r-" + slug(case, backend, output)


def detail_anchor(backend: str, output: str) -> str:
    return "d-" + slug(backend, output)


def origin_of(rec: Mapping) -> str:
    """Where a merged run's record was produced (empty for a local run's)."""
    if rec.get("host") is None and rec.get("device") is None:
        return ""
    return f"host {rec.get('host')}, device {rec.get('device')}"


def verdict_cells(idx: Index) -> dict[tuple[str, str, str], Cell]:
    """(case, backend, output) -> Cell, for every case x backend x output of the matrix."""
    cells = {}
    for case in idx.cases:
        for backend in idx.backends:
            star = idx.cell_status.get((case, backend))
            for output in idx.outputs:
                anchor = row_anchor(case, backend, output)
                rec = idx.gated.get((case, backend, output))
                if rec is not None:
                    status = str(rec.get("status", "missing"))
                    m = metrics_of(rec)
                    vacuous = bool(rec.get("vacuous_seed_gate", m.get("zero_passes_seed_gate", False)))
                    cells[(case, backend, output)] = Cell(
                        status if status in VERDICT_STATUSES else "missing", vacuous,
                        bool(rec.get("atol_capped", m.get("atol_capped", False))), str(rec.get("golden", "")),
                        str(rec.get("message", "")), str(rec.get("expected_reason", "") or ""), anchor,
                        origin_of(rec))
                elif star is not None:
                    status = str(star.get("status", "error"))
                    cells[(case, backend, output)] = Cell(
                        status if status in ("skipped", "error") else "error",
                        message=str(star.get("message", "")), anchor=row_anchor(case, backend, "*"),
                        origin=origin_of(star))
                elif any(k[0] == case and k[1] == backend for k in idx.gated):
                    cells[(case, backend, output)] = Cell("missing", anchor=anchor)
    return cells


def status_counts(cells: Mapping[tuple[str, str, str], Cell], backends: Sequence[str]) -> dict[str, dict[str, int]]:
    """backend -> css class -> count (plus "total")."""
    counts: dict[str, dict[str, int]] = {b: defaultdict(int) for b in backends}
    for (_, backend, _), cell in cells.items():
        counts[backend][cell.css] += 1
        counts[backend]["total"] += 1
    return {b: dict(c) for b, c in counts.items()}


# --------------------------------------------------------------------------- per-output details

DETAIL_METRICS = ("ulp_p50", "ulp_p99", "ulp_max", "max_abs_err", "max_rel_err", "mismatch_fraction",
                  "bound_max_utilisation", "golden_max_abs", "detection_floor")
AGGREGATE_METRICS = ("scale_beta", "scale_allowed")


def _detail_values(m: Mapping) -> dict:
    """The detail table's numbers of one record: its metrics and, where the gate made them, the
    fitted scale and its allowed band."""
    agg = m.get("aggregate") if isinstance(m.get("aggregate"), Mapping) else {}
    return {**{k: num(m.get(k)) for k in DETAIL_METRICS}, **{k: num(agg.get(k)) for k in AGGREGATE_METRICS}}


@dataclass
class DetailRow:
    case: Case
    status: str
    anchor: str
    golden: str
    values: dict                      # metric -> float | None (gated golden)
    fp64: dict                        # the same metrics vs FP64
    worst: list                       # worst elements of the gated record
    nonfinite: int = 0
    message: str = ""


@dataclass
class Detail:
    backend: str
    output: str
    anchor: str
    rows: list[DetailRow] = field(default_factory=list)
    hist: dict = field(default_factory=dict)    # golden -> {"ulp": counts, "log10_abs_err": counts, "exact": n}

    @property
    def worst_rows(self) -> list[DetailRow]:
        """Failing rows first, then the largest ULP distance: where to look first."""
        def key(r):
            v = r.values.get("ulp_max")
            return (r.status not in FAILING, -(v if v is not None and not math.isnan(v) else math.inf))
        return sorted((r for r in self.rows if r.worst), key=key)


def _add(acc: list | None, counts) -> list | None:
    if not isinstance(counts, list) or not all(isinstance(c, (int, float)) for c in counts):
        return acc
    if acc is None:
        return [int(c) for c in counts]
    if len(acc) != len(counts):
        return acc           # a record from another histogram layout: not mixable
    return [a + int(c) for a, c in zip(acc, counts)]


def details(idx: Index) -> list[Detail]:
    out = []
    for backend in idx.backends:
        for output in idx.outputs:
            d = Detail(backend, output, detail_anchor(backend, output))
            for case in idx.case_list():
                rec = idx.gated.get((case.id, backend, output))
                hist_recs = {g: idx.by_golden.get((case.id, backend, output, g)) for g in GOLDENS}
                for g, hr in hist_recs.items():
                    if hr is None:
                        continue
                    m = metrics_of(hr)
                    h = d.hist.setdefault(g, {"ulp": None, "log10_abs_err": None, "exact": 0, "cases": 0})
                    h["ulp"] = _add(h["ulp"], m.get("ulp_hist"))
                    h["log10_abs_err"] = _add(h["log10_abs_err"], m.get("log10_abs_err_hist"))
                    h["exact"] += int(num(m.get("exact_elements")) or 0)
                    h["cases"] += 1
                if rec is None:
                    continue
                m = metrics_of(rec)
                fp = metrics_of(hist_recs.get("fp64") or {})
                worst = [w for w in (m.get("worst") or []) if isinstance(w, Mapping)]
                d.rows.append(DetailRow(
                    case, str(rec.get("status", "?")), row_anchor(case.id, backend, output), str(rec.get("golden", "")),
                    _detail_values(m), _detail_values(fp), worst,
                    int(num(m.get("nonfinite_disagreements")) or 0), str(rec.get("message", ""))))
            if d.rows or d.hist:
                out.append(d)
    return out


# --------------------------------------------------------------------------- attribution

SOURCES = ("storage", "tile_order", "kernel")


@dataclass
class AttributionRow:
    backend: str
    output: str
    cases: int = 0
    max_part: dict = field(default_factory=dict)       # source -> max over cases of its max abs error
    mean_share: dict = field(default_factory=dict)     # source -> mean over cases of part / sum of parts
    dominant: dict = field(default_factory=dict)       # source -> number of cases it dominates
    max_total_vs_fp64: float | None = None             # max over cases of the kernel's max abs error vs FP64
    nonfinite_cases: int = 0                           # cases with NaN/Inf disagreements in tile order or kernel


def attribution_split(idx: Index) -> list[AttributionRow]:
    """Per backend x output, how the kernel's error against FP64 splits into BF16 storage
    (faithful - fp64), tile order (tiled - faithful) and the kernel (kernel - tiled). Each
    part is the max abs difference of its pair; a case's shares are part / sum of the
    three parts (the triangle inequality makes their sum an upper bound of kernel - fp64)."""
    rows = []
    for backend in idx.backends:
        for output in idx.outputs:
            row = AttributionRow(backend, output)
            shares = defaultdict(list)
            for case in idx.case_list():
                rec = idx.gated.get((case.id, backend, output))
                if rec is None:
                    rec = next((idx.by_golden[k] for g in GOLDENS
                                if (k := (case.id, backend, output, g)) in idx.by_golden), None)
                att = rec.get("attribution") if rec is not None else None
                if not isinstance(att, Mapping):
                    continue
                parts = {s: finite(att.get(s)) for s in SOURCES}
                if all(v is None for v in parts.values()):
                    continue
                row.cases += 1
                for s, v in parts.items():
                    if v is not None:
                        row.max_part[s] = max(row.max_part.get(s, 0.0), v)
                total = sum(v for v in parts.values() if v is not None)
                if total > 0:
                    for s in SOURCES:
                        shares[s].append((parts[s] or 0.0) / total)
                dom = att.get("dominant")
                if dom in SOURCES:
                    row.dominant[dom] = row.dominant.get(dom, 0) + 1
                nf = att.get("nonfinite")
                if isinstance(nf, Mapping) and any((num(v) or 0) > 0 for v in nf.values()):
                    row.nonfinite_cases += 1
                fp = finite(metrics_of(idx.by_golden.get((case.id, backend, output, "fp64")) or {}).get("max_abs_err"))
                if fp is not None:
                    row.max_total_vs_fp64 = max(row.max_total_vs_fp64 or 0.0, fp)
            row.mean_share = {s: (sum(v) / len(v) if v else 0.0) for s, v in ((s, shares[s]) for s in SOURCES)}
            if row.cases:
                rows.append(row)
    return rows


# --------------------------------------------------------------------------- gate vacuity

@dataclass
class VacuityRow:
    output: str
    cases: int = 0
    vacuous: list = field(default_factory=list)     # [(Case, max |golden|)]
    checked: list = field(default_factory=list)     # [(Case, max |golden|)]


def vacuity(idx: Index) -> tuple[list[VacuityRow], dict[tuple[str, str], tuple[bool, float | None]]]:
    """Where the article's gate (rtol 1/128, atol 1e-4) accepts an all-zero output: every
    |golden| <= atol / (1 - rtol). Read from the gated records (``vacuous_seed_gate``, else
    ``zero_passes_seed_gate``), or from the golden records when a case has no backend record.
    Returns one row per output and the (case, output) -> (vacuous, max |golden|) table."""
    table: dict[tuple[str, str], tuple[bool, float | None]] = {}
    for (case, backend, output), rec in idx.gated.items():
        if (case, output) in table:
            continue
        m = metrics_of(rec)
        v = rec.get("vacuous_seed_gate", m.get("zero_passes_seed_gate"))
        if v is None:
            continue
        table[(case, output)] = (bool(v), num(m.get("golden_max_abs")))
    for (case, layer, output, ref), rec in idx.goldens.items():
        # golden records: the reference layer's magnitude; use them only where no backend record says
        if (case, output) in table or ref != "fp64":
            continue
        m = metrics_of(rec)
        if "zero_passes_seed_gate" in m:
            table[(case, output)] = (bool(m["zero_passes_seed_gate"]), num(m.get("golden_max_abs")))
    rows = []
    for output in idx.outputs:
        row = VacuityRow(output)
        for case in idx.case_list():
            if (case.id, output) not in table:
                continue
            vac, mx = table[(case.id, output)]
            row.cases += 1
            (row.vacuous if vac else row.checked).append((case, mx))
        rows.append(row)
    return rows, table


# --------------------------------------------------------------------------- tile-vs-global drift

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
        outputs = operator_outputs()[1]
    groups: dict[tuple, dict[tuple, dict]] = defaultdict(lambda: defaultdict(dict))
    meta: dict[tuple, dict] = {}
    flags: dict[tuple, dict[tuple, dict]] = defaultdict(lambda: defaultdict(lambda: {"nonfinite": set(), "zeros": set()}))

    def scaled(m, name):
        v = finite(m.get(name))
        if v is None or not normalise:
            return v
        rms = finite(m.get("golden_rms"))
        return v / rms if rms else None

    def add(key, skey, case, m):
        v = scaled(m, "max_abs_err")
        nf = num(m.get("nonfinite_disagreements")) or 0
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
    order = operator_outputs()[0]
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


# --------------------------------------------------------------------------- baseline diff

@dataclass
class Change:
    case: str
    backend: str
    output: str
    golden: str
    before: str
    after: str
    detail: str = ""
    anchor: str = ""


@dataclass
class BaselineDiff:
    new_failures: list[Change] = field(default_factory=list)
    fixed: list[Change] = field(default_factory=list)
    worse: list[Change] = field(default_factory=list)
    better: list[Change] = field(default_factory=list)
    added_cells: int = 0
    removed_cells: int = 0
    compared_cells: int = 0


def _failing(status: str | None) -> bool:
    return status in FAILING


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def _worse(before: Mapping, after: Mapping) -> list[str]:
    """Why ``after`` is worse than ``before`` beyond noise (empty if it is not)."""
    reasons = []
    p_b, p_a = num(before.get("ulp_p99")), num(after.get("ulp_p99"))
    if p_b is not None and p_a is not None and p_a - p_b > NOISE_ULP_P99:
        reasons.append(f"ULP p99 {_fmt(p_b)} -> {_fmt(p_a)} (+{p_a - p_b:.3g} > {NOISE_ULP_P99:g})")
    e_b, e_a = num(before.get("max_abs_err")), num(after.get("max_abs_err"))
    if e_b is not None and e_a is not None:
        if math.isfinite(e_b) and not math.isfinite(e_a):
            reasons.append(f"max abs err {_fmt(e_b)} -> {_fmt(e_a)}")
        elif math.isfinite(e_a) and e_a > NOISE_MAX_ABS_FACTOR * e_b and e_a > 0:
            reasons.append(f"max abs err {_fmt(e_b)} -> {_fmt(e_a)} (x{e_a / e_b:.3g})" if e_b > 0
                           else f"max abs err 0 -> {_fmt(e_a)}")
    nf_b, nf_a = num(before.get("nonfinite_disagreements")) or 0, num(after.get("nonfinite_disagreements")) or 0
    if nf_a > nf_b:
        reasons.append(f"NaN/Inf disagreements {nf_b:g} -> {nf_a:g}")
    return reasons


def baseline_diff(current: Index, baseline: Index) -> BaselineDiff:
    """Cells (case x backend x output) whose verdict changed, and records whose metrics got worse
    beyond noise: ULP p99 up by more than NOISE_ULP_P99, or max abs error up by more than
    NOISE_MAX_ABS_FACTOR (or from 0 / finite to non-zero / non-finite), or new NaN/Inf disagreements."""
    diff = BaselineDiff()
    cur, base = verdict_cells(current), verdict_cells(baseline)
    diff.added_cells = len(set(cur) - set(base))
    diff.removed_cells = len(set(base) - set(cur))
    for key in sorted(set(cur) & set(base)):
        diff.compared_cells += 1
        a, b = cur[key], base[key]
        change = Change(*key, a.golden or b.golden or "", b.status, a.status, anchor=a.anchor)
        if a.status in ("fail", "error") and b.status not in ("fail", "error"):
            change.detail = a.message.splitlines()[0] if a.message else ""
            diff.new_failures.append(change)
        elif (b.status in ("fail", "error", "expected_failure") and a.status in ("pass", "unexpected_pass")):
            diff.fixed.append(change)
    for key in sorted(set(current.by_golden) & set(baseline.by_golden)):
        m_a, m_b = metrics_of(current.by_golden[key]), metrics_of(baseline.by_golden[key])
        reasons = _worse(m_b, m_a)
        case, backend, output, golden = key
        if reasons:
            diff.worse.append(Change(case, backend, output, golden, "", "", "; ".join(reasons),
                                     row_anchor(case, backend, output)))
        elif _worse(m_a, m_b):
            diff.better.append(Change(case, backend, output, golden, "", "", "; ".join(_worse(m_a, m_b)),
                                      row_anchor(case, backend, output)))
    return diff


@dataclass(frozen=True)
class PlatformSummary:
    """The run manifest as the page shows it: one header line, the measured facts, every field flat."""
    line: str
    facts: list[tuple[str, str]]
    fields: list[tuple[str, str]]
    emulation: str | None
    hosts: list = field(default_factory=list)     # a merged run's machines (accuracy.merge)


def _flatten(obj, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(obj, Mapping):
        return [kv for k, v in obj.items() for kv in _flatten(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), "-" if obj is None else str(obj).lower() if isinstance(obj, bool) else str(obj))]


def platform_summary(manifest: Mapping | None) -> PlatformSummary | None:
    if not isinstance(manifest, Mapping):
        return None
    fw = manifest.get("framework") or {}
    cpu = manifest.get("cpu") or {}
    versions = manifest.get("versions") or {}
    accel = manifest.get("cuda") or manifest.get("npu")
    parts = [f"device {manifest.get('device', '?')}",
             f"CPU {cpu.get('model') or '?'} ({cpu.get('torch_cpu_capability') or '?'})",
             f"torch {versions.get('torch') or '?'}"]
    if isinstance(accel, Mapping):
        parts.append(" ".join(str(accel.get(k)) for k in ("device", "soc", "compute_capability", "cuda", "cann")
                              if accel.get(k)))
    commit = fw.get("commit")
    parts.append(f"commit {commit[:10] if commit else '?'}{' (modified)' if fw.get('dirty') else ''}")
    facts = [(k, _flatten(v)[0][1]) for k, v in (manifest.get("facts") or {}).items()]
    hosts = [{"host": h.get("host"), "device": h.get("device"), "shard": h.get("shard"),
              "cpu": (h.get("cpu") or {}).get("model"), "capability": (h.get("cpu") or {}).get("torch_cpu_capability"),
              "facts": ", ".join(f"{k}={v}" for k, v in (h.get("facts") or {}).items()), "source": h.get("source")}
             for h in manifest.get("hosts") or [] if isinstance(h, Mapping)]
    return PlatformSummary(" · ".join(parts), facts, _flatten({k: v for k, v in manifest.items() if k != "hosts"}),
                           manifest.get("emulation"), hosts)


# --------------------------------------------------------------------------- dual benchmark

@dataclass
class DualRow:
    case: Case
    backend: str
    benchmark: str
    ratios: dict
    ulp_share: float | None
    passed: bool
    failed: list
    message: str
    vacuous: bool = False     # an all-zero output would pass here (msprobe's absolute thresholds)


@dataclass
class DualTable:
    output: str
    rows: list[DualRow]
    missing: list[str]       # cases without a dual verdict, and why


def dual_tables(idx: Index) -> list[DualTable]:
    """Per output: every (case, backend) with its dual-benchmark ratios (``accuracy.dual``)."""
    tables = []
    for output in idx.outputs:
        rows, missing = [], []
        for case in idx.case_list():
            for backend in idx.backends:
                rec = idx.gated.get((case.id, backend, output))
                if rec is None:
                    continue
                dual = rec.get("dual")
                if not dual:
                    if rec.get("dual_missing") and rec["dual_missing"] not in missing:
                        missing.append(rec["dual_missing"])
                    continue
                rows.append(DualRow(case, backend, str(dual.get("benchmark")), dict(dual.get("ratios") or {}),
                                    dual.get("ulp_share"), bool(dual.get("passed")), list(dual.get("failed") or []),
                                    str(dual.get("message", "")), bool(dual.get("vacuous"))))
        if rows or missing:
            tables.append(DualTable(output, rows, missing))
    return tables
