"""The per-tile drift behind the heatmap: recorded by the golden pass while it computes the case's
goldens, carried by the records, read back by the report without recomputing anything."""
from __future__ import annotations

import torch

from accuracy.tile_drift import TileDriftRecorder
from cases.evaluate import evaluate_case, golden_records
from cases.spec import CaseSpec, make_inputs
from goldens.stream import GoldenPass, materialize
from operators.swiglu_backward.schedule import ARTICLE, HARDENED
from kernels.registry import resolve
from reports import data as D
from reports.tile_drift import from_records
from operators.swiglu_backward import OPERATOR as SWIGLU

SPEC = CaseSpec(4500, 8, 150, "unit", 0)     # 5 b-tiles (tail 404), 3 w-tiles (tail 404)
REDUCTIONS = SWIGLU.reduction_outputs
KERNEL_OF = {o: SWIGLU.output(o).kernel for o in REDUCTIONS}


def _record(schedule, inputs):
    recorder = TileDriftRecorder({schedule.name: schedule}, KERNEL_OF, SPEC.m)
    for _ in GoldenPass(SWIGLU, inputs, {schedule.name: schedule}, rows=False, tile_observer=recorder.observe).blocks():
        pass
    return recorder


def test_drift_ends_where_the_tiled_golden_ends():
    inputs = make_inputs(SPEC)
    recorder = _record(ARTICLE, inputs)
    golden = materialize(SWIGLU, inputs, ARTICLE)
    for o, final in recorder.finals(ARTICLE.name).items():
        assert torch.equal(final.float(), golden[o].float()), o
    data = recorder.result()[ARTICLE.name]
    assert [len(data[o]["drift"]) for o in REDUCTIONS] == [5, 5, 3, 3]
    assert all(len(row) == 3 for row in data["db_g"]["drift"])        # 150 columns in blocks of 64
    assert {o: data[o]["tile_rows"] for o in REDUCTIONS} == {"db_g": 1024, "db_fc": 1024, "dw_g": 2048, "dw_fc": 2048}
    for o in REDUCTIONS:
        assert max(data[o]["utilisation"]) <= 1.0                     # inside the rounding-model bound
        assert data[o]["max_drift"][-1] > 0                           # BF16 accumulation does drift
        assert max(data[o]["drift"][-1]) == data[o]["max_drift"][-1]


def test_fp32_accumulator_drifts_only_by_fp32_order():
    data = _record(HARDENED, make_inputs(SPEC)).result()[HARDENED.name]
    # FP32 accumulation of FP32 partials is the global running sum itself
    assert all(v == 0 for o in REDUCTIONS for v in data[o]["max_drift"])


def test_the_report_reads_the_drift_the_case_recorded():
    backend = resolve(SWIGLU, "tiled-emulation")          # declares the article's schedule: its tiled layer is recorded
    outcome = evaluate_case(SPEC, [backend], benchmark=None)
    records = golden_records(outcome)
    with_drift = [r for r in records if "tile_drift" in r]
    assert {r["output"] for r in with_drift} == set(REDUCTIONS)
    assert {r["backend"] for r in with_drift} == {f"golden:tiled:{ARTICLE.name}"}
    td, why = from_records(D.index(records), ARTICLE.name, SWIGLU)
    assert td is not None and td.case == SPEC.id, why
    expected = _record(ARTICLE, make_inputs(SPEC)).result()[ARTICLE.name]
    for o in REDUCTIONS:
        assert td.max_drift[o] == expected[o]["max_drift"]          # the same numbers, not a replay's
    assert from_records(D.index([r for r in records if "tile_drift" not in r]), ARTICLE.name, SWIGLU)[0] is None


def test_the_heatmap_prefers_the_acceptance_scale_then_the_largest_m():
    def rec(case, m, scale):
        return {"case": case, "case_spec": {"m": m, "k": 8, "n": 16, "scale": scale, "seed": 0},
                "backend": f"golden:tiled:{ARTICLE.name}", "output": "dw_g", "golden": "faithful", "status": "info",
                "metrics": {}, "tile_drift": {"tile_rows": 2048, "block": 64, "drift": [[1.0]], "max_drift": [1.0],
                                              "mean_drift": [1.0], "max_bound": [2.0], "utilisation": [0.5]}}
    records = [rec("M4097-K8-N16-outliers-s0", 4097, "outliers"), rec("M2049-K8-N16-seed-s0", 2049, "seed"),
               rec("M1025-K8-N16-seed-s0", 1025, "seed"), rec("M3000-K8-N16-unit-s0", 3000, "unit")]
    td, _ = from_records(D.index(records), ARTICLE.name, SWIGLU)
    assert td.case == "M2049-K8-N16-seed-s0"
    td, _ = from_records(D.index(records[:1] + records[3:]), ARTICLE.name, SWIGLU)
    assert td.case == "M3000-K8-N16-unit-s0"
