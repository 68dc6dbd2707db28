"""A checked merge of runs made on many machines: ``python -m accuracy merge RUN... -o MERGED``.

Each input is a run (a results directory's latest run, a run folder or a results file) made
with ``--num-shards N --shard-id i`` (``cases/shards.py``) on some host. The merge unions their
records by cell and refuses, naming what is wrong:

* manifests that disagree on what decides the plan or the verdict (``MUST_AGREE``: the
  framework's version, commit and code digest (an edited tree keeps its commit), the profile, seeds, --case cases, backends, benchmark, gate, the -m / -k
  selection, the shard count and the durations that balanced it);
* shards missing from the set or present twice;
* a cell recorded by two runs (duplicates);
* planned cells that never ran (in any run's plan, without a record).

Each record keeps the host and device that produced it (``host``, ``device``, ``run``), and the
merged manifest keeps every host's own manifest (``hosts``: CPU, platform facts, device), since
the known failures were judged on each host's measured facts. Nothing is averaged: the merged
file holds the raw records, and every aggregate (seed statistics, the report) is recomputed
from them.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from contract.records import REQUIRED, typed
from runs.results import SCHEMA_VERSION, load_results, missing_cells, record_order, write_atomic

MUST_AGREE = ("framework.version", "framework.commit", "framework.digest", "selection.operator", "selection.profile", "selection.seeds",
              "selection.cases", "selection.inputs", "selection.backends", "selection.benchmark", "selection.gate", "selection.markexpr",
              "selection.keyword", "selection.shard.count", "selection.shard.durations")
LISTED = 20      # at most this many duplicates / missing cells named in the message


class MergeError(ValueError):
    """The runs cannot be merged; the message names every problem."""


def manifest_field(manifest: dict, dotted: str):
    value = manifest
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _listed(items: list[str]) -> str:
    head = "; ".join(items[:LISTED])
    return head + (f"; ... and {len(items) - LISTED} more" if len(items) > LISTED else "")


def merge_runs(sources: Sequence[str | Path], out: str | Path, *, absent_shards: Sequence[int] = (),
               extra_missing: Sequence[dict] = ()) -> dict:
    """Merge ``sources`` into ``out/results.json``; returns the payload written. Raises
    ``MergeError`` naming every problem found (nothing is written then).
    ``absent_shards``: shards known to be absent (a launcher gave up on them, or they had no
    case): no error; the planned cells of lost ones (``extra_missing``, {"case", "backend"}) are
    recorded as missing."""
    if not sources and extra_missing:       # every shard lost: the record of what never ran
        return _write(out, None, [], [], [], extra_missing)
    if not sources:
        raise MergeError("nothing to merge: give at least one run")
    runs = [load_results(s) for s in sources]
    names = [r["source"] for r in runs]
    problems = []
    manifests = []
    for name, run in zip(names, runs):
        manifest = run.get("manifest")
        if not isinstance(manifest, dict) or not isinstance(manifest.get("selection"), dict):
            problems.append(f"{name}: no run manifest with the run's selection (made before shards existed?)")
        manifests.append(manifest if isinstance(manifest, dict) else {})
    for key in MUST_AGREE:
        values = {repr(manifest_field(m, key)) for m in manifests}
        if len(values) > 1:
            problems.append(f"manifests disagree on {key}: "
                            + ", ".join(f"{n} has {manifest_field(m, key)!r}" for n, m in zip(names, manifests)))

    count = manifest_field(manifests[0], "selection.shard.count") or 1
    seen_shards: dict[int, str] = {}
    for name, m in zip(names, manifests):
        shard = manifest_field(m, "selection.shard.id")
        if shard is None:
            continue
        if shard in seen_shards:
            problems.append(f"shard {shard} of {count} appears twice: {seen_shards[shard]} and {name}")
        seen_shards.setdefault(shard, name)
    absent = [i for i in range(count) if i not in seen_shards and i not in absent_shards]
    if absent and all(manifest_field(m, "selection.shard.id") is not None for m in manifests):
        problems.append(f"shard(s) {', '.join(map(str, absent))} of {count} are not among the runs")

    for name, run in zip(names, runs):
        # a record no reader can place would be dropped from the merged run without a word
        unplaced = [i for i, r in enumerate(run["records"])
                    if not (isinstance(r, Mapping) and all(k in r for k in REQUIRED))]
        if unplaced:
            problems.append(f"{name}: {len(unplaced)} records lack a key that identifies them "
                            f"({', '.join(REQUIRED)}): records {_listed([str(i) for i in unplaced])}")

    records, owner, duplicates = [], {}, []
    for name, run, m in zip(names, runs, manifests):
        for rec in typed(run["records"], name):
            key = rec.key
            if key in owner and owner[key] != name:
                duplicates.append(f"case {key[0]}, backend {key[1]!r}, output {key[2]}, golden {key[3]} in "
                                  f"{owner[key]} and {name}")
                continue
            owner[key] = name
            records.append({**rec.to_json(), "host": m.get("host"), "device": rec.device or m.get("device"),
                            "run": run.get("run")})
    if duplicates:
        problems.append(f"{len(duplicates)} records appear in two runs: {_listed(duplicates)}")

    planned = []
    for run in runs:
        planned += [tuple(c) for c in run.get("planned") or []]
        for cell in run.get("missing") or []:
            planned.append((cell.get("case"), cell.get("backend")))
    planned = list(dict.fromkeys(planned))
    known_lost = {(m["case"], m["backend"]) for m in extra_missing}
    missing = [f"case {c['case']}, backend {c['backend']!r}" for c in missing_cells(planned, records)
               if (c["case"], c["backend"]) not in known_lost]
    if missing:
        problems.append(f"{len(missing)} planned cells never ran: {_listed(missing)}")
    unreadable = [u for run in runs for u in run.get("unreadable_shards") or []]
    if unreadable:
        problems.append(f"unreadable shards in the runs: {_listed(unreadable)}")
    if problems:
        raise MergeError("cannot merge:\n  " + "\n  ".join(problems))

    merged_manifest = dict(manifests[0])
    merged_manifest["selection"] = {**merged_manifest["selection"],
                                    "shard": {"merged": count, "absent": list(absent_shards)}}
    merged_manifest["hosts"] = [{"run": run.get("run"), "source": name, "host": m.get("host"),
                                 "device": m.get("device"), "cpu": m.get("cpu"), "facts": m.get("facts"),
                                 "shard": manifest_field(m, "selection.shard.id")}
                                for name, run, m in zip(names, runs, manifests)]
    return _write(out, merged_manifest, names, planned, records, extra_missing)


def _write(out, manifest: dict | None, sources: list[str], planned: list[tuple], records: list[dict],
           extra_missing: Sequence[dict]) -> dict:
    out = Path(out)
    planned = list(dict.fromkeys(list(planned) + [(m["case"], m["backend"]) for m in extra_missing]))
    payload = {"schema": SCHEMA_VERSION, "run": out.name, "manifest": manifest,
               "merged": {"from": sources, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
               "planned": [list(c) for c in planned], "missing": [dict(m) for m in extra_missing],
               "unreadable_shards": [], "records": sorted(records, key=record_order)}
    write_atomic(out / "results.json", payload)
    return payload
