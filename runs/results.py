"""Result records on disk: JSON only, one file per cell written atomically, one folder per run.

Layout under ``--results-dir`` (resolved to an absolute path when the run starts):

    runs/<run>/manifest.json                 the run's manifest and planned cells, written before any cell
    runs/<run>/shards/<worker>/<cell>.json   one case x backend (or a case's goldens), by the worker
    runs/<run>/results.json                  the run's manifest, every record, the planned cells
                                             without a record, the shards that could not be read
    latest                                   the id of the newest finished run (replaced atomically)

A run writes only inside its own folder, so concurrent runs on one results
directory never touch each other's data; the ``latest`` pointer is the only
shared file. A crashed worker loses at most the cell it was computing, and the
run's ``results.json`` lists that cell as missing. A run whose controller was killed has no
``results.json``; its folder still reads as a run (``load_results``: the manifest, every record
its shards hold, ``unfinished``), so ``--resume`` can continue it. Temporary files of a killed
writer never enter a merge; a shard that cannot be read is named and skipped.
Non-finite floats are written as "inf", "-inf", "nan", so the files are strict JSON.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from contract.records import READABLE_SCHEMAS, SCHEMA_VERSION, RecordSchemaError, checked

RUNS = "runs"
LATEST = "latest"
# a run's own drift studies (``cases.drift_study``, made for its report), one folder per operator key
DRIFT_STUDIES = "drift"
STARTED = "manifest.json"    # in a run folder from its start: what a killed run leaves besides its shards
KEEP_FINISHED_RUNS = 20      # older finished runs are pruned; unfinished ones are never touched
TMP_PREFIX = ".tmp-"


def to_json(obj):
    """Strict-JSON form: non-finite floats become strings, tuples lists."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return "nan"
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    return obj


def from_json_number(value) -> float | None:
    """The inverse of ``to_json`` for a number: a float, with "inf", "-inf", "nan" as theirs;
    None for a missing value, a bool or anything that is not a number."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


# The process's umask, read once at import (reading it means setting it: at write time that
# would briefly give every other thread's new files mode 0666).
_UMASK = os.umask(0)
os.umask(_UMASK)


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file in the same folder and a rename: a reader sees
    the old file or the whole new one, never a part; a failed write leaves no temporary behind.
    Mode 0666 less the umask, as ``open`` would give (``mkstemp`` makes 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TMP_PREFIX, suffix=path.suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path, payload) -> None:
    """``payload`` as strict JSON (``to_json``), atomically (``write_text_atomic``)."""
    write_text_atomic(path, json.dumps(to_json(payload), allow_nan=False))


def _safe(name: str) -> str:
    """A file name for a cell: unsafe characters become their code point, so distinct names stay distinct."""
    return re.sub(r"[^A-Za-z0-9.-]", lambda m: f"_{ord(m.group()):x}_", name)


def run_dir(results_root: str | os.PathLike, run: str) -> Path:
    return Path(results_root) / RUNS / run


def cell_path(shard_root: str | os.PathLike, worker: str, cell: str) -> Path:
    """Where ``write_cell`` puts a cell's records."""
    return Path(shard_root) / _safe(worker) / f"{_safe(cell)}.json"


def write_cell(shard_root: str | os.PathLike, worker: str, cell: str, records: list[dict]) -> Path:
    path = cell_path(shard_root, worker, cell)
    write_atomic(path, {"schema": SCHEMA_VERSION, "records": checked(records, f"cell {cell}")})
    return path


@dataclass
class Shards:
    records: list[dict] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)    # "path: why"


def read_shards(shard_root: Path) -> Shards:
    """Every record of one run's shards, sorted for stable diffs; unreadable shards named, not fatal."""
    out = Shards()
    for shard in sorted(shard_root.glob("*/*.json")):
        if shard.name.startswith(TMP_PREFIX):
            continue    # a writer killed mid-write: its cell has no record and is reported missing
        try:
            out.records.extend(json.loads(shard.read_text())["records"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            out.unreadable.append(f"{shard}: {type(exc).__name__}: {exc}")
    out.records.sort(key=record_order)
    return out


def record_order(r: dict) -> tuple:
    """The order records are stored in: by case, backend, output, golden (stable diffs)."""
    return tuple(str(r.get(k, "")) for k in ("case", "backend", "output", "golden"))


def missing_cells(planned: list[tuple[str, str]], records: list[dict]) -> list[dict]:
    """Planned (case, backend) cells that have no record."""
    seen = {(r.get("case"), r.get("backend")) for r in records}
    return [{"case": c, "backend": b} for c, b in planned if (c, b) not in seen]


def merge(run: str | os.PathLike, *, manifest: dict | None = None,
          planned: list[tuple[str, str]] | None = None) -> dict:
    """Merge one run folder's shards into its ``results.json``; returns what was written."""
    folder = Path(run)
    shards = read_shards(folder / "shards")
    payload = {"schema": SCHEMA_VERSION, "run": folder.name, "manifest": manifest,
               "planned": [list(c) for c in planned or []],
               "missing": missing_cells(planned or [], shards.records),
               "unreadable_shards": shards.unreadable, "records": shards.records}
    write_atomic(folder / "results.json", payload)
    return payload


def write_started(run: str | os.PathLike, *, manifest: dict, planned: list[tuple[str, str]]) -> None:
    """The run's manifest and planned cells, before any cell runs: all an unfinished run lacks."""
    write_atomic(Path(run) / STARTED, {"schema": SCHEMA_VERSION, "manifest": manifest,
                                       "planned": [list(c) for c in planned]})


def read_unfinished(folder: Path) -> dict:
    """A run folder without ``results.json`` (its controller was killed, or it is still running)
    read as a results object: its started manifest and plan, and every record its shards hold."""
    try:
        started = json.loads((folder / STARTED).read_text()) if (folder / STARTED).is_file() else {}
    except (OSError, ValueError) as exc:
        raise ResultsNotFound(f"{folder / STARTED}: not valid JSON ({str(exc)[:200]})") from exc
    if not isinstance(started, dict):
        raise ResultsNotFound(f"{folder / STARTED}: not a run manifest")
    planned = [tuple(c) for c in started.get("planned") or []]
    shards = read_shards(folder / "shards")
    return {"schema": started.get("schema", SCHEMA_VERSION), "run": folder.name, "manifest": started.get("manifest"),
            "planned": [list(c) for c in planned], "missing": missing_cells(planned, shards.records),
            "unreadable_shards": shards.unreadable, "records": shards.records, "unfinished": True}


def point_latest(results_root: str | os.PathLike, run: str) -> None:
    """Make ``latest`` name ``run``, atomically (a reader sees the old or the new id, never half)."""
    root = Path(results_root)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=TMP_PREFIX)
    with os.fdopen(fd, "w") as f:
        f.write(run + "\n")
    os.replace(tmp, root / LATEST)


def prune_finished(results_root: str | os.PathLike, keep: int = KEEP_FINISHED_RUNS) -> list[Path]:
    """Delete finished runs (those with a results.json) beyond the newest ``keep``; a run still
    being written has no results.json yet and is never touched, nor is the one ``latest`` names."""
    root = Path(results_root)
    latest = _latest_id(root)
    finished = sorted((p for p in (root / RUNS).glob("*") if (p / "results.json").exists()),
                      key=lambda p: (p / "results.json").stat().st_mtime)
    doomed = [p for p in finished[:-keep] if p.name != latest] if keep else []
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


def _latest_id(root: Path) -> str | None:
    try:
        return (root / LATEST).read_text().strip() or None
    except OSError:
        return None


class ResultsNotFound(FileNotFoundError):
    """A path that holds no results a reader can use."""


def is_unfinished_run(folder: Path) -> bool:
    """A run folder that has no results.json yet: started, or with shards."""
    return folder.is_dir() and not (folder / "results.json").exists() and (
        (folder / STARTED).is_file() or (folder / "shards").is_dir())


def newest_run(results_root: str | os.PathLike) -> Path | None:
    """The run of a results directory that started last (run ids begin with their start time),
    finished or not; None when it holds none."""
    runs = [p for p in (Path(results_root) / RUNS).glob("*")
            if (p / "results.json").is_file() or is_unfinished_run(p)]
    return max(runs, key=lambda p: p.name) if runs else None


def resolve_results(path: str | os.PathLike) -> Path:
    """The results file a path means: a JSON file itself; a run folder's results.json, or the
    folder itself while it has none (an unfinished run); a results directory's latest run; a
    folder with a results.json of the older flat layout."""
    p = Path(path)
    if not p.exists():
        raise ResultsNotFound(f"results directory {p} does not exist")
    if p.is_file() or is_unfinished_run(p):
        return p
    latest = _latest_id(p)
    if (p / "results.json").is_file() and latest is None:    # a run folder (or the older flat layout)
        return p / "results.json"
    # a results directory: its latest run, even beside a stray results.json (the newest run wins)
    if latest is not None:
        target = run_dir(p, latest) / "results.json"
        if target.is_file():
            return target
        raise ResultsNotFound(f"{p}: 'latest' names run {latest!r}, which has no results.json")
    raise ResultsNotFound(f"{p}: no results.json and no finished run (no '{LATEST}' pointer)")


def load_results(path: str | os.PathLike) -> dict:
    """The whole results object of ``path`` (see ``resolve_results``), with ``source`` = the file read."""
    target = resolve_results(path)
    try:
        data = read_unfinished(target) if target.is_dir() else json.loads(target.read_text())
    except (ValueError, OSError) as exc:      # UnicodeDecodeError is a ValueError: binary garbage
        raise ResultsNotFound(f"{target}: not valid JSON ({str(exc)[:200]})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ResultsNotFound(f"{target}: not a results file (no 'records' list)")
    if data.get("schema", SCHEMA_VERSION) not in READABLE_SCHEMAS:
        raise ResultsNotFound(f"{target}: results schema {data.get('schema')!r}; this framework reads schemas "
                              f"{', '.join(map(str, READABLE_SCHEMAS))}")
    try:
        checked(data["records"], str(target))
    except RecordSchemaError as exc:
        raise ResultsNotFound(str(exc)) from None
    missing = data.get("missing", [])
    if not isinstance(missing, list):
        bad = ["it is not a list"]
    else:
        bad = [f"entry {i} is {c!r:.80}" for i, c in enumerate(missing)
               if not (isinstance(c, dict) and isinstance(c.get("case"), str) and isinstance(c.get("backend"), str))]
    if bad:
        raise ResultsNotFound(f"{target}: its 'missing' cells must be a list of {{case, backend}} names: "
                              f"{'; '.join(bad[:3])}")
    return {**data, "source": str(target)}


def load_records(path: str | os.PathLike) -> list[dict]:
    return load_results(path)["records"]


def load_manifest(path: str | os.PathLike) -> dict | None:
    """The run manifest of ``path`` (``None`` for results written before manifests existed)."""
    return load_results(path).get("manifest")
