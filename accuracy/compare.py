"""Compare backends' outputs with every golden layer in one streaming pass.

For each backend x output x golden layer one ``ErrorStats`` is filled chunk by
chunk; the FP64 comparisons also carry the rounding-model bound of the
backend's own schedule. The goldens are compared with each other too, which
splits each backend's error into its three sources (``attribution``):

    storage    = faithful - fp64      (BF16 stores of the dtype path)
    tile order = tiled - faithful     (the schedule's per-tile casts and order)
    kernel     = kernel - tiled       (what the kernel adds on top of its schedule)

Nothing here raises on bad numbers; it returns data for the gate and the report.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from accuracy.bounds import dx_bound, elementwise_bound, order_noise, reduction_bound
from accuracy.metrics import ErrorStats
from accuracy.tolerances import TOLERANCES, Tolerance
from goldens.schedule import BF16_FAITHFUL, FP64_GLOBAL, TiledSchedule, faithful_schedule
from goldens.stream import DEFAULT_CHUNK_ROWS, GoldenPass
from kernels.contract import OUTPUT_NAMES, ROW_OUTPUTS, dims, output_shapes

# The |terms| sums behind the allowances follow the operator's reference plan, never a backend's,
# so one backend's tolerance cannot depend on which other backends run beside it.
ABS_SUMS_PLAN = BF16_FAITHFUL


def golden_layers(sched: TiledSchedule) -> dict[str, str]:
    """The golden layers a backend with this schedule is compared with: generic name -> layer key."""
    return {"fp64": "fp64", "faithful": f"faithful:{faithful_schedule(sched.plan).name}",
            "tiled": f"tiled:{sched.name}"}


def _bound(name: str, exact: torch.Tensor, abs_terms: torch.Tensor | None, sched: TiledSchedule,
           m: int, n: int) -> torch.Tensor:
    if name in ("dg", "dfc"):
        return elementwise_bound(exact, sched, name)
    if name == "dx":
        return dx_bound(abs_terms, exact, length=n, sched=sched)   # reduction over N, twice, then a sum
    if name.startswith("db"):
        return reduction_bound(abs_terms, exact, length=m, sched=sched, kernel="b",
                               inputs_stored=None, output="db")   # reduction over M rows
    stored = "dg" if name == "dw_g" else "dfc"
    return reduction_bound(abs_terms, exact, length=m, sched=sched, kernel="w",
                           inputs_stored=stored, output="dw")      # reduction over M rows


def compare_case(inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, Mapping[str, torch.Tensor]],
                 schedules: Mapping[str, TiledSchedule], *, tolerances: Mapping[str, Tolerance] = TOLERANCES,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS) -> dict:
    """``outputs[backend]`` are validated backend outputs; ``schedules[backend]`` the schedule
    each backend declares (its tiled golden and its bound). Returns
    ``{"backends": {backend: {output: {golden: metrics}}}, "goldens": {pair: {output: metrics}},
    "attribution": {backend: {output: {...}}}}``."""
    m, k, n = dims(inputs)
    shapes = output_shapes(m, k, n)
    layers = {"fp64": FP64_GLOBAL}
    pairs = []   # (layer, reference layer): the goldens compared with each other
    for sched in schedules.values():
        names = golden_layers(sched)
        layers.setdefault(names["faithful"], faithful_schedule(sched.plan))
        layers.setdefault(names["tiled"], sched)
        for pair in ((names["faithful"], "fp64"), (names["tiled"], names["faithful"])):
            if pair not in pairs:
                pairs.append(pair)
    golden_pass = GoldenPass(inputs, layers, chunk_rows=chunk_rows, abs_sums=True, abs_plan=ABS_SUMS_PLAN)

    per_backend = {b: {o: {g: ErrorStats(tolerances[o], shapes[o]) for g in golden_layers(schedules[b])}
                       for o in OUTPUT_NAMES} for b in outputs}
    between = {f"{a} vs {b}": {o: ErrorStats(tolerances[o], shapes[o]) for o in OUTPUT_NAMES} for a, b in pairs}

    shared_rows: set = set()   # (backend, output) whose tiled rows are the faithful rows
    for block in golden_pass.blocks():
        for o in ROW_OUTPUTS:
            exact = block.rows["fp64"][o]
            for b, kernel_out in outputs.items():
                actual = kernel_out[o][block.start:block.stop]
                bound = _bound(o, exact, block.abs_dx, schedules[b], m, n)
                noise = (order_noise(block.abs_dx, length=n, math=schedules[b].plan.math)   # over N
                         if o == "dx" else None)
                names = golden_layers(schedules[b])
                for g, st in per_backend[b][o].items():
                    golden = block.rows[names[g]]
                    if g == "tiled" and golden is block.rows[names["faithful"]]:
                        continue   # same dtype path, same rows: the faithful stats serve (copied below)
                    st.update(actual, golden[o], bound if g == "fp64" else None, row_offset=block.start,
                              rounded_terms=golden.get("dx_rounded_terms") if o == "dx" else None,
                              order_noise=noise if g != "fp64" else None)
                    if g == "faithful":
                        shared_rows.add((b, o))
            for a, b in pairs:
                if block.rows[a] is block.rows[b]:
                    continue   # identical rows: nothing to compare, the stats record zero error
                between[f"{a} vs {b}"][o].update(block.rows[a][o], block.rows[b][o], row_offset=block.start,
                                                 rounded_terms=block.rows[b].get("dx_rounded_terms") if o == "dx" else None)

    red = golden_pass.reductions
    for o in OUTPUT_NAMES:
        if o in ROW_OUTPUTS:
            continue
        exact = red["fp64"][o]
        for b, kernel_out in outputs.items():
            bound = _bound(o, exact, golden_pass.abs_reductions[o], schedules[b], m, n)
            noise = order_noise(golden_pass.abs_reductions[o], length=m, math=schedules[b].plan.math)  # over M
            for g, st in per_backend[b][o].items():
                st.update(kernel_out[o], red[golden_layers(schedules[b])[g]][o], bound if g == "fp64" else None,
                          order_noise=noise if g != "fp64" else None)
        for a, b in pairs:
            between[f"{a} vs {b}"][o].update(red[a][o], red[b][o])

    backends = {b: {o: {g: st.finalize() for g, st in per_o.items()} for o, per_o in stats.items()}
                for b, stats in per_backend.items()}
    for b, o in shared_rows:
        if per_backend[b][o]["tiled"].n == 0:
            backends[b][o]["tiled"] = dict(backends[b][o]["faithful"])
    goldens = {pair: {o: st.finalize() for o, st in per_o.items()} for pair, per_o in between.items()}
    return {"backends": backends, "goldens": goldens,
            "attribution": {b: attribution(backends[b], goldens, golden_layers(schedules[b])) for b in backends}}


def attribution(backend_metrics: Mapping, golden_metrics: Mapping, layers: Mapping[str, str]) -> dict:
    """Per output: the max abs difference due to storage, tile order and the kernel, and which dominates."""
    result = {}
    storage_pair = f"{layers['faithful']} vs fp64"
    order_pair = f"{layers['tiled']} vs {layers['faithful']}"
    for o in OUTPUT_NAMES:
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
        # A kernel faithful to its declared schedule is within 1 BF16 ULP of the tiled emulation,
        # except where a reduction cancels: there the gate's own allowances (one rounding flip per
        # stored intermediate, summation order) apply, so "faithful" means it passes the gate
        # against its own tiled golden.
        parts["faithful_to_schedule"] = nan_kernel == 0 and backend_metrics[o]["tiled"]["mismatches"] == 0
        result[o] = parts
    return result
