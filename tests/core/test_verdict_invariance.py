"""A verdict depends on the kernel's numbers only: not on --chunk-rows, not on which other
backends share the run, not on what the kernel declares (the last is
tests/mutants/test_gate_power.py::test_the_verdict_ignores_what_a_kernel_declares)."""
import math

import pytest

from accuracy.compare import REFERENCE, compare_case
from accuracy.gate import gated_verdicts
from cases.evaluate import declared_schedule
from cases.spec import CaseSpec, make_inputs
from operators.swiglu_backward.kernels import plain
from operators.swiglu_backward.kernels.mutants import MUTANTS
from kernels.registry import Backend, resolve
from kernels.runner import run_backend
from operators.swiglu_backward import OPERATOR as SWIGLU


SPEC = CaseSpec(4097, 96, 200, "unit", 0)
BACKENDS = [Backend("plain", plain.plain), Backend("truncating", plain.round_toward_zero_stores),
            Backend("db_last_tile_only", MUTANTS["db_last_tile_only"])]
OTHERS = [resolve(SWIGLU, "torch-eager"), Backend("bf16_math", plain.bf16_math), Backend("tail_dropped", MUTANTS["tail_dropped"])]


@pytest.fixture(scope="module")
def runs():
    inputs = make_inputs(SPEC)
    return inputs, {b.name: run_backend(SWIGLU, b, inputs).outputs for b in BACKENDS + OTHERS}


def _compare(inputs, outputs, chosen, chunk_rows, diagnose=True):
    return compare_case(SWIGLU, inputs, {b.name: outputs[b.name] for b in chosen},
                        {b.name: declared_schedule(SWIGLU, b) for b in chosen}, chunk_rows=chunk_rows, diagnose=diagnose)


def _gate(inputs, outputs, chosen, chunk_rows):
    return _verdicts(_compare(inputs, outputs, chosen, chunk_rows), chosen)


def _verdicts(comparison, chosen):
    result = {}
    for b in (b for b in chosen if b in BACKENDS):
        metrics = comparison["backends"][b.name]
        verdicts = gated_verdicts(SWIGLU, metrics, case=SPEC.id, backend=b.name)
        result[b.name] = {o: (v.passed, v.elementwise_passed, v.scale_passed, v.direction_passed, v.own_passed,
                              metrics[o][REFERENCE]["mismatches"], metrics[o][REFERENCE]["detection_floor"],
                              metrics[o][REFERENCE]["aggregate"]["scale_beta"])
                          for o, v in verdicts.items()}
    return result


def _same(a: dict, b: dict) -> None:
    for name in a:
        for o, (*exact_a, floor_a, beta_a) in a[name].items():
            *exact_b, floor_b, beta_b = b[name][o]
            assert exact_a == exact_b, (name, o, exact_a, exact_b)
            # floats summed over chunks in float64: equal to rounding, never across a threshold
            assert math.isclose(floor_a, floor_b, rel_tol=1e-6), (name, o, floor_a, floor_b)
            assert math.isclose(beta_a, beta_b, rel_tol=1e-6, abs_tol=1e-12), (name, o, beta_a, beta_b)


def test_verdicts_do_not_depend_on_chunk_rows_or_the_other_backends(runs):
    inputs, outputs = runs
    base = _gate(inputs, outputs, BACKENDS, 8192)
    assert not all(all(v[0] for v in per_o.values()) for per_o in base.values())   # a failing kernel is in it
    assert all(v[0] for v in base["plain"].values())
    for chunk_rows in (1000, 4096, 8191):
        _same(base, _gate(inputs, outputs, BACKENDS, chunk_rows))
    _same(base, _gate(inputs, outputs, BACKENDS + OTHERS, 8192))
    for b in BACKENDS:     # each alone
        _same({b.name: base[b.name]}, _gate(inputs, outputs, [b], 8192))


def test_a_reduction_compared_in_row_slices_gives_the_record_of_one_comparison(monkeypatch):
    """db and dw are compared in row slices of REDUCTION_SLICE_ELEMENTS (the allowance's
    temporaries of a whole production-size dw set the comparison's peak memory): every field of
    every record, exact counts, maxima with their index, histograms, floors and the aggregate
    sums, is the same bit for bit as one comparison of the whole output. Small slices here (5 rows
    per element-wise slice, 20 per reduction slice: dw's 96 rows in 5 slices, the last partial;
    M=64 keeps the rows' many small slices cheap)."""
    import json

    import accuracy.compare
    import accuracy.metrics
    inputs = make_inputs(CaseSpec(64, 96, 200, "unit", 0))
    outputs = {b.name: run_backend(SWIGLU, b, inputs).outputs for b in BACKENDS[:2]}
    monkeypatch.setattr(accuracy.metrics, "SLICE_ELEMENTS", 1000)

    def records(slice_elements):
        monkeypatch.setattr(accuracy.compare, "REDUCTION_SLICE_ELEMENTS", slice_elements)
        chosen = BACKENDS[:2]
        result = compare_case(SWIGLU, inputs, {b.name: outputs[b.name] for b in chosen},
                              {b.name: declared_schedule(SWIGLU, b) for b in chosen})
        return ({b: {o: json.dumps(result["backends"][b][o], sort_keys=True) for o in ("db_g", "dw_g", "dw_fc")}
                 for b in result["backends"]}, json.dumps({str(p): v for p, v in result["goldens"].items()}, sort_keys=True),
                json.dumps({o: result["ideal"][o] for o in ("db_g", "dw_g", "dw_fc")}, sort_keys=True))

    whole, sliced = records(1 << 30), records(4000)
    assert accuracy.metrics.row_slices([96, 200], 4000)[-1] == slice(80, 96)
    assert whole == sliced


def test_verdicts_do_not_depend_on_the_diagnosis_layers(runs):
    """``compare_case(..., diagnose=False)`` (benchmarks' gate: no faithful or tiled layers, no bound,
    the FP64 comparison reduced to the dual verdict's metrics) gives the full comparison's gated
    verdicts and counts (so does the false-alarm benchmark's lean gate,
    tests/mutants/test_gate_power.py::test_benchmark_gate_equals_the_matrix_gate) and its dual
    metrics, the dual verdict's input, bit for bit."""
    inputs, outputs = runs
    full, gate_only = (_compare(inputs, outputs, BACKENDS, 8192, diagnose=d) for d in (True, False))
    _same(_verdicts(full, BACKENDS), _verdicts(gate_only, BACKENDS))
    for b in BACKENDS:
        for o, per_golden in full["backends"][b.name].items():
            assert per_golden["fp64"]["dual"] == gate_only["backends"][b.name][o]["fp64"]["dual"], (b.name, o)


@pytest.mark.parametrize("diagnose", [False, True])
def test_row_mismatch_counts_stay_exact_when_the_kept_excess_overflows(monkeypatch, runs, diagnose):
    """A row output's atol follows its reference's rms, known only once its rows have streamed
    past: each comparison (the gated ones and the diagnosis layers) keeps the elements whose
    excess is above the atol's lower bound so far, and counts them then. When more than
    ``EXCESS_CAP`` are held (a kernel far off: tail_dropped's zero last row) the largest are
    counted and let go, in one pass while the final atol is below them; where it is not, the
    case is compared again with the rms known from the start. Either way every record is the one
    a buffer with room to spare gives: counts exact, never a range; so the kept counts are the
    known-atol counts, field by field."""
    import json

    import accuracy.compare
    import accuracy.metrics
    inputs, outputs = runs
    chosen = [BACKENDS[0], OTHERS[2]]          # plain, tail_dropped
    calls = []                                 # the row rms each pass of the rows was given
    comparison = accuracy.compare.CaseComparison

    class Counted(comparison):
        def __init__(self, *args, **kwargs):
            calls.append(kwargs.get("row_rms"))
            super().__init__(*args, **kwargs)
    monkeypatch.setattr(accuracy.compare, "CaseComparison", Counted)

    def records():
        calls.clear()
        result = accuracy.compare.compare_case(SWIGLU, inputs, {b.name: outputs[b.name] for b in chosen},
                                               {b.name: declared_schedule(SWIGLU, b) for b in chosen},
                                               diagnose=diagnose)
        return json.dumps([result["backends"], {str(p): v for p, v in result["goldens"].items()},
                           result["ideal"]], sort_keys=True)

    roomy = records()
    assert len(calls) == 1
    monkeypatch.setattr(accuracy.metrics, "EXCESS_CAP", 10)
    tight = records()
    assert tight == roomy
    assert len(calls) == 1                     # the counted values were above the final atol
    dg = json.loads(tight)[0]["tail_dropped"]["dg"][REFERENCE]
    assert dg["mismatches_exact"] and dg["mismatches"] > 10
    # where the counted values' side of the atol is not known, the second pass settles it
    monkeypatch.setattr(accuracy.metrics.ErrorStats, "_ceiling_holds", lambda self, atol: False)
    again = records()
    assert again == roomy
    assert len(calls) == 2 and calls[1] is not None
