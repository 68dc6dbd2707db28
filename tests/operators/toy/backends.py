"""The toy operator's backends: PyTorch's BF16 ops, the tiled emulation, and a wrong kernel."""
from __future__ import annotations

import torch

from goldens.layers import tiled_emulation
from tests.operators.toy import OPERATOR, TILED, TORCH_BF16


def torch_bf16(*, a, b, s):
    p = a * b                                     # BF16: the product is rounded (a legitimate choice)
    return {"y": p * s, "z": p.float().sum(0, keepdim=True).to(torch.bfloat16)}


def tiled(*, a, b, s):
    return {k: v.to(torch.bfloat16) for k, v in tiled_emulation(OPERATOR, {"a": a, "b": b, "s": s}, TILED).items()}


def first_row_dropped(*, a, b, s):
    """z misses row 0 (a loop that starts at 1): wrong by a whole term in every column."""
    out = torch_bf16(a=a, b=b, s=s)
    out["z"] = (a[1:] * b[1:]).float().sum(0, keepdim=True).to(torch.bfloat16)
    return out


torch_bf16.schedule = TORCH_BF16
tiled.schedule = TILED
