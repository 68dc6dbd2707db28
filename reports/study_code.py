"""Whether a drift study is of the run's code: a study made apart (``python -m cases.drift_study -o
OUT/drift``) may be older than the run its report shows. Both record the framework's commit and the
digest of its code (``runs.manifest.code_version``); a study whose digest is not the run's is
named as such on the page, never shown as the run's."""
from __future__ import annotations

from collections.abc import Mapping


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def _code(record) -> dict:
    """A study's or a manifest's code version, its fields kept only where they have their types."""
    record = record if isinstance(record, Mapping) else {}
    return {"commit": _text(record.get("commit")), "digest": _text(record.get("digest")),
            "dirty": record.get("dirty") is True}


def _at(code: Mapping) -> str:
    where = f"commit {code['commit'][:10]}" if code["commit"] else "an unknown commit"
    return where + (" with edits" if code["dirty"] else "")


def code_mismatch(study: Mapping, results: Mapping) -> str | None:
    """None when ``study`` ran this run's code (the same code digest; where either lacks one, a study
    made by the run itself); else why it may not have. ``results``: the loaded results (their
    ``run`` and ``manifest``)."""
    theirs = _code(study.get("code"))
    manifest = results.get("manifest")
    mine = _code(manifest.get("framework") if isinstance(manifest, Mapping) else None)
    if theirs["digest"] and mine["digest"]:
        if theirs["digest"] == mine["digest"]:
            return None
        same = (" (the same commit: its files differ, edited or untracked)"
                if theirs["commit"] and theirs["commit"] == mine["commit"] else "")
        return f"the study ran other code than this run's: the study at {_at(theirs)}, the run at {_at(mine)}{same}"
    if study.get("run") is not None and study.get("run") == results.get("run"):
        return None
    if not theirs["digest"]:
        return "the study records no code version (made before studies recorded one): it may be of other code than this run's"
    return f"the study ran at {_at(theirs)}; the run records no code version to check it against"


def of_run_code_first(found: list[tuple]) -> tuple:
    """Of ``(folder, study, code_mismatch)`` in the order they were looked for, the first that ran the
    run's code; where none did, the first (its mismatch said on the page)."""
    return next((f for f in found if f[2] is None), found[0])
