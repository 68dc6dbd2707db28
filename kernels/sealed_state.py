"""Process-wide state a backend can change, captured before its call and restored after.

A backend is someone else's code running in the framework's process: one that calls
``torch.set_flush_denormal(True)`` would make the goldens flush subnormals, one that
calls ``torch.set_grad_enabled(False)`` would break every later autograd backend, and
the blame would land on them. ``sealed()`` captures the state the numbers depend on,
restores it after the call whatever happened, and reports what the backend changed so
its cell can fail with that message while every other cell keeps its verdict.

One leak cannot be undone in place: torch's worker threads started while FTZ/DAZ was
set keep it (``accuracy.platform_facts.fp32_keeps_subnormals``). Then the process
goes on single-threaded, where the calling thread's restored state is the only one
used, and the report of the leak says so.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, fields

import torch

from accuracy.platform_facts import fp32_keeps_subnormals


@dataclass(frozen=True)
class GlobalState:
    grad_enabled: bool
    default_dtype: torch.dtype
    num_threads: int
    deterministic_algorithms: bool
    deterministic_warn_only: bool
    float32_matmul_precision: str
    cuda_matmul_allow_tf32: bool
    cuda_allow_bf16_reduced_precision_reduction: bool
    cuda_allow_fp16_reduced_precision_reduction: bool
    cudnn_allow_tf32: bool
    mkldnn_enabled: bool
    cpu_autocast: bool
    cwd: str
    subnormals_kept: bool      # FP32 on the calling and worker threads keeps subnormals


def capture() -> GlobalState:
    return GlobalState(
        grad_enabled=torch.is_grad_enabled(),
        default_dtype=torch.get_default_dtype(),
        num_threads=torch.get_num_threads(),
        deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
        deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        cuda_matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
        cuda_allow_bf16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        cuda_allow_fp16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
        mkldnn_enabled=torch.backends.mkldnn.enabled,
        cpu_autocast=torch.is_autocast_enabled("cpu"),
        cwd=os.getcwd(),
        subnormals_kept=fp32_keeps_subnormals("cpu"),
    )


def restore(state: GlobalState) -> list[str]:
    """Put ``state`` back; returns what could not be restored in place (and how it was worked around)."""
    torch.set_grad_enabled(state.grad_enabled)
    torch.set_default_dtype(state.default_dtype)
    torch.use_deterministic_algorithms(state.deterministic_algorithms, warn_only=state.deterministic_warn_only)
    torch.set_float32_matmul_precision(state.float32_matmul_precision)
    torch.backends.cuda.matmul.allow_tf32 = state.cuda_matmul_allow_tf32
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = state.cuda_allow_bf16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = state.cuda_allow_fp16_reduced_precision_reduction
    torch.backends.cudnn.allow_tf32 = state.cudnn_allow_tf32
    torch.backends.mkldnn.enabled = state.mkldnn_enabled
    torch.set_autocast_enabled("cpu", state.cpu_autocast)
    with contextlib.suppress(OSError):
        os.chdir(state.cwd)
    torch.set_num_threads(state.num_threads)
    notes = []
    if state.subnormals_kept and not fp32_keeps_subnormals("cpu"):
        torch.set_flush_denormal(False)
        if not fp32_keeps_subnormals("cpu"):
            torch.set_num_threads(1)
            notes.append("torch's worker threads kept FTZ/DAZ after it was unset: this process continues "
                         "single-threaded, so the goldens do not flush")
    return notes


def changes(before: GlobalState, after: GlobalState) -> list[str]:
    return [f"{f.name} {getattr(before, f.name)!r} -> {getattr(after, f.name)!r}" for f in fields(GlobalState)
            if getattr(before, f.name) != getattr(after, f.name)]


@dataclass
class Seal:
    """What the sealed call changed (restored afterwards) and what could only be worked around."""
    changed: list[str]
    notes: list[str]

    def message(self, backend: str) -> str | None:
        if not self.changed:
            return None
        text = (f"backend {backend!r} changed process-wide state: {'; '.join(self.changed)}. The framework "
                f"restored it; a kernel must leave global state as it found it")
        return text + ("; " + "; ".join(self.notes) if self.notes else "")


@contextlib.contextmanager
def sealed() -> Iterator[Seal]:
    """Run the body with the process state captured before and restored after; the yielded
    ``Seal`` is filled in when the body ends (normally or not)."""
    before = capture()
    seal = Seal([], [])
    try:
        yield seal
    finally:
        after = capture()
        seal.changed = changes(before, after)
        seal.notes = restore(before) if seal.changed else []
        # the restored threads count may have been lowered to keep the goldens clean
        if seal.notes:
            seal.changed.append("worker threads flush subnormals")
