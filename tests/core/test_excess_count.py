"""The mismatch count made while the atol is unknown (``ErrorStats``'s kept excess, its floor and
its falling ceiling) against the count made with the atol known from the start, over random
data, caps and floors: a count called exact is the known count; a range always holds it."""
from __future__ import annotations

import math

import pytest
import torch

import accuracy.metrics as metrics_module
from accuracy.metrics import ErrorStats
from accuracy.tolerances import tolerances_for
from operators.swiglu_backward import OPERATOR as SWIGLU
from tests.core.helpers import errors_around_the_atol

ROWS, WIDTH, CHUNK = 2048, 32, 256


def _data(kind: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    golden = torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64)
    if kind == "zeros":                                   # every element far off
        actual = torch.zeros_like(golden)
    elif kind == "near_atol":     # most excess just under the atol: a small cap's ceiling falls below it
        golden, actual, _ = errors_around_the_atol(tolerances_for(SWIGLU)["dg"], ROWS, WIDTH, gen)
    elif kind == "tail":                                  # right but for the last rows
        actual = golden.clone()
        actual[-300:] *= 1.1
    else:                                                 # random sign noise of a few percent
        actual = golden * (1 + 0.03 * torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64))
    return actual.to(torch.bfloat16), golden


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("kind", ["zeros", "near_atol", "tail", "noise"])
def test_an_exact_count_is_the_known_count_and_a_range_holds_it(monkeypatch, compiled, kind):
    tol = tolerances_for(SWIGLU)["dg"]
    gen = torch.Generator().manual_seed(hash(kind) % 1000)
    actual, golden = _data(kind, gen)
    rms = float(golden.float().double().square().mean().sqrt())
    seen_exact = seen_range = 0
    for cap in (5, 64, 700, 1 << 22):
        monkeypatch.setattr(metrics_module, "EXCESS_CAP", cap)
        known = ErrorStats(tol, (ROWS, WIDTH), scale_rms=rms)
        streamed = ErrorStats(tol, (ROWS, WIDTH))
        if not compiled:
            for st in (known, streamed):
                monkeypatch.setattr(st, "_update_compiled", lambda *a, **k: False)
        sq = 0.0
        for start in range(0, ROWS, CHUNK):
            part = slice(start, start + CHUNK)
            sq += float(golden[part].float().double().square().sum())
            streamed.raise_excess_floor(tol.effective_atol(math.sqrt(sq / (ROWS * WIDTH))))
            known.update(actual[part], golden[part], row_offset=start)
            streamed.update(actual[part], golden[part], row_offset=start)
            assert streamed.n_excess_kept <= cap + CHUNK * WIDTH
        streamed.settle_atol(rms)
        k, s = known.finalize(), streamed.finalize()
        if s["mismatches_exact"]:
            seen_exact += 1
            assert s["mismatches"] == k["mismatches"], (cap, s["mismatches"], k["mismatches"])
            assert not streamed.overflowed
        else:
            seen_range += 1
            assert streamed.overflowed
            assert s["mismatches"] <= k["mismatches"] <= s["mismatches_upper"], cap
    assert seen_exact >= 1          # the roomy cap at least
    if kind == "zeros":             # far off: exact at every cap, in one pass
        assert seen_range == 0
    if kind == "near_atol":         # the case the second pass is kept for
        assert seen_range >= 1
