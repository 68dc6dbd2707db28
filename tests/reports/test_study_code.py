"""Whether a drift study ran the run's code (``reports.study_code``), from what the two record,
whatever a hand-edited file holds there."""
from __future__ import annotations

import pytest

from reports.study_code import code_mismatch

RUN = {"run": "r1", "manifest": {"framework": {"commit": "abcdef1234567", "dirty": False, "digest": "d1"}}}


def test_the_same_digest_is_the_runs_code_and_another_is_not():
    assert code_mismatch({"code": {"commit": "abcdef1234567", "digest": "d1"}}, RUN) is None
    why = code_mismatch({"code": {"commit": "0123456789abc", "digest": "d0"}}, RUN)
    assert why == ("the study ran other code than this run's: the study at commit 0123456789, "
                   "the run at commit abcdef1234")


def test_the_same_commit_with_other_files_says_so():
    why = code_mismatch({"code": {"commit": "abcdef1234567", "dirty": True, "digest": "d0"}}, RUN)
    assert why.endswith("the study at commit abcdef1234 with edits, the run at commit abcdef1234 "
                        "(the same commit: its files differ, edited or untracked)")


def test_a_study_claiming_the_runs_id_is_judged_by_its_digest():
    """A study copied from elsewhere with this run's id: its digest decides, not its claim."""
    assert code_mismatch({"run": "r1", "code": {"digest": "d0"}}, RUN).startswith("the study ran other code")
    assert code_mismatch({"run": "r1"}, {"run": "r1"}) is None       # neither records a digest: the run made it


@pytest.mark.parametrize("code", [None, "abc", [1], {"commit": 5, "digest": "x" * 0}, {"commit": None, "digest": 7}])
def test_a_malformed_code_version_is_no_code_version(code):
    assert code_mismatch({"code": code}, RUN).startswith("the study records no code version")
    # and a run's manifest of any shape is no digest to compare with
    assert code_mismatch({"code": {"commit": "c", "digest": "d1"}}, {"manifest": {"framework": code}}) == \
        "the study ran at commit c; the run records no code version to check it against"
