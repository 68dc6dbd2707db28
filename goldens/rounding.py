"""A store's rounding, applied in place of the store: the one primitive every golden is built from."""
from __future__ import annotations

import torch


def round_to(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """Round to ``dtype`` and back: the value a store would leave, in t's container."""
    return t if dtype is None or dtype == t.dtype else t.to(dtype).to(t.dtype)
