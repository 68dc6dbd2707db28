"""The comparison's torch arithmetic on one thread, so that no record depends on the process's
thread count.

oneDNN/MKL split a product's inner dimension among threads when its output is too small to share
(measured on a 2-core Xeon with avx512_bf16, torch 2.13: FP32 and FP64 [96 x 1024] @ [1024 x 200]
and every M = 1 row product differ in their last bits between 1 and 2 threads, [512 x 1024] @
[1024 x 1024] does not), and torch's full reductions split their sum likewise (a sum of 196704
FP64 values differs). A fixed order per element is what makes a record reproducible: the same case
gives the same reference, allowance and metrics in a 2-worker matrix and in a one-process rerun on
a 64-core machine. The case matrix gets its parallelism from its workers (``pytest -n auto``, one
per core), so a comparison on one thread costs the matrix nothing; a lone large case runs its
products on one core (``benchmarks/seed_case.py`` measures its roofline the same way).

The compiled passes (``accuracy.compiled_pass``, ``accuracy.localized``) keep the process's
threads: each slice's sums are one thread's, combined in slice order, the same at any count.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_outer: list[int] = []


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread inside, the process's thread count put back after."""
    threads = torch.get_num_threads()
    _outer.append(threads)
    if threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        _outer.pop()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def compiled_pass_threads() -> int:
    """The threads a compiled pass may use: the process's, inside ``one_thread`` too."""
    return _outer[0] if _outer else torch.get_num_threads()
