"""The record has a declared shape (``contract.records.Record``): what the matrix writes is exactly
its fields, and a results file with a key it does not declare, or of another schema version, is
refused in one line that names the key or the version."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cases.evaluate import evaluate_case, golden_records, records_for
from cases.spec import CaseSpec
from contract.records import SCHEMA_VERSION, Record, RecordSchemaError
from kernels.registry import resolve
from operators.swiglu_backward import OPERATOR as SWIGLU
from runs.results import ResultsNotFound, load_results, write_cell

ROOT = Path(__file__).resolve().parents[2]


def _records() -> list[dict]:
    outcome = evaluate_case(CaseSpec(64, 96, 200, "unit", 0), [resolve(SWIGLU, "torch-eager"),
                                                              resolve(SWIGLU, "tiled-emulation")])
    return [r for b in ("torch-eager", "tiled-emulation") for r in records_for(outcome, b)] + golden_records(outcome)


def test_what_the_matrix_writes_is_the_declared_record():
    records = _records()
    assert records
    for r in records:
        typed = Record.from_json(r)
        assert typed.to_json() == r and typed.key == (r["case"], r["backend"], r["output"], r["golden"])
        assert typed.gated is r.get("gated", typed.gated)


def _results(tmp_path, records, schema=SCHEMA_VERSION) -> Path:
    (tmp_path / "run").mkdir(exist_ok=True)
    path = tmp_path / "run" / "results.json"
    path.write_text(json.dumps({"schema": schema, "records": records}))
    return path


def test_a_key_the_schema_does_not_declare_is_refused(tmp_path):
    record = {**_records()[0], "verdict_v3": "pass"}
    path = _results(tmp_path, [record])
    with pytest.raises(ResultsNotFound, match=r"record 0 has keys \['verdict_v3'\] that results schema 2"):
        load_results(path)
    with pytest.raises(RecordSchemaError, match="verdict_v3"):
        write_cell(tmp_path / "shards", "gw0", "cell", [record])
    proc = subprocess.run([sys.executable, "-m", "reports", str(path), "-o", str(tmp_path / "report")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "verdict_v3" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_another_schema_version_is_refused_naming_it(tmp_path):
    path = _results(tmp_path, _records()[:1], schema=3)
    with pytest.raises(ResultsNotFound, match="results schema 3; this framework reads schemas 1, 2"):
        load_results(path)
    assert load_results(_results(tmp_path, _records()[:1], schema=1))["records"]   # records alone, same records


def test_a_record_lacking_keys_still_loads(tmp_path):
    """Readers show what a record lacks as missing (reports.data): only undeclared keys are refused."""
    path = _results(tmp_path, [{"case": "M1-K1-N1-unit-s0", "backend": "b"}])
    assert load_results(path)["records"] == [{"case": "M1-K1-N1-unit-s0", "backend": "b"}]
