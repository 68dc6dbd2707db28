"""Result records as the report reads them: numbers, cases, and the index every table is built from.

The records are read once, as ``contract.records.Record`` (``index``): a key the schema does not
declare is refused there; a record that is not one, or lacks a key that identifies it, is
skipped. Fields are read defensively: a record may lack keys (``ABSENT``, an older file), floats
may be the strings "inf", "-inf", "nan" (``runs.results.to_json``); nothing raises on a strange
value, it is shown as missing."""
from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from contract.records import FAILING, GOLDEN_PREFIX, GOLDENS, VERDICT_STATUSES  # noqa: F401  (the data layer's names)
from contract.records import Metrics, Record, typed
from contract.records import parse as parse_case_id
from runs.results import from_json_number


def operator_outputs(operator=None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The outputs of ``operator`` (a ``contract.operator.Operator``; default: the registry's default
    operator, the SwiGLU backward) in its declared order, and those reduced over M (the drift panels)."""
    if operator is None:
        import operators  # torch: imported once a report reads records, not by this module's readers
        operator = operators.get()
    return operator.output_names, operator.reduction_outputs

# The article's gate (numpy.testing.assert_allclose(rtol=1/128, atol=1e-4)).
ACCEPTANCE_RTOL, ACCEPTANCE_ATOL = 1 / 128, 1e-4

# Baseline "noise": a metric got worse only when it moved by more than this.
NOISE_ULP_P99 = 1.0          # BF16 ULP, absolute increase of the 99th percentile
NOISE_MAX_ABS_FACTOR = 2.0   # max abs error more than doubled (or became non-zero / non-finite)


# --------------------------------------------------------------------------- basics

num = from_json_number   # a record's number as a float: None for missing or unparsable


def finite(value) -> float | None:
    v = num(value)
    return v if v is not None and math.isfinite(v) else None


NO_METRICS = Metrics()    # every field absent: what a record without metrics reads as


def metrics_of(rec: Record | None) -> Metrics:
    m = rec.metrics if rec is not None else None
    return m if isinstance(m, Metrics) else NO_METRICS


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


def case_of(rec: Record) -> Case:
    cid = str(rec.case)
    spec = rec.case_spec if isinstance(rec.case_spec, Mapping) else {}

    def as_int(v):
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    m = as_int(spec.get("m"))
    shape = tuple((str(k).upper(), as_int(v)) for k, v in spec.items() if k not in _NOT_DIMS)
    scale, seed = spec.get("scale"), as_int(spec.get("seed"))
    parsed = parse_case_id(cid)
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
    gated: dict[tuple[str, str, str], Record]   # (case, backend, output) -> gated record
    by_golden: dict[tuple[str, str, str, str], Record]   # (case, backend, output, golden) -> record
    cell_status: dict[tuple[str, str], Record]  # (case, backend) -> the "*" record of a skip / error
    goldens: dict[tuple[str, str, str, str], Record]     # (case, golden layer, output, reference) -> record
    n_records: int = 0
    reductions: tuple[str, ...] = ()          # the operator's outputs reduced over M (the drift panels)

    def case_list(self) -> list[Case]:
        return sorted(self.cases.values(), key=lambda c: c.sort_key)


def index(records: Iterable[Mapping | Record], operator=None) -> Index:
    """``records``: as loaded (mappings) or already typed; ``operator``: whose outputs the records
    hold (their order, which are reductions); default the registry's default operator."""
    order, reductions = operator_outputs(operator)
    cases: dict[str, Case] = {}
    backends: list[str] = []
    outputs: list[str] = []
    gated, by_golden, cell_status, goldens = {}, {}, {}, {}
    n = 0
    for rec in typed(records):
        n += 1
        case = case_of(rec)
        cases.setdefault(case.id, case)
        backend, output, golden = str(rec.backend), str(rec.output), str(rec.golden)
        if rec.is_golden:
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
        if rec.gated:
            gated[(case.id, backend, output)] = rec
    return Index(cases, backends, _order(outputs, order), gated, by_golden, cell_status, goldens, n, tuple(reductions))
