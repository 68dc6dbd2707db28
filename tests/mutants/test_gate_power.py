"""Faithfulness to the declared schedule, and the benchmark's lean gate.

A kernel that follows its declared schedule is within 1 BF16 ULP of the tiled emulation of
that schedule (``faithful_to_schedule``); a mutant of it is not, and its error is attributed
to the kernel. The false-alarm benchmark's faithful-only gate gives the same verdicts as the
matrix's ``evaluate_case``."""
import importlib.util
from pathlib import Path

import pytest

from cases.evaluate import declared_schedule
from cases.spec import make_inputs
from kernels.runner import run_backend
from tests.mutants.kill_cases import KILLS, M2048_TINY, M2049_UNIT, backends_of, outcome

ROOT = Path(__file__).resolve().parents[2]


def _false_alarms():
    spec = importlib.util.spec_from_file_location("false_alarms", ROOT / "benchmarks" / "false_alarms.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["tiled_fp32", "tiled_emulation_hardened"])
def test_faithful_kernel_within_one_ulp_of_its_tiled_emulation(name):
    attribution = outcome(M2049_UNIT).comparison["attribution"][name]
    for o, a in attribution.items():
        assert a["faithful_to_schedule"], (o, a)
        assert a["kernel_ulp_max"] <= 1.0, (o, a["kernel_ulp_max"])


@pytest.mark.parametrize("name", ["tail_padding_leak", "db_last_tile_only", "tail_valid_off_by_one"])
def test_mutant_is_not_faithful_to_its_schedule(name):
    spec, must_fail, _ = KILLS[name]
    attribution = outcome(spec).comparison["attribution"][name]
    for o in must_fail:
        a = attribution[o]
        assert not a["faithful_to_schedule"] and a["kernel_ulp_max"] > 1.0, (o, a)
        assert a["dominant"] == "kernel", (o, a)


@pytest.mark.parametrize("spec", [M2049_UNIT, M2048_TINY], ids=lambda c: c.id)
def test_benchmark_gate_equals_the_matrix_gate(spec):
    fa = _false_alarms()
    backends = backends_of(spec)
    inputs = make_inputs(spec)
    runs = {b.name: run_backend(b, inputs) for b in backends}
    lean = fa.faithful_verdicts(inputs, {n: r.outputs for n, r in runs.items()},
                                {b.name: declared_schedule(b) for b in backends}, case=spec.id)
    full = outcome(spec)
    for b in runs:
        for o, (v, metrics) in lean[b].items():
            ref = full.comparison["backends"][b][o]["faithful"]
            assert v.passed == full.verdicts[b][o].passed, (b, o)
            assert metrics["mismatches"] == ref["mismatches"] and metrics["ulp_p99"] == ref["ulp_p99"], (b, o)


def test_seed_sweep_in_miniature():
    """The false-alarm study over two seeds other than the kill matrix's seed 0 (the full sweep,
    200 seeds, is benchmarks/false_alarms.py): every wrong kernel is caught at each seed, and the
    correct kernels' only failures are known, explained ones, so the seed gate passes them."""
    fa = _false_alarms()
    res = fa.study(2, first_seed=1)
    assert res["seeds"] == 2
    for name, by_seed in res["catches"].items():
        assert all(by_seed.values()), f"{name} missed at seeds {[s for s, c in by_seed.items() if not c]}"
    unexplained = [r for r in res["records"] if r["status"] in ("fail", "error", "unexpected_pass")]
    assert not unexplained, [r.get("message") for r in unexplained]
    from accuracy import seed_stats
    known = {(r["backend"], seed_stats.strip_seed(r["case"]), r["output"])
             for r in res["records"] if r["status"] == "expected_failure"}
    groups = seed_stats.summarize(res["records"])["groups"]
    assert groups and all(g["decision"]["passed"] for key, g in groups.items() if key not in known)
    assert "| wrong kernel |" in fa.table(res)
