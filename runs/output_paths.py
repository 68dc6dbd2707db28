"""Where a tool may write: never over a run, a results file or a shard, never a file where a folder
belongs or a folder where a file belongs, never somewhere it cannot write. One check every ``-o``
(and ``--report-dir``) goes through, so no tool can overwrite what another reads.

A run is recognised by what ``runs.results`` writes: ``results.json``, ``shards/`` (a run
folder), ``runs/`` or ``latest`` (a results directory). A results file is a JSON file whose
first bytes hold a ``"records"`` or ``"schema"`` key.
"""
from __future__ import annotations

import os
from pathlib import Path

RUN_MARKERS = ("results.json", "shards", "runs", "latest")


class OutputPathError(ValueError):
    """An output path a tool refuses, with the reason in one line."""


def holds_a_run(folder: Path) -> str | None:
    """What in ``folder`` belongs to a run, or None."""
    for marker in RUN_MARKERS:
        if (folder / marker).exists():
            return marker
    return None


def _is_results_file(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return path.name == "results.json" or b'"records"' in head or b'"schema"' in head


def _inside_a_run(path: Path) -> Path | None:
    for parent in path.parents:
        if (parent / "results.json").exists() or (parent / "shards").is_dir():
            return parent
    return None


def probe_writable(folder: Path) -> None:
    """Create ``folder`` and write (then remove) a file there; raises OSError where it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".write-probe-{os.getpid()}"
    probe.write_text("")
    probe.unlink()


def _writable_folder(folder: Path, option: str) -> None:
    try:
        probe_writable(folder)
    except OSError as exc:
        raise OutputPathError(f"{option} {folder}: cannot write there ({exc.strerror or exc})") from None


def output_folder(path, option: str = "-o") -> Path:
    """``path`` as a folder a tool may write into (created), or ``OutputPathError``."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"{option} {folder}: is a file, a folder is expected")
    if folder.is_dir():
        marker = holds_a_run(folder)
        if marker is not None:
            raise OutputPathError(f"{option} {folder}: holds a run or results ({marker}); give a new folder")
    run = _inside_a_run(folder.resolve())
    if run is not None:
        raise OutputPathError(f"{option} {folder}: is inside the run folder {run}; give a folder outside it")
    _writable_folder(folder, option)
    return folder


def output_file(path, option: str = "-o") -> Path:
    """``path`` as a file a tool may write (its folder created), or ``OutputPathError``."""
    file = Path(path)
    if file.is_dir():
        raise OutputPathError(f"{option} {file}: is a folder, a file is expected")
    if file.exists() and _is_results_file(file):
        raise OutputPathError(f"{option} {file}: is a results file; give another name")
    run = _inside_a_run(file.resolve())
    if run is not None:
        raise OutputPathError(f"{option} {file}: is inside the run folder {run}; give a path outside it")
    _writable_folder(file.parent if str(file.parent) else Path("."), option)
    return file
