"""Compare backends' outputs with every golden layer in one streaming pass.

For each backend x output x golden layer one ``ErrorStats`` is filled chunk by
chunk. What the gate reads is the same for every backend, whatever it declares:

    reference  FP64 from the BF16 inputs, each output rounded once to BF16, with the
               allowance of the operator's legitimate choices (``accuracy.allowance``,
               ``operators.<name>.gate``) and the aggregate tests' sums (fitted scale,
               rounding direction);
    own        the downstream outputs recomputed from the kernel's own upstream outputs
               (SwiGLU: db, dw, dx from its stored dg, dfc; ``operators.<name>.gate.own``):
               an accumulation or tiling bug shows there without the amplification of a
               cancelling sum.

The layers of the backend's declared schedule (faithful, tiled) serve diagnosis: the
FP64 comparisons carry the rounding-model bound of that schedule, and the goldens
compared with each other split each backend's error into its three sources
(``attribution``):

    storage    = faithful - fp64      (BF16 stores of the dtype path)
    tile order = tiled - faithful     (the schedule's per-tile casts and order)
    kernel     = kernel - tiled       (what the kernel adds on top of its schedule)

Nothing here raises on bad numbers; it returns data for the gate and the report.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Mapping

import torch

from accuracy import allowance
from accuracy.bounds import unit_roundoff
from accuracy.metrics import SLICE_ELEMENTS, ErrorStats, row_slices
from accuracy.term_sums import accumulate, dot64
from goldens.threads import comparison_threads
from accuracy.tile_drift import TileDriftRecorder
from accuracy.tolerances import Tolerance, tolerances_for
from contract.operator import ROUNDED_TERMS, Operator
from contract.schedule import TiledSchedule
from goldens.blocks import blocks, operand_sum
from goldens.emulation import served_outputs
from goldens.rounding import round_to
from goldens.stream import GoldenPass

REFERENCE = "reference"      # the gated golden: FP64 from the BF16 inputs, each output rounded once
OWN = "own"                  # recomputed from the kernel's own upstream outputs (``gate.own``)
# A reduction output is compared in row slices of about this many elements (64 MiB per FP64
# temporary): its allowance's temporaries for a whole [K, N] dw at K=4096, N=11008 (360 MB each)
# set the comparison's peak.
REDUCTION_SLICE_ELEMENTS = 1 << 23


@dataclass(frozen=True)
class GoldenPair:
    """Two golden layers compared with each other: ``layer`` measured against ``reference``."""
    layer: str
    reference: str

    def __str__(self) -> str:
        return f"{self.layer} vs {self.reference}"


def golden_layers(operator: Operator, sched: TiledSchedule, diagnose: bool = True) -> dict[str, str]:
    """The golden layers a backend with this schedule is compared with: generic name -> layer key.
    The reference and the FP64 ideal are the same for every backend; the faithful and tiled layers
    follow the backend's declared schedule and serve diagnosis only (left out without ``diagnose``)."""
    names = {REFERENCE: "fp64", "fp64": "fp64"}
    if diagnose:
        names.update(faithful=f"faithful:{operator.schedules.faithful_schedule(sched.plan).name}", tiled=f"tiled:{sched.name}")
    return names


def _sum_squares(t: torch.Tensor) -> tuple[float, int]:
    """(sum of squares, count) of the finite values, in FP64 (as ``ErrorStats`` sums its golden's),
    in cache-sized slices."""
    flat = t.reshape(-1)
    total, count = 0.0, 0
    for start in range(0, flat.numel(), SLICE_ELEMENTS):
        part = flat[start:start + SLICE_ELEMENTS].float()
        low, high = torch.aminmax(part) if part.numel() else (torch.tensor(0.0), torch.tensor(0.0))
        if not (math.isfinite(float(low)) and math.isfinite(float(high))):
            part = part[torch.isfinite(part)]
        part = part.double()
        total += dot64(part, part)
        count += part.numel()
    return total, count


def _rms(sum_squares: float, count: int) -> float:
    return (sum_squares / count) ** 0.5 if count else 0.0


def _tiles_and_accumulator(operator: Operator, output: str, sched: TiledSchedule, m: int) -> tuple[int, int, float]:
    kernel = operator.output(output).kernel
    acc = sched.accumulator(kernel)
    return sched.n_tiles(m, kernel), sched.tile_m(kernel) or m, unit_roundoff(acc)


def _update_gated(st: ErrorStats, actual: torch.Tensor, exact: torch.Tensor, reference: torch.Tensor,
                  model: "allowance.Allowance", row_offset: int = 0) -> None:
    """The gated comparison: against the reference (``exact`` rounded once to BF16) with the
    model's allowance, and the aggregate tests' sums against ``exact``."""
    st.update(actual, reference, row_offset=row_offset, allowance=model.vs_reference,
              exact=exact, noise_var=model.noise_var, shared_var=model.shared_var, shared_axis=model.shared_axis,
              shared_total=model.shared_total, direction=model.direction, toward_zero=model.toward_zero,
              shared_rows=model.shared_rows, element_var=model.element_var)


class _OwnSums:
    """The reductions of one backend recomputed from its own upstream outputs (the operands of
    ``gate.own``), summed in FP32 per canonical block like the golden's."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}

    def add(self, operands: Mapping[str, tuple[torch.Tensor | None, torch.Tensor]]) -> None:
        """``operands``: per reduction, ``(None, rhs)`` (a sum over rows) or ``(lhs, rhs)``
        (lhs^T rhs) over a chunk whose first row is a block edge."""
        for o, (lhs, rhs) in operands.items():
            for rows in blocks(rhs.shape[0]):
                accumulate(self.sums, o, operand_sum(None if lhs is None else lhs[rows], rhs[rows]))


def compare_case(operator: Operator, inputs: Mapping[str, torch.Tensor],
                 outputs: Mapping[str, Mapping[str, torch.Tensor]],
                 schedules: Mapping[str, TiledSchedule], *, tolerances: Mapping[str, Tolerance] | None = None,
                 chunk_rows: int | None = None, diagnose: bool = True,
                 row_rms: Mapping[str, float] | None = None, progress=None,
                 served: Mapping[str, TiledSchedule] | None = None) -> dict:
    """``outputs[backend]`` are validated backend outputs; ``schedules[backend]`` the schedule
    each backend declares (its faithful and tiled goldens, for diagnosis); ``served[backend]``:
    a schedule emulation's schedule, whose outputs are that schedule's tiled layer of this pass
    (``goldens.emulation``), compared like any backend's. Every backend is gated
    against the same reference with the same allowance (``accuracy.allowance``), and its
    downstream outputs against its own upstream ones (the operator gate's ``OWN_SOURCE``); the
    verdict reads nothing else, so ``diagnose=False`` (no faithful or tiled layers, and of the FP64
    comparison only the dual verdict's metrics) gives the same verdicts. ``row_rms``: the row
    outputs' reference rms when already known (``CaseComparison``).
    Returns ``{"backends": {backend: {output: {golden: metrics}}},
    "goldens": {GoldenPair: {output: metrics}}, "ideal": {output: metrics of the reference vs FP64},
    "tile_drift": {tiled layer: {reduction: per-tile drift}} (``accuracy.tile_drift``),
    "attribution": {backend: {output: {...}}}}``.

    The steps: the row outputs block by block as the golden pass streams them; where a row
    output's count against its atol is not exact (values counted above the kept excess's ceiling
    on an unknown side of the final atol: ``ErrorStats.overflowed``), a second pass with the row
    outputs' rms known from the first; then the reductions over M, complete after the pass; then
    the records. ``progress``: told each pass's start (``stage(name)``) and its rows done
    (``rows(done, m)``), e.g. ``cases.progress.CaseProgress``. torch runs on a fixed number of
    threads inside (``goldens.threads``): the records do not depend on the process's thread count."""
    with comparison_threads():
        args = dict(tolerances=tolerances, chunk_rows=chunk_rows, diagnose=diagnose, served=served)
        comparison = CaseComparison(operator, inputs, outputs, schedules, row_rms=row_rms, **args)
        if progress is not None:
            progress.stage("goldens and comparison")
        comparison.compare_rows(progress)
        if comparison.needs_second_pass():
            known = comparison.row_rms()
            del comparison          # not held through the second pass
            comparison = CaseComparison(operator, inputs, outputs, schedules, row_rms=known, **args)
            if progress is not None:
                progress.stage("second comparison pass (the row outputs' rms known)")
            comparison.compare_rows(progress)
        comparison.compare_reductions()
        return comparison.result()


class CaseComparison:
    """One case's comparison of every backend's outputs with the goldens of one golden pass.

    Every comparison of an output takes its magnitude-aware atol from the rms of the output's
    reference. db, dw: known after the golden pass, before their single update. Row outputs:
    summed as their rows stream past, while each comparison keeps the elements whose excess is
    above a lower bound of the atol: the atol of the rms the reference's rows so far give over
    all of the output's elements, which only grows towards the final one (at the first of
    107 chunks of the article's case about a tenth of it; kept values it passes are dropped).
    The count against the atol is made once the rms is known. At most ``metrics.EXCESS_CAP``
    values are held: beyond it the largest are counted and let go, which keeps the count exact
    while the final atol is below them (a kernel far off: the all-zero kernel at M=16384 is
    judged in 1.1x torch-eager's CPU time, 2.4x with the second pass it needed before); where it
    is not, the case is compared again with the rms known from the start (``row_rms``). The
    diagnosis layers compare without an allowance: where a sum cancels, 22% of torch-eager's
    dx elements exceed rtol |FP64| (M=16384, seed profile); above the rising floor, at most
    0.5% of the elements are held at once. The FP64 comparisons also keep msprobe's metrics
    (``accuracy.dual``); the reference's own (``ideal``) are the floor of the dual verdict's
    ratios."""

    def __init__(self, operator: Operator, inputs: Mapping[str, torch.Tensor],
                 outputs: Mapping[str, Mapping[str, torch.Tensor]], schedules: Mapping[str, TiledSchedule], *,
                 tolerances: Mapping[str, Tolerance] | None = None, chunk_rows: int | None = None,
                 diagnose: bool = True, row_rms: Mapping[str, float] | None = None,
                 served: Mapping[str, TiledSchedule] | None = None):
        self.operator, self.inputs, self.outputs, self.schedules = operator, inputs, outputs, schedules
        self.backends = (*outputs, *(served or {}))
        self.diagnose, self.known_row_rms = diagnose, row_rms
        # recomputed from a kernel's own upstream outputs
        self.own_outputs = tuple(operator.gate.OWN_SOURCE)
        self.tolerances = tolerances_for(operator) if tolerances is None else tolerances
        self.sizes = operator.sizes(inputs)
        self.m = self.sizes[operator.dims[0]]
        self.shapes = operator.output_shapes(self.sizes)
        layers = {"fp64": operator.schedules.FP64_GLOBAL}
        self.pairs: list[GoldenPair] = []   # the goldens compared with each other
        for sched in (schedules.values() if diagnose else ()):
            names = golden_layers(operator, sched)
            layers.setdefault(names["faithful"], operator.schedules.faithful_schedule(sched.plan))
            layers.setdefault(names["tiled"], sched)
            for pair in (GoldenPair(names["faithful"], "fp64"), GoldenPair(names["tiled"], names["faithful"])):
                if pair not in self.pairs:
                    self.pairs.append(pair)
        # a served emulation's outputs: its schedule's tiled layer, computed once for it and for
        # every backend that declares the schedule
        self.served_layers: dict[str, str] = {}
        for b, sched in (served or {}).items():
            name = f"tiled:{sched.name}"
            if layers.setdefault(name, sched) != sched:      # another schedule of the same name
                name = f"served:{b}"
                layers[name] = sched
            self.served_layers[b] = name
        # the tiled layers' per-tile drift, recorded by the pass itself (the report's heatmap reads it)
        self.drift = TileDriftRecorder({name: s for name, s in layers.items()
                                        if name.startswith("tiled:") and not s.is_global},
                                       {o: operator.output(o).kernel for o in operator.reduction_outputs}, self.m)
        self.golden_pass = GoldenPass(operator, inputs, layers, chunk_rows=chunk_rows, terms=True,
                                      tile_observer=self.drift.observe)
        self.terms = self.golden_pass.terms
        self.rms: dict[str, float] = dict(row_rms or {})
        self.row_sums = {o: [0.0, 0] for o in operator.row_outputs}
        self.ideal = {o: ErrorStats(self.tolerances[o], self.shapes[o], dual_only=True) for o in operator.row_outputs}
        self.per_backend: dict = {b: {} for b in self.backends}
        self.between: dict[GoldenPair, dict] = {pair: {} for pair in self.pairs}
        for o in operator.row_outputs:
            self._add_output(o)
        self.own_sums = {b: _OwnSums() for b in self.backends}
        self.weights = {name: inputs[name].float() for name in operator.input_names
                        if name not in operator.row_inputs}
        self.shared_rows: set = set()   # (backend, output) whose tiled rows are the faithful rows

    def _goldens_of(self, b: str, o: str) -> list[str]:
        names = list(golden_layers(self.operator, self.schedules[b], self.diagnose))
        return names + [OWN] if o in self.own_outputs else names

    def _add_output(self, o: str) -> None:
        """The comparisons of output ``o``, with its reference rms where it is known."""
        tol, shape, rms = self.tolerances[o], self.shapes[o], self.rms.get(o)
        for b in self.backends:
            # without diagnosis the FP64 comparison serves the dual verdict alone: its metrics only
            self.per_backend[b][o] = {g: ErrorStats(tol, shape, dual=g == "fp64",
                                                    dual_only=g == "fp64" and not self.diagnose, scale_rms=rms)
                                      for g in self._goldens_of(b, o)}
        for per_output in self.between.values():
            per_output[o] = ErrorStats(tol, shape, scale_rms=rms)

    def _row_stats(self, o: str) -> list[ErrorStats]:
        return [*(st for stats in self.per_backend.values() for st in stats[o].values()),
                *(per_output[o] for per_output in self.between.values())]

    def compare_rows(self, progress=None) -> None:
        """The row outputs, block by block as the golden pass streams them (the reductions'
        goldens are complete after it); ``progress.rows(done, m)`` after each block."""
        numel = {o: math.prod(self.shapes[o]) for o in self.operator.row_outputs}
        for block in self.golden_pass.blocks():
            self._compare_block(block, numel)
            if progress is not None:
                progress.rows(block.stop, self.m)
            # the block's goldens and rounding model go before the pass computes the next, not
            # after: the loop's name held them through it (a derived golden's model of 1024 rows,
            # about 0.4 GB at K = 512, N = 1024, was held beside the next block's)
            block = None

    def _compare_block(self, block, numel: Mapping[str, int]) -> None:
        op, gate, sizes, diagnose = self.operator, self.operator.gate, self.sizes, self.diagnose
        models: dict[str, allowance.Allowance] = {}
        references = {o: round_to(block.rows["fp64"][o], op.output_dtype(o)) for o in op.row_outputs}
        if self.known_row_rms is None:
            for o in op.row_outputs:
                sq, count = _sum_squares(references[o])
                self.row_sums[o][0] += sq
                self.row_sums[o][1] += count
                # at most the final atol: the sum only grows and the final rms divides by the
                # finite count, at most ``numel``
                floor = self.tolerances[o].effective_atol(_rms(self.row_sums[o][0], numel[o]))
                for st in self._row_stats(o):
                    st.raise_excess_floor(floor)

        def model_of(o: str) -> allowance.Allowance:
            if o not in models:
                models[o] = gate.row_allowance(o, block.rows["fp64"][o], block.terms, self.terms, sizes)
            return models[o]

        raw = {name: self.inputs[name][block.start:block.stop] for name in op.row_inputs}
        backend_rows = {b: self._block_rows(b, block) for b in self.backends}
        for b, kernel_rows in backend_rows.items():
            own = gate.own(raw, self.weights, kernel_rows)
            self.own_sums[b].add(own.operands)
            for o, recomputed in own.rows.items():
                self.per_backend[b][o][OWN].update(kernel_rows[o], recomputed, row_offset=block.start,
                                                   allowance=model_of(o).vs_own)
        for o in op.row_outputs:
            exact = block.rows["fp64"][o]
            reference = references.pop(o)
            self.ideal[o].update(reference, exact, row_offset=block.start)
            model = model_of(o)
            rounded = o + ROUNDED_TERMS
            for b, kernel_rows in backend_rows.items():
                actual = kernel_rows[o]
                _update_gated(self.per_backend[b][o][REFERENCE], actual, exact, reference, model, block.start)
                bound = gate.bound(o, exact, block.terms.abs, self.schedules[b], sizes) if diagnose else None
                # the diagnosis layers: one rounding of a stored term may flip (the operator's
                # allowance against its own upstream outputs), nothing over M
                noise = model.vs_own
                names = golden_layers(op, self.schedules[b], diagnose)
                for g in names:
                    if g == REFERENCE:
                        continue
                    st = self.per_backend[b][o][g]
                    golden = block.rows[names[g]]
                    if g == "tiled" and golden is block.rows[names["faithful"]]:
                        continue   # same dtype path, same rows: the faithful stats serve (copied in ``result``)
                    st.update(actual, golden[o], bound if g == "fp64" else None, row_offset=block.start,
                              rounded_terms=golden.get(rounded),
                              allowance=noise if g != "fp64" else None)
                    if g == "faithful":
                        self.shared_rows.add((b, o))
            for pair in self.pairs:
                a, b = block.rows[pair.layer], block.rows[pair.reference]
                if a is b:
                    continue   # identical rows: nothing to compare, the stats record zero error
                self.between[pair][o].update(a[o], b[o], row_offset=block.start, rounded_terms=b.get(rounded))
            models.pop(o)

    def _block_rows(self, b: str, block) -> dict[str, torch.Tensor]:
        """Backend ``b``'s row outputs in this block: its own, or a served emulation's tiled layer."""
        if b in self.served_layers:
            layer = block.rows[self.served_layers[b]]
            return served_outputs(self.operator, {o: layer[o] for o in self.operator.row_outputs})
        return {o: self.outputs[b][o][block.start:block.stop] for o in self.operator.row_outputs}

    def _reduction(self, b: str, o: str) -> torch.Tensor:
        """Backend ``b``'s reduction output ``o``: its own, or a served emulation's tiled layer."""
        if b in self.served_layers:
            return served_outputs(self.operator, {o: self.golden_pass.reductions[self.served_layers[b]][o]})[o]
        return self.outputs[b][o]

    def needs_second_pass(self) -> bool:
        """Settle the row outputs' atols on their final rms (a first pass, rms not known before);
        True where a count against an atol is not exact, so the rows must be compared again with
        the rms known from the start."""
        if self.known_row_rms is not None:
            return False
        for o in self.operator.row_outputs:
            self.rms[o] = _rms(*self.row_sums[o])
            for st in self._row_stats(o):
                st.settle_atol(self.rms[o])
        return any(st.overflowed for o in self.operator.row_outputs for st in self._row_stats(o))

    def row_rms(self) -> dict[str, float]:
        return {o: self.rms[o] for o in self.operator.row_outputs}

    def compare_reductions(self) -> None:
        """The reductions over M, against the goldens the pass completed, in row slices."""
        op, gate, sizes, diagnose, m = self.operator, self.operator.gate, self.sizes, self.diagnose, self.m
        red, terms = self.golden_pass.reductions, self.terms
        for o in op.reduction_outputs:
            exact_whole = red["fp64"][o]
            self.rms[o] = _rms(*_sum_squares(round_to(exact_whole, op.output_dtype(o))))
            self._add_output(o)
            self.ideal[o] = ErrorStats(self.tolerances[o], self.shapes[o], dual_only=True)
            actual_whole = {b: self._reduction(b, o) for b in self.backends}
            for rows in row_slices(exact_whole.shape, REDUCTION_SLICE_ELEMENTS):
                exact = exact_whole[rows]
                reference = round_to(exact, op.output_dtype(o))
                model = allowance.reduction(terms, o, op.output(o).kind, m, rows)
                self.ideal[o].update(reference, exact, row_offset=rows.start)
                for b, whole in actual_whole.items():
                    actual = whole[rows]
                    _update_gated(self.per_backend[b][o][REFERENCE], actual, exact, reference, model, rows.start)
                    if o in self.own_outputs:
                        self.per_backend[b][o][OWN].update(actual, self.own_sums[b].sums[o][rows],
                                                           row_offset=rows.start, allowance=model.vs_own)
                    bound = (gate.bound(o, exact, terms.part("abs", o, rows), self.schedules[b], sizes)
                             if diagnose else None)
                    names = golden_layers(op, self.schedules[b], diagnose)
                    for g in names:
                        if g == REFERENCE:
                            continue
                        if g == "tiled":
                            noise = allowance.tile_chain(terms, o, model.vs_own,
                                                         *_tiles_and_accumulator(op, o, self.schedules[b], m),
                                                         rows=rows)
                        else:
                            noise = model.vs_own
                        self.per_backend[b][o][g].update(actual, red[names[g]][o][rows],
                                                         bound if g == "fp64" else None, row_offset=rows.start,
                                                         allowance=noise if g != "fp64" else None)
                for pair in self.pairs:
                    self.between[pair][o].update(red[pair.layer][o][rows], red[pair.reference][o][rows],
                                                 row_offset=rows.start)

    def result(self) -> dict:
        """Every comparison's metrics (``compare_case``'s return value)."""
        names = self.operator.output_names
        red, terms = self.golden_pass.reductions, self.terms
        # the fitted scale's rounding bias: the largest of the legitimate paths' on this data, their
        # stores included (an operator that models no path gets the measured constant, allowance.SCALE_BIAS)
        scale_bias = {o: terms.scale_bias(o, red["fp64"].get(o)) for o in names}
        local_bias = {o: terms.local_bias(o, red["fp64"].get(o)) for o in names}
        for stats in self.per_backend.values():
            for o in names:
                stats[o][REFERENCE].scale_bias = scale_bias[o]
                stats[o][REFERENCE].local_bias = local_bias[o]
        backends = {b: {o: {g: st.finalize() for g, st in stats[o].items()} for o in names}
                    for b, stats in self.per_backend.items()}
        for b, o in self.shared_rows:
            if self.per_backend[b][o]["tiled"].n == 0:
                backends[b][o]["tiled"] = dict(backends[b][o]["faithful"])
        goldens = {pair: {o: per_o[o].finalize() for o in names} for pair, per_o in self.between.items()}
        return {"backends": backends, "goldens": goldens, "ideal": {o: self.ideal[o].finalize() for o in names},
                "tile_drift": self.drift.result(),
                "attribution": ({b: attribution(backends[b], goldens, golden_layers(self.operator, self.schedules[b]))
                                 for b in backends} if self.diagnose else {})}


def attribution(backend_metrics: Mapping, golden_metrics: Mapping, layers: Mapping[str, str]) -> dict:
    """Per output: the max abs difference due to storage, tile order and the kernel, and which dominates."""
    result = {}
    storage_pair = GoldenPair(layers["faithful"], "fp64")
    order_pair = GoldenPair(layers["tiled"], layers["faithful"])
    for o in backend_metrics:
        parts = {
            "storage": golden_metrics[storage_pair][o]["max_abs_err"],
            "tile_order": golden_metrics[order_pair][o]["max_abs_err"],
            "kernel": backend_metrics[o]["tiled"]["max_abs_err"],
        }
        nan_tiled = golden_metrics[order_pair][o]["nonfinite_disagreements"]
        nan_kernel = backend_metrics[o]["tiled"]["nonfinite_disagreements"]
        parts["kernel_ulp_max"] = backend_metrics[o]["tiled"]["ulp_max"]
        parts["nonfinite"] = {"tile_order": nan_tiled, "kernel": nan_kernel}
        if nan_kernel:
            dominant = "kernel"
        elif nan_tiled:
            dominant = "tile_order"
        else:
            dominant = max(("storage", "tile_order", "kernel"), key=lambda p: parts[p])
        parts["dominant"] = dominant
        # Faithful to its declared schedule: within rtol of the tiled emulation plus one rounding
        # flip per stored term and, for db/dw, the random walk that FP32-level differences start
        # in a BF16 cross-tile accumulation chain (``accuracy.allowance.tile_chain``).
        parts["faithful_to_schedule"] = nan_kernel == 0 and backend_metrics[o]["tiled"]["mismatches"] == 0
        result[o] = parts
    return result
