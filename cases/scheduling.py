"""Every cell of a case on one xdist worker, and every test of one ``xdist_group`` on one worker.

A case's cells share one evaluation (inputs, backend calls, one golden pass), made by the first
worker to reach the case while any other worker holding one of its cells waits on the lock
(``cases.test_matrix._case``). xdist's ``loadgroup`` should keep them together by the cells'
``xdist_group`` mark, but pytest 9.2 builds a node's id from ``Node._id``, and xdist 3.8 still
writes the group into ``Node._nodeid``: the ids reach the controller without their group and
``loadgroup`` schedules like ``load``. Measured before this scheduler: the M=220000 case's four
cells on both of 2 workers, each worker 243 s on one evaluation.

Two mends. ``CaseScheduling`` groups a matrix cell by the case its id names
(``test_cell[<case>-<backend>]``, looked up in the run's own cells), so a cell keeps the plain id
a user copies to rerun it. A worker adds xdist's ``@group`` suffix to its other tests' ids where
xdist meant to (``add_group_suffixes``), so tests sharing an expensive module fixture or cached
evaluation share a worker too (a module fixture otherwise runs once on each worker that gets one
of its tests: ``tests/core/test_resume.py``'s killed-and-resumed runs took 55 s and 47 s, twice;
the project's own test modules are not marked: marked, one run of twelve of them saw
``tests/mutants/test_gate_power.py`` compare a cached evaluation with a fresh one that differed in
the last bits of the fitted scale's bias).
Every other test is its own unit, as with ``load``.
"""
from __future__ import annotations

from collections.abc import Callable

from xdist.scheduler import LoadGroupScheduling

CELL = "test_cell["


def cell_param(nodeid: str) -> str | None:
    """The parameter id of a matrix cell's test id (``<case>-<backend>``), or None for another test."""
    if CELL not in nodeid:
        return None
    return nodeid.split(CELL, 1)[1].rsplit("]", 1)[0]


def _group(item) -> str | None:
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    return "_".join(names) or None


def _set_nodeid(item, nodeid: str) -> bool:
    """``item``'s id set to ``nodeid``, on pytest before 9.2 (``_nodeid``) and after (``_id``, a
    ``NodeId`` parsed from the string); whether it took."""
    current = getattr(item, "_id", None)
    if current is not None and not isinstance(current, str) and hasattr(type(current), "parse"):
        item._id = type(current).parse(nodeid)
    else:
        item._nodeid = nodeid
    return item.nodeid == nodeid


def add_group_suffixes(items) -> int:
    """xdist's ``<id>@<group>`` on every item with an ``xdist_group`` mark that lacks it; the number
    of items whose id could not be changed (their tests are then scheduled one by one)."""
    missed = 0
    for item in items:
        group = _group(item)
        if group is None or item.nodeid.endswith(f"@{group}"):
            continue
        missed += not _set_nodeid(item, f"{item.nodeid}@{group}")
    return missed


class CaseScheduling(LoadGroupScheduling):
    """``loadgroup`` with a matrix cell's case as its group (``case_of``: a cell's parameter id ->
    its case id, or None for a parameter that is no cell of this run)."""

    def __init__(self, config, log=None, *, case_of: Callable[[str], str | None]):
        super().__init__(config, log)
        self.case_of = case_of

    def _split_scope(self, nodeid: str) -> str:
        scope = super()._split_scope(nodeid)
        param = cell_param(nodeid)
        if scope != nodeid or param is None:
            return scope
        case = self.case_of(param)
        return nodeid if case is None else f"case:{case}"
