"""The records' vocabulary, shared by the writers (``cases``) and the readers (``reports``, the
launcher): kept free of torch and of the framework.

A case id (``cases.spec.CaseSpec.id``), for readers that get only the id (a test id, a record
without its spec): each of the operator's dimensions as its name and size (``M2048-K96-N200``),
then the scale profile and the seed (``-unit-s0``)."""
import re

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
