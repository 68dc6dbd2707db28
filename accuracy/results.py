"""Result records on disk: JSON only, one file per cell written atomically, merged at the end.

Layout under ``--results-dir``:
    shards/<run>/<worker>/<cell>.json   one case x backend (or the goldens of a case), by the worker
    results.json                        every record of the last run, merged by the controller at its end

A record is one case x backend x output x golden with every metric; a crashed
worker loses at most the cell it was computing. Non-finite floats are written
as the strings "inf", "-inf", "nan" so the files are strict JSON.
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
from pathlib import Path

SCHEMA_VERSION = 1


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


def write_atomic(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(to_json(payload), f, allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def write_cell(shard_root: str | os.PathLike, worker: str, cell: str, records: list[dict]) -> Path:
    path = Path(shard_root) / _safe(worker) / f"{_safe(cell)}.json"
    write_atomic(path, {"schema": SCHEMA_VERSION, "records": records})
    return path


def _shard_records(shard_root: Path) -> list[dict]:
    records = []
    for shard in sorted(shard_root.glob("*/*.json")):
        records.extend(json.loads(shard.read_text())["records"])
    records.sort(key=lambda r: (r.get("case", ""), r.get("backend", ""), r.get("output", ""), r.get("golden", "")))
    return records


def load_manifest(results_dir: str | os.PathLike) -> dict | None:
    """The run manifest of a results directory or results JSON file (``None`` for results without one)."""
    path = Path(results_dir)
    merged = path if path.is_file() else path / "results.json"
    if merged.exists():
        return json.loads(merged.read_text()).get("manifest")
    return None


def load_records(results_dir: str | os.PathLike) -> list[dict]:
    """Every record of a results directory: results.json if present, else the newest run's shards."""
    root = Path(results_dir)
    merged = root / "results.json"
    if merged.exists():
        return json.loads(merged.read_text())["records"]
    runs = sorted((root / "shards").glob("*")) if (root / "shards").exists() else []
    return _shard_records(runs[-1]) if runs else []


def merge(shard_root: str | os.PathLike, target: str | os.PathLike, manifest: dict | None = None) -> Path:
    """Merge one run's shards into ``target`` (sorted for stable diffs), with the run's manifest."""
    path = Path(target)
    write_atomic(path, {"schema": SCHEMA_VERSION, "manifest": manifest,
                        "records": _shard_records(Path(shard_root))})
    return path
