"""The records' vocabulary, shared by the writers (``cases``) and the readers (``reports``, the
launcher): kept free of torch and of the framework.

A case id (``cases.spec.CaseSpec.id``), for readers that get only the id (a test id, a record
without its spec): each of the operator's dimensions as its name and size (``M2048-K96-N200``),
then the scale profile and the seed (``-unit-s0``)."""
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, make_dataclass

from contract import metric_table
from contract.declared import ABSENT, READABLE_SCHEMAS, SCHEMA_VERSION, Declared, RecordSchemaError  # noqa: F401

# the golden layers an output is compared with; "reference" is the gated one
GOLDENS = ("reference", "fp64", "faithful", "tiled")
VERDICT_STATUSES = ("pass", "fail", "expected_failure", "unexpected_pass", "skipped", "error")
FAILING = ("fail", "error", "unexpected_pass")
# the backend field of a record of two goldens compared with each other starts with this
GOLDEN_PREFIX = "golden:"

# a dimension's name is upper-case letters; a scale profile has no '-'
CASE_ID_PATTERN = r"(?:[A-Z]+\d+-)+[^-]+-s\d+"
CASE_ID = re.compile(r"^(?P<sizes>(?:[A-Z]+\d+-)+)(?P<scale>[^-]+)-s(?P<seed>\d+)$")
_SIZE = re.compile(r"([A-Z]+)(\d+)-")


def case_id(sizes: Mapping[str, int], scale: str, seed: int) -> str:
    """A case's id from its dimension sizes by name (in the operator's order), scale and seed:
    ``M2048-K96-N200-unit-s0``; ``parse`` reads it back."""
    return "-".join(f"{d}{v}" for d, v in sizes.items()) + f"-{scale}-s{seed}"


def parse(case_id: str) -> tuple[dict[str, int], str, int] | None:
    """(dimension sizes by name, scale, seed) of a case id; None if it is not one."""
    match = CASE_ID.match(case_id)
    if match is None:
        return None
    sizes = {name: int(v) for name, v in _SIZE.findall(match["sizes"])}
    return sizes, match["scale"], int(match["seed"])


@dataclass(frozen=True)
class NonfiniteCounts(Declared):
    """NaN and Inf, actual against golden (``metrics.nonfinite``)."""
    nan_both: object = ABSENT
    nan_actual_only: object = ABSENT
    nan_expected_only: object = ABSENT
    inf_match: object = ABSENT
    inf_mismatch: object = ABSENT


def _metrics_record(name: str, table: tuple, doc: str, nested: Mapping[str, type] | None = None) -> type:
    """A declared record whose fields are ``table``'s keys (``contract.metric_table``), in its order."""
    cls = make_dataclass(name, [(m.key, object, field(default=ABSENT)) for m in table], bases=(Declared,),
                         frozen=True, namespace={"NESTED": dict(nested or {}), "__doc__": doc})
    cls.__module__ = __name__
    return cls


Aggregate = _metrics_record("Aggregate", metric_table.AGGREGATE, """The aggregate error model
    (``accuracy.metrics.ErrorStats._aggregate_result``): the fitted scale and its allowance, errors
    toward and away from zero, up and down; None where the direction was not counted. Its keys:
    ``contract.metric_table.AGGREGATE``.""")

DualMetrics = _metrics_record("DualMetrics", metric_table.DUAL, """msprobe's benchmark-standard metrics
    of one output (``ErrorStats._dual_result``). Its keys: ``contract.metric_table.DUAL``.""")

Metrics = _metrics_record("Metrics", metric_table.METRICS, """An output against one golden
    (``accuracy.metrics.ErrorStats.finalize``). The ``dual_only`` form (the benchmark's own metrics)
    carries only shape, numel, the golden's size, the non-finite counts and ``dual``. Its keys, what
    each means and the form that carries it: ``contract.metric_table.METRICS``.""",
                          {"nonfinite": NonfiniteCounts, "aggregate": Aggregate, "dual": DualMetrics})


@dataclass(frozen=True)
class AttributionNonfinite(Declared):
    """Non-finite disagreements of the tile order and of the kernel."""
    tile_order: object = ABSENT
    kernel: object = ABSENT


@dataclass(frozen=True)
class Attribution(Declared):
    """An output's error by source (``accuracy.compare.attribution``): the max abs difference due
    to storage, tile order and the kernel, and which dominates."""
    NESTED = {"nonfinite": AttributionNonfinite}
    storage: object = ABSENT
    tile_order: object = ABSENT
    kernel: object = ABSENT
    kernel_ulp_max: object = ABSENT
    nonfinite: object = ABSENT             # AttributionNonfinite
    dominant: object = ABSENT
    faithful_to_schedule: object = ABSENT


@dataclass(frozen=True)
class DualVerdict(Declared):
    """The dual-benchmark verdict of a gated record (``accuracy.dual``)."""
    benchmark: object = ABSENT
    passed: object = ABSENT
    ratios: object = ABSENT                # ratio name -> the kernel's error over the benchmark's
    failed: object = ABSENT
    ulp_share: object = ABSENT
    ulp_share_benchmark: object = ABSENT
    ulp_rule_passed: object = ABSENT
    nonfinite_consistent: object = ABSENT
    vacuous: object = ABSENT
    message: object = ABSENT


@dataclass(frozen=True)
class Determinism(Declared):
    """--repeats: the runs of one backend compared bit for bit (``accuracy.determinism``), with
    the spread of this output."""
    repeats: object = ABSENT
    bit_identical: object = ABSENT
    differing_repeats: object = ABSENT
    numel: object = ABSENT
    differing_elements: object = ABSENT
    differing_fraction: object = ABSENT
    max_abs_spread: object = ABSENT
    max_ulp_spread: object = ABSENT
    nan_mismatch: object = ABSENT
    first_differing_index: object = ABSENT
    worst_ulp_index: object = ABSENT
    worst_ulp_values: object = ABSENT
    note: object = ABSENT


@dataclass(frozen=True)
class TileDrift(Declared):
    """A tiled golden's per-tile drift against its global sum (``accuracy.tile_drift``)."""
    tile_rows: object = ABSENT
    block: object = ABSENT
    drift: object = ABSENT
    max_drift: object = ABSENT
    mean_drift: object = ABSENT
    max_bound: object = ABSENT
    utilisation: object = ABSENT


@dataclass(frozen=True)
class Record(Declared):
    """One result record, as written to the results file.

    A backend's output at a case against one golden layer (``golden`` ``"*"`` and ``output``
    ``"*"`` for a cell that did not run: skipped, crashed, timed out); or two goldens compared
    with each other (``backend`` ``GOLDEN_PREFIX + layer``, ``golden`` the layer it is measured
    against). Every other key is carried only where it applies."""
    NESTED = {"metrics": Metrics, "attribution": Attribution, "determinism": Determinism, "dual": DualVerdict,
              "tile_drift": TileDrift}
    case: str
    backend: str
    output: str
    golden: str
    status: str                        # VERDICT_STATUSES, or "info" for an ungated golden's record
    case_spec: object = ABSENT         # the case as data (``CaseSpec.asdict``)
    schedule: object = ABSENT          # the schedule name its tiled golden replays (None: none)
    backend_output: object = ABSENT    # what the backend printed during its call, capped
    served: object = ABSENT            # not called: the golden layer whose values are its outputs
    message: object = ABSENT           # the verdict's message (gated) or why the cell did not run
    seconds: object = ABSENT
    gated: object = ABSENT             # True: the record the cell's verdict reads
    metrics: object = ABSENT           # Metrics (``accuracy.metrics.ErrorStats.finalize``), or None
    attribution: object = ABSENT       # Attribution: error by source: storage, tile order, kernel
    determinism: object = ABSENT       # Determinism: --repeats: bit-identical runs, spreads
    gate: object = ABSENT              # absolute | dual | both
    absolute_status: object = ABSENT   # the operator's criterion's verdict, whatever gated the cell
    checks_nothing: object = ABSENT    # why no kernel can fail at this case
    dual: object = ABSENT              # DualVerdict: the dual-benchmark verdict, or None
    dual_missing: object = ABSENT      # why there is none
    vacuous_seed_gate: object = ABSENT  # would the acceptance gate pass all zeros here?
    atol_capped: object = ABSENT
    expected_reason: object = ABSENT   # a known failure's entry: its reason and source
    expected_source: object = ABSENT
    expected_exceeded: object = ABSENT  # by how much a known failure exceeded its bound
    tile_drift: object = ABSENT        # TileDrift: a tiled golden's per-tile drift against its global sum
    rerun: object = ABSENT             # one command that reruns the cell alone
    device: object = ABSENT            # where the inputs and the backend ran
    golden_device: object = ABSENT     # where the goldens ran
    host: object = ABSENT              # a merged run's machine and run folder
    run: object = ABSENT

    @classmethod
    def from_json(cls, data: Mapping, where: str = "record") -> "Record":
        """The record of a results file's mapping: its sub-records typed; a key this schema does not
        declare, here or in a sub-record, is refused, naming it and the schema version."""
        if isinstance(data, Mapping):
            missing = [k for k in REQUIRED if k not in data]
            if missing:
                cls.refuse_undeclared(data, where)
                raise RecordSchemaError(f"{where} lacks {missing} (results schema {SCHEMA_VERSION})")
        return super().from_json(data, where)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What identifies it in a run: case, backend, output, golden."""
        return self.case, self.backend, self.output, self.golden

    @property
    def is_golden(self) -> bool:
        """Two goldens compared with each other, not a backend's output."""
        return str(self.backend).startswith(GOLDEN_PREFIX)


FIELDS = frozenset(Record.keys())
REQUIRED = ("case", "backend", "output", "golden", "status")


def checked(records: list, where: str) -> list:
    """``records`` (as written), each mapping refused if it, or a sub-record of it, carries a key the
    schema does not declare; returned as they are (a reader tolerates a record that lacks keys, or
    one that is not a mapping: ``typed`` skips them)."""
    for i, r in enumerate(records):
        if isinstance(r, Mapping):
            Record.check(r, f"{where}: record {i}")
    return records


def typed(records: Iterable, where: str = "results") -> list[Record]:
    """The records a reader reads, as ``Record``: a key the schema does not declare is refused; a
    record that is not a mapping, or lacks a key that identifies it (``REQUIRED``), is skipped, as
    readers always skipped what they could not place."""
    out = []
    for i, r in enumerate(records):
        if isinstance(r, Record):
            out.append(r)
        elif isinstance(r, Mapping) and all(k in r for k in REQUIRED):
            out.append(Record.from_json(r, f"{where}: record {i}"))
        elif isinstance(r, Mapping):
            Record.check(r, f"{where}: record {i}")
    return out


def records_of(records: Iterable, case_operators: Mapping[str, str], operator: str) -> list:
    """The records of ``operator``'s cases in a run of several (``case_operators``: the manifest's
    ``selection.case_operators``, case id -> the name the operator is found by)."""
    return [r for r in records if isinstance(r, Mapping) and case_operators.get(str(r.get("case"))) == operator]
