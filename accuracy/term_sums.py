"""The reductions' term sums the allowance reads (``accuracy.allowance.reduction``), kept per
canonical block of rows by an operator's golden from the reference's (FP64) terms.

An operator's ``golden.term_sums(inputs)`` returns an object with, per reduction output:

* ``abs``       sum over M of |term|                     (the worst case of the roundings)
* ``var``       sum over M of the variance of each term's legitimate BF16 roundings
* ``block``     max over the canonical blocks of the block's sum |terms|
* ``floor_l1``  sum over the terms of |the factor other than the rounded one| (the subnormal
                floor: a rounding among the subnormals is 2^-133, not relative)
* ``shared``    for a contraction, per column, what one rounded upstream value spreads over it
* ``prefix``, ``segment``: set by the golden pass (``goldens.stream``) from the reference's running sums

Read them through ``part(name, output, rows)``: FP64, in the output's units, for a slice of its
rows. ``abs``, ``var`` and ``block`` of an output added with ``unit`` are kept in FP32 in those
units (a [K, N] sum is 180 MB instead of 360 at K=4096, N=11008).

and ``scale_bias(output, exact)``: the largest fitted scale its legitimate paths give on this data,
their stores included (``stored_sum_error``).

``ReductionTermSums`` keeps the first five from per-block parts; an operator that models no
legitimate path's bias uses it as is and is allowed the measured constant
``accuracy.allowance.SCALE_BIAS`` (the RMSNorm backward's hand model); SwiGLU's ``TermSums`` and
the derived operators' ``DerivedTermSums`` compute the bias on the case's data instead.
"""
from __future__ import annotations

import numpy as np
import torch

from accuracy.allowance import SCALE_BIAS
from goldens.blocks import blocks
from goldens.rounding import round_to


def dot64(a: torch.Tensor, b: torch.Tensor) -> float:
    """sum a b in FP64, the same on every machine: the products in FP64, summed by numpy's
    pairwise summation (single-threaded, a fixed order). ``torch.dot`` splits its sum by the
    thread count: at 2049 x 200 random FP32 products it gives 65.1368 with 1 thread and 65.1408
    with 2, and a record must not depend on how many threads the process had."""
    prod = a.reshape(-1).double() * b.reshape(-1).double()
    return float(np.add.reduce(prod.numpy())) if prod.numel() else 0.0


def stored_sum_error(exact: torch.Tensor, carried: torch.Tensor | float = 0.0) -> torch.Tensor:
    """A legitimate path's error on an output it computes in FP32 and stores in BF16, against the
    exact value: its value before the store is the exact one plus the error its stored operands
    carried in (``carried``, FP64, in the output's units), rounded to FP32 and then to BF16 as a
    kernel's store rounds it (``round_to`` from FP64 passes through FP32). The store's own bias
    is a property of that value: dw at M=1 is x dg, an exact product of two BF16 values, which
    rounds toward zero in 60% of its 1/4..1-ULP errors at M1-K96-N200-saturating, while rounding
    the exact FP64 value would show no bias. Non-finite elements count as zero."""
    r = torch.where(torch.isfinite(exact), exact.double(), 0.0)
    return torch.nan_to_num(round_to(r + carried, torch.bfloat16) - r, 0.0, 0.0, 0.0)


def accumulate(sums: dict, key: str, part: torch.Tensor) -> None:
    """sums[key] += part, in place (``part`` is a fresh tensor: the first one is kept as is)."""
    if key in sums:
        sums[key] += part
    else:
        sums[key] = part


class ReductionTermSums:
    """Term sums of the reductions, added block by block in row order (float64, or float32 in
    scaled units where ``add_part`` is given a ``unit``)."""

    def __init__(self):
        self.abs: dict[str, torch.Tensor] = {}
        self.var: dict[str, torch.Tensor] = {}
        self.block: dict[str, torch.Tensor] = {}
        self.floor_l1: dict[str, torch.Tensor] = {}
        self.shared: dict[str, torch.Tensor] = {}
        self.prefix: dict[str, torch.Tensor] = {}
        self.segment: dict[str, torch.Tensor] = {}
        self.units: dict[str, tuple[float, float]] = {}   # output -> (abs and block unit, var unit)
        self.rows_seen = 0

    def part(self, name: str, output: str, rows: slice = slice(None)) -> torch.Tensor:
        """``name`` (abs, var, block, floor_l1, prefix, segment) of ``output``'s ``rows``, FP64 in the
        output's own units (a new tensor, or a view of FP64 storage not to be written)."""
        kept = getattr(self, name)[output][rows]
        unit = self.units.get(output)
        if unit is None or name not in ("abs", "var", "block"):
            return kept.double()
        return kept.double() * (unit[1] if name == "var" else unit[0])

    def add_part(self, output: str, abs_part: torch.Tensor, var_part: torch.Tensor, floor_part: torch.Tensor,
                 shared_part: torch.Tensor | None = None, unit: tuple[float, float] | None = None) -> None:
        """One canonical block's sums of one reduction (each already summed over the block's rows),
        added in place: ``abs_part`` and ``var_part`` are kept as the first block's sums, so pass
        tensors nobody else holds. ``unit``: (abs unit, var unit), powers of two: ``abs_part`` and
        ``var_part`` are FP32 values in these units, scaled so that FP32's range holds them (the
        tiny profile's terms are ~2^-124), and their sums stay FP32. Summed over B blocks in FP32
        their relative error is below B 2^-24 (1.3e-5 at M=220000, 2^-24 at M=2048), on a
        model's variance and worst case; one block's sums are exact."""
        if unit is None:
            abs_part, var_part = abs_part.double(), var_part.double()
        else:
            abs_part, var_part = abs_part.float(), var_part.float()
            if self.units.setdefault(output, unit) != unit:
                raise ValueError(f"term sums of {output}: unit {unit} after {self.units[output]}")
        floor_part = floor_part.double()
        if output in self.abs:
            self.abs[output] += abs_part
            self.var[output] += var_part
            self.floor_l1[output] += floor_part
            torch.maximum(self.block[output], abs_part, out=self.block[output])
        else:
            self.abs[output], self.var[output] = abs_part, var_part
            self.floor_l1[output], self.block[output] = floor_part.clone(), abs_part.clone()
        if shared_part is not None:
            shared_part = shared_part.double()
            if output in self.shared:
                self.shared[output] += shared_part
            else:
                self.shared[output] = shared_part.clone()

    def add_rows(self, output: str, abs_terms: torch.Tensor, var_terms: torch.Tensor, block: int) -> None:
        """A sum over M's terms over some rows whose first is a block edge: per term (one row per
        row of M) |term| and the variance of its legitimate roundings, summed per canonical block of
        ``block`` rows; the subnormal floor counts the block's rows (one rounded factor per term)."""
        for rows in blocks(abs_terms.shape[0], block):
            self.add_part(output, abs_terms[rows].sum(0, keepdim=True), var_terms[rows].sum(0, keepdim=True),
                          torch.full((1, 1), float(rows.stop - rows.start), dtype=torch.float64))
        self.rows_seen += abs_terms.shape[0]

    def scale_bias(self, output: str, exact: torch.Tensor | None = None) -> float:
        """No path modelled: the measured bound of the bias of round to nearest on exact BF16
        products (``accuracy.allowance.SCALE_BIAS``)."""
        return SCALE_BIAS

    def local_bias(self, output: str, exact: torch.Tensor | None = None) -> dict | None:
        """``scale_bias`` per row and column (``operators.swiglu_backward.terms``); None: none."""
        return None
