"""Devices per pytest worker and where the goldens run (``cases/devices.py``)."""
from __future__ import annotations

import pytest

from cases.devices import describe, golden_device, worker_device
from cases.evaluate import evaluate_case, records_for
from cases.spec import CaseSpec
from kernels.registry import resolve
from operators.swiglu_backward import OPERATOR as SWIGLU


def test_each_worker_gets_its_own_visible_device():
    assert [worker_device("cuda", f"gw{i}", 2) for i in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert worker_device("npu", "gw5", 8) == "npu:5" and worker_device("npu", None, 8) == "npu:0"
    assert worker_device("cuda:1", "gw0", 2) == "cuda:1"          # an explicit index pins every worker
    assert worker_device("cpu", "gw3", 0) == "cpu"
    with pytest.raises(ValueError, match="no npu device is visible"):
        worker_device("npu", "gw0", 0)


def test_goldens_stay_on_the_host_where_the_device_has_no_fp64():
    assert golden_device("npu:3") == "cpu" and golden_device("cuda:1") == "cuda:1" and golden_device("cpu") == "cpu"
    assert describe("npu") == {"requested": "npu", "goldens": "cpu",
                               "per_worker": "xdist worker gw<i> -> npu:<i mod the visible npu devices>"}


def test_goldens_elsewhere_give_the_same_verdicts():
    """The move to the golden device (here another name of the host) changes no number."""
    spec, backends = CaseSpec(1025, 96, 200, "seed", 0), [resolve(SWIGLU, "torch-eager"), resolve(SWIGLU, "tiled-emulation")]
    same = evaluate_case(spec, backends, benchmark=None)
    moved = evaluate_case(spec, backends, golden_device="cpu:0", benchmark=None)
    for b in backends:
        a = {(r["output"], r["golden"]): (r["status"], r["metrics"]["max_abs_err"]) for r in records_for(same, b.name)}
        c = {(r["output"], r["golden"]): (r["status"], r["metrics"]["max_abs_err"]) for r in records_for(moved, b.name)}
        assert a == c and a
