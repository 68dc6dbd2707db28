"""The records' sub-records are typed (``contract.records``): what a real run writes reads back
into them and writes out byte for byte as it was; a key a sub-record does not declare is refused
in one line naming it, the record type and the schema version; a record of an older shape, without
the keys added since, still reads."""
from __future__ import annotations

import json

import pytest

from cases.evaluate import evaluate_case, golden_records, records_for
from cases.spec import CaseSpec
from contract.declared import ABSENT
from contract.records import (SCHEMA_VERSION, Aggregate, Attribution, Determinism, DualMetrics, DualVerdict, Metrics,
                              Record, RecordSchemaError, TileDrift, typed)
from kernels.registry import resolve
from operators.swiglu_backward import OPERATOR as SWIGLU
from runs.results import ResultsNotFound, load_results, to_json


BACKENDS = ("torch-eager", "tiled-emulation")


@pytest.fixture(scope="module")
def written() -> list[dict]:
    """Every record one case writes, as the results file holds it: backends with repeats (their
    determinism) and a benchmark (the dual verdict and metrics), and the goldens (tile drift)."""
    outcome = evaluate_case(CaseSpec(64, 96, 200, "unit", 0), [resolve(SWIGLU, b) for b in BACKENDS], repeats=2)
    records = [r for b in BACKENDS for r in records_for(outcome, b)] + golden_records(outcome)
    return json.loads(json.dumps(to_json(records)))


def test_every_written_record_reads_back_byte_for_byte(written):
    for r in written:
        again = Record.from_json(r).to_json()
        assert json.dumps(again) == json.dumps(r)


def test_the_sub_records_are_typed(written):
    kinds = {(name, type(getattr(t, name)).__name__) for t in typed(written)
             for name in ("metrics", "attribution", "determinism", "dual", "tile_drift") if t.given(name)}
    assert {("metrics", "Metrics"), ("attribution", "Attribution"), ("determinism", "Determinism"),
            ("dual", "DualVerdict"), ("tile_drift", "TileDrift")} <= kinds
    metrics = [t.metrics for t in typed(written) if isinstance(t.metrics, Metrics)]
    assert any(isinstance(m.aggregate, Aggregate) for m in metrics)
    assert any(isinstance(m.dual, DualMetrics) for m in metrics)


SUB_RECORDS = [("metrics", "Metrics"), ("metrics.aggregate", "Aggregate"), ("metrics.dual", "DualMetrics"),
               ("metrics.nonfinite", "NonfiniteCounts"), ("attribution", "Attribution"),
               ("attribution.nonfinite", "AttributionNonfinite"), ("determinism", "Determinism"),
               ("dual", "DualVerdict"), ("tile_drift", "TileDrift")]


def _with_unknown_key(written: list[dict], path: str) -> dict:
    head = path.split(".")[0]
    record = json.loads(json.dumps(next(r for r in written if isinstance(r.get(head), dict)
                                        and (path.count(".") == 0 or isinstance(r[head].get(path.split(".")[1]), dict)))))
    target = record
    for part in path.split("."):
        target = target[part]
    target["golden_v9"] = 1
    return record


@pytest.mark.parametrize("path, kind", SUB_RECORDS)
def test_an_undeclared_key_in_a_sub_record_is_refused_naming_it(written, tmp_path, path, kind):
    record = _with_unknown_key(written, path)
    expected = (rf"{path} has keys \['golden_v9'\] that results schema {SCHEMA_VERSION} does not declare "
                rf"\(contract.records.{kind}\)")
    with pytest.raises(RecordSchemaError, match=expected):
        Record.from_json(record)
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"schema": SCHEMA_VERSION, "records": [record]}))
    with pytest.raises(ResultsNotFound, match=expected) as refused:
        load_results(results)
    assert "\n" not in str(refused.value)


def test_a_record_of_an_older_shape_reads():
    """Keys added over time (the aggregate model, the dual metrics, rms_ratio, the attribution's
    non-finite counts, the case spec) may be missing: they read as absent and are not written back."""
    old = {"case": "M2-K96-N200-unit-s0", "backend": "plain", "output": "dx", "golden": "reference",
           "status": "pass", "gated": True,
           "metrics": {"numel": 19200, "max_abs_err": 0.5, "ulp_p99": 1.0, "worst": [{"index": [0, 1]}]},
           "attribution": {"storage": 0.1, "tile_order": 0.0, "kernel": 0.2, "dominant": "kernel"},
           "dual": {"benchmark": "torch-eager", "passed": True, "ratios": {"rmse": 1.0}}}
    rec = Record.from_json(old)
    assert rec.to_json() == old and json.dumps(rec.to_json()) == json.dumps(old)
    assert rec.metrics.rms_ratio is ABSENT and rec.metrics.aggregate is ABSENT and rec.case_spec is ABSENT
    assert rec.attribution.nonfinite is ABSENT and rec.dual.message is ABSENT and rec.metrics.max_abs_err == 0.5


@pytest.mark.parametrize("kind", [Metrics, Aggregate, DualMetrics, DualVerdict, Attribution, Determinism, TileDrift])
def test_a_sub_record_made_in_code_writes_its_keys_in_declaration_order(kind):
    keys = kind.keys()
    made = kind(**{k: i for i, k in enumerate(keys[:3])})
    assert list(made.to_json()) == list(keys[:3]) and kind.from_json(made.to_json()) == made
