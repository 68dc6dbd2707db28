"""The Triton kernels' schedules as data: read by the backend and by the tiled golden.

Tile sizes over M come from the article's schedule (``operators/swiglu_backward/kernels/pypto/schedule.py``
ARTICLE: 1024 / 2048 / 1024), never restated here. What the GPU changes is how the
per-tile partials of db and dw are combined, since tiles run in parallel:

* ``TRITON`` (deterministic, backend ``triton``): every tile writes its partial,
  rounded to BF16, to a ``[n_tiles, ...]`` buffer; a second pass adds them in tile
  order into a BF16 running value -- the article's ``out = out + cast(partial, BF16)``
  loop, bit for bit, whatever order the tiles ran in. Stable sigmoid.
* ``TRITON_ARTICLE`` (deterministic, ``operators.swiglu_backward.kernels.triton.backend:triton_article``): the
  same with the article's ``exp(g) / (1 + exp(g))`` sigmoid, i.e. exactly ARTICLE:
  the backend that shows the NaN for g > ~88.7.
* ``TRITON_ATOMIC`` (backend ``triton-atomic``): every tile atomically adds its FP32
  partial into an FP32 buffer, rounded to BF16 once at the end. The FP32 additions
  happen in whatever order the tiles finish, which varies run to run on a GPU; the
  schedule declares FP32 accumulators, so the tiled golden (FP32 adds in loop
  order, one rounding) differs from it only by FP32 reassociation, far below a BF16
  ULP except where the sum cancels. Stable sigmoid.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from operators.swiglu_backward.schedule import RoundingPlan
from operators.swiglu_backward.schedule import ARTICLE

TRITON_ARTICLE = replace(ARTICLE, name="triton-article")
TRITON = replace(ARTICLE, name="triton", plan=RoundingPlan(sigmoid="stable"))
TRITON_ATOMIC = replace(ARTICLE, name="triton-atomic", db_accumulator=torch.float32,
                        dw_accumulator=torch.float32, plan=RoundingPlan(sigmoid="stable"))
