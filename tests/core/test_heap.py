"""The streaming passes' heap (``goldens.heap``): the allocator tuning applied once on glibc, never
over the user's own setting, recorded in the manifest; free pages given back above a limit only;
values never depend on either."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from goldens.heap import _libc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SNIPPET = ("import json; from goldens import heap as allocator; a = allocator.keep_freed_memory(); "
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


FRAGMENTS = """
import json, sys, torch
from goldens import heap
heap.keep_freed_memory()
heap.release_fragments()                     # the mark: the process before any buffer
kept = []
for cycle in range(20):                      # buffers of a few sizes, a small tensor outliving each cycle
    bufs = [torch.ones(n) for n in (4 << 20, 2 << 20, 4 << 20, 1 << 20, 2 << 20, 1 << 19)]
    kept.append(torch.ones(1024))
    del bufs
before = heap._resident_free(heap._heap_calls())
below = heap.release_fragments(limit=1 << 40)
released = heap.release_fragments(limit=int(sys.argv[1]))
after = heap._resident_free(heap._heap_calls())
print(json.dumps([before, after, below, released, heap.fragment_releases()]))
"""


@pytest.mark.skipif(_libc() is None or not hasattr(_libc(), "mallinfo2"),
                    reason="not glibc 2.33+: release_fragments is a no-op there")
def test_free_pages_go_back_above_the_limit_only():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["PYTHONPATH"] = ROOT
    run = lambda limit: json.loads(subprocess.run([sys.executable, "-c", FRAGMENTS, str(limit)], env=env,
                                                  capture_output=True, text=True, check=True).stdout)
    before, after, below, released, count = run(32 << 20)
    assert before > 48 << 20, "the cycles left no freed buffer in memory: nothing to release"
    assert not below, "released below the limit"
    assert released and count == 1
    assert after < before - (32 << 20)


def test_the_golden_pass_gives_the_same_bits_whatever_it_releases():
    from cases.spec import CaseSpec, make_inputs
    from goldens import heap
    from goldens.stream import materialize
    from operators.swiglu_backward import OPERATOR as SWIGLU
    from operators.swiglu_backward.schedule import ARTICLE

    inputs = make_inputs(CaseSpec(2500, 32, 48, "unit", 0, operator=SWIGLU))
    default = heap.release_fragments.__defaults__
    try:
        heap.release_fragments.__defaults__ = (-1,)          # a release after every block
        count = heap.fragment_releases()
        every = materialize(SWIGLU, inputs, ARTICLE, chunk_rows=1024)
        released = heap.fragment_releases() - count
    finally:
        heap.release_fragments.__defaults__ = default
    assert released == 3 or heap._heap_calls() is False, released      # 2500 rows in blocks of 1024
    never = materialize(SWIGLU, inputs, ARTICLE, chunk_rows=1024)
    for o in every:
        assert torch.equal(every[o], never[o]), o
