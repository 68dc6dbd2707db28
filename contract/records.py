"""The records' vocabulary, shared by the writers (``cases``) and the readers (``reports``, the
launcher): kept free of torch and of the framework.

A case id (``cases.spec.CaseSpec.id``), for readers that get only the id (a test id, a record
without its spec): each of the operator's dimensions as its name and size (``M2048-K96-N200``),
then the scale profile and the seed (``-unit-s0``)."""
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

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


def parse(case_id: str) -> tuple[dict[str, int], str, int] | None:
    """(dimension sizes by name, scale, seed) of a case id; None if it is not one."""
    match = CASE_ID.match(case_id)
    if match is None:
        return None
    sizes = {name: int(v) for name, v in _SIZE.findall(match["sizes"])}
    return sizes, match["scale"], int(match["seed"])


# The version of the results format (``runs.results``): the keys below, a results file's top level
# ``schema``, ``records``, ``manifest``, ``planned``, ``missing``, ``unreadable_shards``, ``run``.
SCHEMA_VERSION = 2
# the versions a reader accepts: 1 (a results file of records alone, before run folders, manifests
# and planned cells) has the same records
READABLE_SCHEMAS = (1, 2)


class RecordSchemaError(ValueError):
    """A record with keys this schema does not declare."""


class _Absent:
    """A key the record does not carry (a field that is None is carried, as null)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


@dataclass(frozen=True)
class Record:
    """One result record, as written to the results file.

    A backend's output at a case against one golden layer (``golden`` ``"*"`` and ``output``
    ``"*"`` for a cell that did not run: skipped, crashed, timed out); or two goldens compared
    with each other (``backend`` ``GOLDEN_PREFIX + layer``, ``golden`` the layer it is measured
    against). Every other key is carried only where it applies."""
    case: str
    backend: str
    output: str
    golden: str
    status: str                        # VERDICT_STATUSES, or "info" for an ungated golden's record
    case_spec: object = ABSENT         # the case as data (``CaseSpec.asdict``)
    schedule: object = ABSENT          # the schedule name its tiled golden replays (None: none)
    backend_output: object = ABSENT    # what the backend printed during its call, capped
    message: object = ABSENT           # the verdict's message (gated) or why the cell did not run
    seconds: object = ABSENT
    gated: object = ABSENT             # the record the cell's verdict reads
    metrics: object = ABSENT           # ``accuracy.metrics.ErrorStats.finalize``
    attribution: object = ABSENT       # error by source: storage, tile order, kernel
    determinism: object = ABSENT       # --repeats: bit-identical runs, spreads
    gate: object = ABSENT              # absolute | dual | both
    absolute_status: object = ABSENT   # the operator's criterion's verdict, whatever gated the cell
    checks_nothing: object = ABSENT    # why no kernel can fail at this case
    dual: object = ABSENT              # the dual-benchmark verdict
    dual_missing: object = ABSENT      # why there is none
    vacuous_seed_gate: object = ABSENT  # would the acceptance gate pass all zeros here?
    atol_capped: object = ABSENT
    expected_reason: object = ABSENT   # a known failure's entry: its reason and source
    expected_source: object = ABSENT
    expected_exceeded: object = ABSENT  # by how much a known failure exceeded its bound
    tile_drift: object = ABSENT        # a tiled golden's per-tile drift against its global sum
    rerun: object = ABSENT             # one command that reruns the cell alone
    device: object = ABSENT            # where the inputs and the backend ran
    golden_device: object = ABSENT     # where the goldens ran
    host: object = ABSENT              # a merged run's machine and run folder
    run: object = ABSENT

    @classmethod
    def from_json(cls, data: Mapping, where: str = "record") -> "Record":
        """The record of a results file's mapping; a key this schema does not declare is refused,
        naming it and the schema version."""
        _refuse_undeclared(data, where)
        missing = [k for k in REQUIRED if k not in data]
        if missing:
            raise RecordSchemaError(f"{where} lacks {missing} (results schema {SCHEMA_VERSION})")
        return cls(**data)

    def to_json(self) -> dict:
        """The mapping written to the results file: the keys it carries, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not ABSENT}

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What identifies it in a run: case, backend, output, golden."""
        return self.case, self.backend, self.output, self.golden


FIELDS = frozenset(f.name for f in fields(Record))
REQUIRED = ("case", "backend", "output", "golden", "status")


def _refuse_undeclared(data: Mapping, where: str) -> None:
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise RecordSchemaError(f"{where} has keys {unknown} that results schema {SCHEMA_VERSION} does not "
                                f"declare (contract.records.Record); written by another version of the framework?")


def checked(records: list, where: str) -> list:
    """``records`` (as written), each mapping refused if it carries a key the schema does not declare;
    returned as they are (a reader tolerates a record that lacks keys, or one that is not a mapping:
    it shows them missing or skips them)."""
    for i, r in enumerate(records):
        if isinstance(r, Mapping):
            _refuse_undeclared(r, f"{where}: record {i}")
    return records


def records_of(records: Iterable, case_operators: Mapping[str, str], operator: str) -> list:
    """The records of ``operator``'s cases in a run of several (``case_operators``: the manifest's
    ``selection.case_operators``, case id -> the name the operator is found by)."""
    return [r for r in records if isinstance(r, Mapping) and case_operators.get(str(r.get("case"))) == operator]
