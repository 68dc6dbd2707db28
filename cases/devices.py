"""Which device a pytest worker evaluates its cases on, and where the goldens run.

``--device cuda`` or ``--device npu`` without an index gives xdist worker ``gw<i>`` the device
``i mod count`` of the devices visible to the run (``CUDA_VISIBLE_DEVICES`` /
``ASCEND_RT_VISIBLE_DEVICES``: torch numbers the visible list from 0, so an index here is a
position in the caller's list, never a physical id; CANN wants that list in ascending order,
which ``cases/ray_launch.py`` guarantees for the shards it starts). Inputs and every backend run
there. An explicit index (``cuda:1``) pins every worker to that device.

The goldens run on the same device, except on Ascend NPUs: their vector and cube units have no
FP64 arithmetic the FP64 reference could use, so the goldens stay on the host (the outputs are
moved there once per case). The choice is recorded in the run manifest (``devices``) and on
every record (``device``, ``golden_device``).
"""
from __future__ import annotations

import re

GOLDENS_ON_HOST = ("npu",)


def kind_of(device: str) -> str:
    return str(device).split(":")[0]


def visible_count(kind: str) -> int:
    import torch
    if kind == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    if kind == "npu":
        import torch_npu  # noqa: F401  (registers torch.npu)
        return torch.npu.device_count()
    return 0


def worker_device(requested: str, worker: str | None, count: int | None = None) -> str:
    """The device of xdist worker ``worker`` (``gw3``; None outside xdist) for ``--device requested``;
    ``count``: the visible devices of that kind (counted here when not given)."""
    kind = kind_of(requested)
    if kind == "cpu" or ":" in str(requested):
        return str(requested)
    if count is None:
        count = visible_count(kind)
    if count < 1:
        raise ValueError(f"--device {requested}: no {kind} device is visible")
    match = re.fullmatch(r"gw(\d+)", worker or "")
    return f"{kind}:{int(match.group(1)) % count if match else 0}"


def golden_device(device: str) -> str:
    return "cpu" if kind_of(device) in GOLDENS_ON_HOST else str(device)


def describe(requested: str) -> dict:
    """The run manifest's ``devices`` entry."""
    kind = kind_of(requested)
    per_worker = (str(requested) if kind == "cpu" or ":" in str(requested)
                  else f"xdist worker gw<i> -> {kind}:<i mod the visible {kind} devices>")
    return {"requested": str(requested), "per_worker": per_worker, "goldens": golden_device(requested)}
