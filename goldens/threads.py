"""The golden pass's and the comparison's torch work on a fixed number of threads, so that no
golden and no record depends on the process's thread count (``GoldenPass.blocks`` and
``accuracy.compare.compare_case`` run inside ``comparison_threads``).

oneDNN/MKL split a product's inner dimension among threads when its output is too small to share
(measured on a 2-core Xeon with avx512_bf16 and AMX, torch 2.13: FP32 and FP64 [96 x 1024] @
[1024 x 200] and every M = 1 row product differ in their last bits between 1 and 2 threads, and
between 1 and 4, 8 or 16; [2048 x 1024] @ [1024 x 512] does not), and torch a full reduction's sum
likewise (a sum of 196704 FP64 values differs). The split depends on the thread count, not on the
cores, so a fixed count gives every product and sum one order: the same case gives the same
reference, allowance and metrics in a 2-worker matrix, in a one-process rerun and on a 64-core
machine. The count is two, this project's machines' cores: a lone large case runs as fast as
before (one thread took 2.05x as long at the article's case); the matrix's workers, one per
core, each run two threads with OpenMP's waiting threads asleep (``runs.idle_threads``), as they
did before. Another fixed count would be as valid; it would give other last bits.

The compiled passes (``accuracy.compiled_pass``, ``accuracy.localized``, ``accuracy.path_errors``)
keep the process's threads: each slice's sums are one thread's, combined in slice order, the same
at any count.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

COMPARISON_THREADS = 2

_outer: list[int] = []


@contextlib.contextmanager
def comparison_threads() -> Iterator[None]:
    """torch on ``COMPARISON_THREADS`` threads inside, the process's count put back after."""
    threads = torch.get_num_threads()
    _outer.append(threads)
    if threads != COMPARISON_THREADS:
        torch.set_num_threads(COMPARISON_THREADS)
    try:
        yield
    finally:
        _outer.pop()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def compiled_pass_threads() -> int:
    """The threads a compiled pass may use: the process's, inside ``comparison_threads`` too."""
    return _outer[0] if _outer else torch.get_num_threads()
