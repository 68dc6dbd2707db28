"""Deterministic shards of the case matrix: ``pytest cases/ --shard-id I --num-shards N``.

A case belongs to one shard with all its cells (every backend of it, its goldens), so a case is
still evaluated once in the union of the shards. The assignment depends on the case ids alone
(and, when given, on recorded durations), never on the machine, the Python hash seed or the
order of collection, so N machines that each run ``--shard-id i`` of the same command run
exactly the unsharded plan between them:

* by hash: shard = the first 8 bytes of sha256(case id), as an integer, mod N;
* balanced (``--shard-durations RESULTS``): longest processing time first over the cases'
  recorded wall time in a previous run (sum over its cells), ties broken by case id; a case
  without a recorded time counts the median of the recorded ones. The same durations file
  gives every machine the same assignment.
"""
from __future__ import annotations

import hashlib
import statistics
from collections.abc import Iterable, Mapping

from runs.results import load_records


def hashed_shard(case_id: str, num_shards: int) -> int:
    digest = hashlib.sha256(case_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % num_shards


def assign(case_ids: Iterable[str], num_shards: int,
           durations: Mapping[str, float] | None = None) -> dict[str, int]:
    """Case id -> shard index in [0, num_shards)."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    ids = sorted(set(case_ids))
    if not durations:
        return {c: hashed_shard(c, num_shards) for c in ids}
    known = [float(durations[c]) for c in ids if c in durations]
    default = statistics.median(known) if known else 1.0
    cost = {c: float(durations.get(c, default)) for c in ids}
    load = [0.0] * num_shards
    out = {}
    for c in sorted(ids, key=lambda c: (-cost[c], c)):
        shard = min(range(num_shards), key=lambda s: (load[s], s))
        out[c] = shard
        load[shard] += cost[c]
    return out


def assignment(case_ids: Iterable[str], num_shards: int, durations_source=None) -> dict[str, int]:
    """``assign`` with the durations of a previous run (a results directory, run folder or results
    file: ``--shard-durations``), when given; what the pytest plugin and the Ray launcher both use."""
    durations = None
    if durations_source:
        durations = durations_from_records(load_records(durations_source))
    return assign(case_ids, num_shards, durations)


def durations_from_records(records: Iterable[Mapping]) -> dict[str, float]:
    """Per case, the wall seconds its cells took (``seconds`` of each backend run, counted once
    per cell; the goldens' time is part of every record's case and is counted once too)."""
    per_cell: dict[tuple, float] = {}
    for r in records:
        case, backend = r.get("case"), str(r.get("backend"))
        seconds = r.get("seconds")
        if case is None or not isinstance(seconds, (int, float)) or not seconds >= 0:
            continue
        key = (case, "golden" if backend.startswith("golden:") else backend)   # one golden pass per case
        per_cell[key] = max(per_cell.get(key, 0.0), float(seconds))
    out: dict[str, float] = {}
    for (case, _), s in per_cell.items():
        out[case] = out.get(case, 0.0) + s
    return out
