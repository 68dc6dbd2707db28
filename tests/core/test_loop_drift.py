"""The online softmax's drift study (``cases.loop_drift``): one key block has no drift, several
have the BF16 roundings of P~ at another running max (small, well inside the gate), and the
report draws its figure from the JSON alone."""
from __future__ import annotations

import json

import pytest

import operators
from cases import loop_drift
from reports.__main__ import main as reports_main


@pytest.fixture(scope="module")
def study():
    return loop_drift.run(ns=(128, 384), seeds=1, profiles=("unit",), processes=1, progress=None)


def test_one_block_has_no_drift_and_three_stay_inside_the_gate(study):
    o = study["summary"]["unit"]["o"]
    assert o["drift_rms"]["128"]["median"] == 0
    assert 0 < o["drift_rms"]["384"]["median"] < 2.0 ** -7
    assert o["gate_loop"]["384"]["median"] < 1


def test_the_study_refuses_an_operator_without_key_blocks():
    assert not loop_drift.applies(operators.get("attention_causal"))
    with pytest.raises(ValueError, match="needs dimensions"):
        loop_drift.run(ns=(128,), seeds=1, operator="attention_causal", progress=None)


def test_the_figure_is_drawn_from_the_json(study, tmp_path):
    paths = loop_drift.write(study, tmp_path)
    assert json.loads(paths["json"].read_text())["table"] == study["table"]
    assert reports_main(["drift", str(tmp_path)]) == 0
    assert (tmp_path / "loop-drift.png").stat().st_size > 10_000
