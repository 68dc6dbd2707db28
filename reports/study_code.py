"""Whether a drift study is of the run's code: a study made apart (``python -m cases.drift_study -o
OUT/drift``) may be older than the run its report shows. Both record the framework's commit and the
digest of its code (``runs.manifest.code_version``); a study whose digest is not the run's is
named as such on the page, never shown as the run's."""
from __future__ import annotations

from collections.abc import Mapping


def _at(code: Mapping) -> str:
    commit = code.get("commit")
    where = f"commit {commit[:10]}" if commit else "an unknown commit"
    return where + (" with edits" if code.get("dirty") else "")


def code_mismatch(study: Mapping, results: Mapping) -> str | None:
    """None when ``study`` ran this run's code (made by the run itself, or the same code digest);
    else why it may not have. ``results``: the loaded results (their ``run`` and ``manifest``)."""
    if study.get("run") is not None and study.get("run") == results.get("run"):
        return None
    theirs = study.get("code") or {}
    mine = ((results.get("manifest") or {}).get("framework")) or {}
    if not theirs.get("digest"):
        return "the study records no code version (made before studies recorded one): it may be of other code than this run's"
    if not mine.get("digest"):
        return f"the study ran at {_at(theirs)}; the run records no code version to check it against"
    if theirs["digest"] != mine["digest"]:
        return f"the study ran other code than this run's: the study at {_at(theirs)}, the run at {_at(mine)}"
    return None
