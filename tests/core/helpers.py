"""Small hand-checkable inputs for the framework's own tests."""
from __future__ import annotations

import torch

from cases.spec import CaseSpec, make_inputs


def tiny_inputs(m: int = 5, k: int = 3, n: int = 4, seed: int = 0, scale: float = 1.0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shapes = {"x": (m, k), "w_g": (k, n), "w_fc": (k, n), "dy": (m, n), "g": (m, n), "fc": (m, n)}
    return {name: (torch.randn(*s, generator=gen) * scale).to(torch.bfloat16) for name, s in shapes.items()}


def case_inputs(m: int, k: int = 96, n: int = 200, scale: str = "unit", seed: int = 0):
    return make_inputs(CaseSpec(m, k, n, scale, seed))
