"""RMSNorm backward's dtype path and loop schedules, as data (``goldens.schedule_data``).

Rounding points, in data-flow order: ``rstd`` (a kernel that keeps rstd in a narrower dtype),
``xhat`` (the normalised x, stored by a forward that saves it), ``g`` (dy * w), ``dw_term``
(dy * xhat before dw sums it), and the two output stores ``dw`` and ``dx``. One kernel loops
over M with a tile: ``w`` (dw's cross-tile accumulation, in its accumulator dtype); dx is per row.
"""
from __future__ import annotations

import torch

from goldens.schedule_data import Schedules

SCHEDULES = Schedules(points=("rstd", "xhat", "g", "dw_term", "dw", "dx"), kernels=("w",), outputs=("dw", "dx"))
BF16_FAITHFUL = SCHEDULES.BF16_FAITHFUL
# A fused kernel's usual loop: dw accumulated over tiles of 1024 rows in its BF16 output buffer
TILED_BF16 = SCHEDULES.schedule("tiled-bf16", w=(1024, torch.bfloat16))
TILED_FP32 = SCHEDULES.schedule("tiled-fp32", w=(1024, torch.float32))
# PyTorch's autograd of F.rms_norm: FP32 math from the BF16 inputs, each output stored once,
# dw one global FP32 sum (measured: the graph is ToCopy, Mul, Rsqrt, Mean, Pow in FP32)
TORCH_FP32 = SCHEDULES.schedule("torch-fp32")
# A backend that declares no schedule is diagnosed against the tiled BF16 loop (never gated on it)
SCHEDULES.set_default(TILED_BF16, study=(TILED_BF16, TILED_FP32, TORCH_FP32))
