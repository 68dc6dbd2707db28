"""Every cell of a case on one xdist worker: the scheduler that makes it so.

A case's cells share one evaluation (inputs, backend calls, one golden pass), made by the first
worker to reach the case while any other worker holding one of its cells waits on the lock
(``cases.test_matrix._case``). xdist's ``loadgroup`` should keep them together by the cells'
``xdist_group`` mark, but pytest 9.2 builds a node's id from ``Node._id``, and xdist 3.8 still
writes the group into ``Node._nodeid``: the ids reach the controller without their group and
``loadgroup`` schedules like ``load``. Measured before this scheduler: the M=220000 case's four
cells on both of 2 workers, each worker 243 s on one evaluation.

``CaseScheduling`` groups by the case a matrix cell's id names (``test_cell[<case>-<backend>]``,
looked up in the run's own cells), and by xdist's ``@group`` suffix where a worker did add one;
every other test is its own unit, as with ``load``.
"""
from __future__ import annotations

from collections.abc import Callable

from xdist.scheduler import LoadGroupScheduling

CELL = "test_cell["


class CaseScheduling(LoadGroupScheduling):
    """``loadgroup`` with a matrix cell's case as its group (``case_of``: a cell's parameter id ->
    its case id, or None for a parameter that is no cell of this run)."""

    def __init__(self, config, log=None, *, case_of: Callable[[str], str | None]):
        super().__init__(config, log)
        self.case_of = case_of

    def _split_scope(self, nodeid: str) -> str:
        scope = super()._split_scope(nodeid)
        if scope != nodeid or CELL not in nodeid:
            return scope
        case = self.case_of(nodeid.split(CELL, 1)[1].rsplit("]", 1)[0])
        return nodeid if case is None else f"case:{case}"
