"""The allocator tuning of the streaming passes (``runs.allocator``): applied once on glibc,
never over the user's own setting, recorded in the manifest; values never depend on it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runs.allocator import _libc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SNIPPET = ("import json; from runs import allocator; a = allocator.keep_freed_memory(); "
           "print(json.dumps([a, allocator.keep_freed_memory() is a, allocator.state()]))")


def _run(env_extra: dict) -> list:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(env_extra, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(_libc() is None, reason="not glibc: the tuning is a no-op there (recorded as such)")
def test_applied_once_on_glibc():
    applied, same, state = _run({})
    assert applied["applied"] is True and applied["mmap_threshold"] == 32 << 20 and applied["glibc"]
    assert same and state == applied


def test_the_environment_wins():
    applied, _, _ = _run({"MALLOC_TRIM_THRESHOLD_": "1048576"})
    assert applied == {"applied": False, "why": "set in the environment: MALLOC_TRIM_THRESHOLD_"}
