"""The compiled comparison (``accuracy.compiled_pass``) gives the eager path's record: every count,
index, histogram, selection and string the same, the floats summed in another order within
1e-9 relative. Data with the features that decide a verdict: errors of a few ULPs, elements
beyond the tolerance, zero goldens, subnormals, ties, NaN and Inf (those slices go to the eager
path), an allowance, rounded terms, a bound, the aggregate sums, the dual metrics."""
import math

import pytest
import torch

import accuracy.metrics
from accuracy.metrics import ErrorStats
from accuracy.tolerances import Tolerance

ROWS, WIDTH = 300, 96
TOL = Tolerance(1 / 128, 1e-4)


def _data(kind: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    exact = torch.randn(ROWS, WIDTH, generator=g, dtype=torch.float64)
    if kind == "tiny":
        exact = exact * 1e-39                      # FP32 subnormals, BF16's smallest binades
    reference = exact.to(torch.bfloat16)
    noise = torch.randn(ROWS, WIDTH, generator=g, dtype=torch.float64) * 2 ** -8
    actual = (exact * (1 + noise)).to(torch.bfloat16)
    actual[7, 3] = actual[7, 3] * 1.5              # one element far beyond the tolerance
    actual[200:203] = reference[200:203] * 1.03    # three rows at 3%
    exact[50, :10] = 0.0                           # zero goldens, zero and non-zero errors
    reference = exact.to(torch.bfloat16)
    actual[50, :5] = 0
    if kind == "ties":
        actual[100:] = reference[100:]             # exact elements: many equal excesses
        actual[120:130] = reference[120:130] * 2   # equal relative errors in ten rows
    if kind == "nonfinite":
        actual[10, 4] = math.nan
        actual[130, 0] = math.inf
        exact[260, 9] = math.inf
        reference = exact.to(torch.bfloat16)
    allowance = (exact.abs() * 2 ** -9).float()
    extra = {"allowance": allowance, "exact": exact, "noise_var": (exact * 2 ** -10) ** 2,
             "bound": allowance * 3, "rounded_terms": (exact.abs() * 0.5).to(torch.bfloat16)}
    return actual, reference, extra


def _record(compiled: bool, actual, expected, stats_args: dict, update_args: dict, chunk: int) -> dict:
    st = ErrorStats(TOL, (ROWS, WIDTH), **stats_args)
    if not compiled:
        st._update_compiled = lambda *a, **k: False
    for start in range(0, ROWS, chunk):
        rows = slice(start, start + chunk)
        st.update(actual[rows], expected[rows], row_offset=start,
                  **{k: (v[rows] if isinstance(v, torch.Tensor) and v.dim() == 2 else v) for k, v in update_args.items()})
    st.scale_bias = 1e-4
    return st.finalize()


def _same(compiled, eager, path="record"):
    if isinstance(eager, dict):
        assert compiled.keys() == eager.keys(), path
        for k in eager:
            _same(compiled[k], eager[k], f"{path}.{k}")
    elif isinstance(eager, list):
        assert len(compiled) == len(eager), path
        for i, (f, e) in enumerate(zip(compiled, eager)):
            _same(f, e, f"{path}[{i}]")
    elif isinstance(eager, float) and not isinstance(compiled, bool):
        assert isinstance(compiled, float), path
        assert compiled == eager or (math.isnan(compiled) and math.isnan(eager)) or math.isclose(compiled, eager, rel_tol=1e-9, abs_tol=1e-300), (path, compiled, eager)
    else:
        assert compiled == eager, (path, compiled, eager)


def _without_tied_indices(record: dict) -> dict:
    """Among equal excesses the eager path's ``topk`` picks any element (5.59375 or -5.59375 at
    the same golden magnitude); the errors must agree."""
    record = dict(record)
    record["worst"] = [{k: v for k, v in w.items() if k not in ("index", "actual", "expected")}
                       for w in record.get("worst", [])]
    return record


CASES = {
    "gated": ({"dual": False, "scale_rms": 1.0},
              {"allowance": "allowance", "exact": "exact", "noise_var": "noise_var"}),
    "fp64 layer": ({"dual": True, "scale_rms": 1.0}, {"bound": "bound", "rounded_terms": "rounded_terms"}),
    "plain": ({"scale_rms": 0.5}, {}),
    "ideal": ({"dual_only": True}, {}),
}


@pytest.mark.parametrize("kind", ["randn", "tiny", "ties", "nonfinite"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_compiled_pass_gives_the_eager_record(monkeypatch, kind, case):
    monkeypatch.setattr(accuracy.metrics, "SLICE_ELEMENTS", 20 * WIDTH)   # 15 slices
    actual, reference, extra = _data(kind)
    stats_args, names = CASES[case]
    update_args = {k: extra[v] for k, v in names.items()}
    if case == "gated":
        update_args["direction"] = True
    compiled = _record(True, actual, reference, stats_args, update_args, chunk=100)
    eager = _record(False, actual, reference, stats_args, update_args, chunk=100)
    if kind == "ties":
        compiled, eager = _without_tied_indices(compiled), _without_tied_indices(eager)
    _same(compiled, eager)
    if kind == "nonfinite":
        assert eager["nonfinite_disagreements"] > 0


def test_the_compiled_record_does_not_depend_on_the_chunks(monkeypatch):
    """Every field bit for bit, whatever whole number of slices each update holds."""
    monkeypatch.setattr(accuracy.metrics, "SLICE_ELEMENTS", 20 * WIDTH)
    actual, reference, extra = _data("randn")
    args = {"allowance": extra["allowance"], "exact": extra["exact"], "noise_var": extra["noise_var"]}
    records = [_record(True, actual, reference, {"scale_rms": 1.0}, args, chunk) for chunk in (20, 60, 300)]
    assert records[0] == records[1] == records[2]


def test_a_scalar_allowance_and_a_golden_in_fp32(monkeypatch):
    """Optional inputs of one value for every element; an FP32 golden (the diagnosis layers)."""
    monkeypatch.setattr(accuracy.metrics, "SLICE_ELEMENTS", 20 * WIDTH)
    actual, reference, extra = _data("randn")
    args = {"allowance": torch.tensor(1e-3)}
    golden = extra["exact"].float()
    _same(_record(True, actual, golden, {"scale_rms": 1.0}, args, 100),
          _record(False, actual, golden, {"scale_rms": 1.0}, args, 100))
