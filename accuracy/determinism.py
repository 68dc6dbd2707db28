"""Run-to-run determinism of a backend, as data.

``determinism(backend, inputs, repeats=R)`` runs the backend R times, each time on
fresh clones of the same inputs, and reports per output whether all R results are
bit-identical; where they are not, how many elements differ and by how much
(max abs spread and max spread in units in the last place of the output's dtype,
over the R runs). It never raises: a backend that cannot run the case
(``BackendUnsupported``) gives ``{"status": "unsupported", "reason": ...}``, any
other exception ``{"status": "error", ...}``. Everything returned is JSON-serialisable.

Why it matters here: a GPU kernel that combines tiles with atomics adds its FP32
partials in whatever order the tiles finish, so the last bit of db / dw may
change between identical runs; a kernel that reduces in tile order may not.

Memory: only the first run's outputs and running min / max per output are kept,
so R does not multiply the footprint.
"""
from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Iterable, Mapping

import torch

from contract.backend import BackendUnsupported, clone_inputs, mutated_inputs

_INT_OF = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def ordinal(t: torch.Tensor) -> torch.Tensor:
    """Monotone integer position of each float on its dtype's grid (int64): consecutive
    representable values differ by 1, across binades and through zero (+0 == -0).
    NaN maps to an arbitrary position; callers mask it."""
    if not t.dtype.is_floating_point:
        return t.to(torch.int64)
    bits = t.contiguous().view(_INT_OF[t.element_size()]).to(torch.int64)
    magnitude_mask = (1 << (8 * t.element_size() - 1)) - 1
    return torch.where(bits < 0, -(bits & magnitude_mask), bits)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point:
        n = _INT_OF[a.element_size()]
        return a.contiguous().view(n) == b.contiguous().view(n)
    return a == b


class _Spread:
    """Streaming per-element state of one output over the runs."""

    def __init__(self, first: torch.Tensor):
        self.first = first.detach().clone()
        self.differs = torch.zeros(first.shape, dtype=torch.bool, device=first.device)
        self.any_nan = torch.isnan(first) if first.dtype.is_floating_point else torch.zeros_like(self.differs)
        self.all_nan = self.any_nan.clone()
        v = first.detach().double()
        self.vmin, self.vmax = v.clone(), v.clone()
        o = ordinal(first)
        self.omin, self.omax = o.clone(), o.clone()
        self.shape_changed = False

    def add(self, t: torch.Tensor) -> None:
        if t.shape != self.first.shape or t.dtype != self.first.dtype:
            self.shape_changed = True
            return
        t = t.detach().to(self.first.device)
        self.differs |= ~same_bits(t, self.first)
        nan = torch.isnan(t) if t.dtype.is_floating_point else torch.zeros_like(self.differs)
        self.any_nan |= nan
        self.all_nan &= nan
        v = t.double()
        # fmin/fmax skip NaN, so a NaN in one run does not hide the other runs' spread
        self.vmin = torch.fmin(self.vmin, v)
        self.vmax = torch.fmax(self.vmax, v)
        o = ordinal(t)
        self.omin = torch.minimum(self.omin, o)
        self.omax = torch.maximum(self.omax, o)

    def record(self) -> dict:
        numel = self.first.numel()
        if self.shape_changed:
            return {"bit_identical": False, "numel": numel, "differing_elements": numel,
                    "note": "shape or dtype changed between runs"}
        differing = int(self.differs.sum())
        rec = {"bit_identical": differing == 0, "numel": numel, "differing_elements": differing,
               "differing_fraction": differing / numel if numel else 0.0,
               "max_abs_spread": 0.0, "max_ulp_spread": 0, "nan_mismatch": 0, "first_differing_index": None}
        if differing == 0:
            return rec
        finite = ~self.any_nan          # elements that are numbers in every run
        spread = (self.vmax - self.vmin).masked_fill(~finite, 0.0)
        ulp = (self.omax - self.omin).masked_fill(~finite, 0)
        rec["max_abs_spread"] = _num(spread.max())
        rec["max_ulp_spread"] = int(ulp.max())
        rec["nan_mismatch"] = int((self.any_nan & ~self.all_nan).sum())
        rec["first_differing_index"] = [int(i) for i in self.differs.nonzero()[0]]
        worst = int(ulp.flatten().argmax())
        rec["worst_ulp_index"] = [int(i) for i in torch.unravel_index(torch.tensor(worst), self.first.shape)]
        rec["worst_ulp_values"] = [_num(self.vmin.flatten()[worst]), _num(self.vmax.flatten()[worst])]
        return rec


def _num(v) -> float | None:
    f = float(v)
    return f if math.isfinite(f) else (None if math.isnan(f) else f)


def compare_runs(runs: Iterable[Mapping[str, torch.Tensor]]) -> dict:
    """Per-output determinism record of already computed runs (at least one)."""
    spreads: dict[str, _Spread] = {}
    count = 0
    for run in runs:
        count += 1
        for name, t in run.items():
            if name not in spreads:
                spreads[name] = _Spread(t)
            else:
                spreads[name].add(t)
    outputs = {name: s.record() for name, s in spreads.items()}
    return {"repeats": count, "outputs": outputs,
            "bit_identical": all(r["bit_identical"] for r in outputs.values())}


def determinism(backend: Callable, inputs: Mapping[str, torch.Tensor], *, repeats: int = 5,
                name: str | None = None) -> dict:
    """Run ``backend(**clone_of_inputs)`` ``repeats`` times and compare the outputs bit for bit.

    Returns ``{"backend", "repeats", "status": "ok"|"unsupported"|"error", "bit_identical",
    "outputs": {output: record}, "mutated_inputs": [...]}``; never raises.
    """
    label = name or getattr(backend, "name", None) or getattr(backend, "__name__", repr(backend))
    result = {"backend": label, "repeats": repeats, "status": "ok", "bit_identical": None,
              "outputs": {}, "mutated_inputs": []}
    if repeats < 2:
        return {**result, "status": "error", "reason": f"repeats must be >= 2 to compare runs, got {repeats}"}
    mutated: set[str] = set()

    def runs():
        for _ in range(repeats):
            args = clone_inputs(inputs)
            out = backend(**args)
            mutated.update(mutated_inputs(inputs, args))
            yield {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}

    try:
        record = compare_runs(runs())
    except BackendUnsupported as exc:
        return {**result, "status": "unsupported", "reason": str(exc)}
    except Exception as exc:  # a metric reports; only gates raise
        return {**result, "status": "error", "reason": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=5)}
    return {**result, **record, "mutated_inputs": sorted(mutated)}
