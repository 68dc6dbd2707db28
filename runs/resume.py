"""Continuing a run that did not finish (``pytest cases/ ... --resume RUN``): which run is meant,
whether this run may continue it, which of its cells are done, and its records carried into the
new run's folder so that the new ``results.json`` is the whole run.

A cell (case, backend) is done when RUN holds a record for it: every record of a cell is written
in one atomic file when the cell finishes (``runs.results.write_cell``), so a killed controller
or worker leaves each cell whole or absent. The new run never writes into RUN's folder.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from runs.merge import manifest_field
from runs.results import RUNS, ResultsNotFound, load_results, newest_run, to_json, write_cell

# The shard folder of the new run that holds RUN's records (workers are "main" or "gw<i>").
CARRIED = "resumed"
GOLDENS = "goldens"      # the cell name suffix of a case's golden records (``<case>--goldens``)
# What decides the plan or the verdicts besides the selection (``cases.plugin.run_selection``,
# compared key by key): the code that judged (its digest: an edited tree keeps its commit and its
# dirty flag), and where it ran.
MUST_MATCH = ("framework.version", "framework.commit", "framework.dirty", "framework.digest", "device")
NOT_COMPARED = frozenset({"resume"})    # a resumed run names its source; RUN named another or none
SHOWN = 80      # characters of each differing value in the refusal


@dataclass(frozen=True)
class ResumedRun:
    """The run being continued: where it was read, its manifest, its records and done cells."""
    source: Path
    manifest: dict | None
    records: list[dict]
    done: frozenset[tuple[str, str]]


def resume_target(path: str | os.PathLike) -> Path:
    """The run ``path`` means: a results directory's newest run, finished or not (a killed run
    never becomes ``latest``); a run folder or results file itself."""
    p = Path(path)
    if (p / RUNS).is_dir():
        newest = newest_run(p)
        if newest is None:
            raise ResultsNotFound(f"{p}: no run in {p / RUNS}")
        return newest
    return p


def is_golden(backend: str) -> bool:
    return str(backend).startswith("golden:")


def done_cells(records: list[dict]) -> frozenset[tuple[str, str]]:
    """(case, backend) of every backend cell with a record."""
    return frozenset((r.get("case"), r.get("backend")) for r in records if not is_golden(r.get("backend", "")))


def load_resumed(path: str | os.PathLike) -> ResumedRun:
    """The run to continue, finished or not; ``ResultsNotFound`` when there is none to read."""
    data = load_results(resume_target(path))
    return ResumedRun(Path(data["source"]), data.get("manifest"), data["records"], done_cells(data["records"]))


def _plain(value):
    """The JSON form a manifest has once read back, so a tuple equals the list it was written as."""
    return json.loads(json.dumps(to_json(value)))


def manifest_mismatch(before: dict | None, now: dict) -> str | None:
    """The first field on which the run being resumed and this run disagree, said in one line
    naming it; None when they agree."""
    if not isinstance(before, dict) or not isinstance(before.get("selection"), dict):
        return "it has no run manifest with its selection, so what it ran cannot be checked"
    before, now = _plain(before), _plain(now)
    keys = sorted((set(before["selection"]) | set(now.get("selection") or {})) - NOT_COMPARED)
    for field in (*MUST_MATCH, *(f"selection.{k}" for k in keys)):
        was, is_ = manifest_field(before, field), manifest_field(now, field)
        if was != is_:
            return (f"its manifest differs on {field}: {repr(was)[:SHOWN]} there, {repr(is_)[:SHOWN]} in this run; "
                    f"resume with the options and code it ran with")
    return None


def _cell_name(record: dict) -> str:
    backend = GOLDENS if is_golden(record.get("backend", "")) else record.get("backend")
    return f"{record.get('case')}--{backend}"


def carry_over(records: list[dict], shard_root: str | os.PathLike) -> None:
    """Write ``records`` into the new run's shards (``CARRIED``), one file per cell as the run
    itself would."""
    cells: dict[str, list[dict]] = {}
    for r in records:
        cells.setdefault(_cell_name(r), []).append(r)
    for name, cell in cells.items():
        write_cell(shard_root, CARRIED, name, cell)
