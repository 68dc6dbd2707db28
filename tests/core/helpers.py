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


def errors_around_the_atol(tol, rows: int, width: int, gen: torch.Generator):
    """(golden FP64, actual FP64, the golden's rms): one large column sets the rms, so the atol
    (``tol.effective_atol(rms)``) is far above the other columns' rtol share, and every element
    errs by 0..1.1 atol: nearly every excess is positive and the count depends on where the atol
    falls (the kept excess of a comparison whose atol is not known yet)."""
    golden = torch.randn(rows, width, generator=gen, dtype=torch.float64) * 1e-5
    golden[:, 0] *= 1000                        # one column sets the rms (every row: it grows evenly)
    rms = float(golden.float().double().square().mean().sqrt())
    actual = golden + torch.rand(rows, width, generator=gen, dtype=torch.float64) * 1.1 * tol.effective_atol(rms)
    return golden, actual, rms
