"""The quick matrix's range cases catch what its other profiles cannot: inputs staged through
FP16 (right inside FP16's normal range, which every other profile stays in but for dy at the tiny
profile; g beyond it, where staging gives inf) and a sigmoid that loses its precision in the far
negative tail.

Each kernel of ``operators.swiglu_backward.kernels.plain.RANGE_BUGS`` passes at a seed-scale case and fails at its range
case; every correct plain kernel and PyTorch's backward pass all four range cases.
"""
from __future__ import annotations

import functools

import pytest

from cases.evaluate import evaluate_case
from cases.matrix import quick_cases
from cases.spec import CaseSpec
from operators.swiglu_backward.kernels import plain
from kernels.registry import Backend, resolve
from operators.swiglu_backward import OPERATOR as SWIGLU


RANGE_SCALES = {"below_fp16", "above_fp16", "g_above_fp16", "sigmoid_tail"}
RANGE = {c.scale: c for c in quick_cases(SWIGLU) if c.scale in RANGE_SCALES}
SEED = CaseSpec(1025, 96, 200, "seed", 0)
# the range case that catches each, and the outputs it must fail there at least
CAUGHT_AT = {
    "dy_through_fp16": ("below_fp16", {"dg", "dfc"}),
    "g_through_fp16": ("below_fp16", {"dfc"}),
    "fc_through_fp16": ("below_fp16", {"dg"}),
    "x_through_fp16": ("below_fp16", {"dw_g", "dw_fc"}),
    "w_g_through_fp16": ("below_fp16", {"dx"}),
    "w_fc_through_fp16": ("above_fp16", {"dx"}),
    "g_through_fp16_in_dg": ("g_above_fp16", {"dg", "db_g", "dw_g", "dx"}),
    "tanh_sigmoid": ("sigmoid_tail", {"dg", "dfc"}),
}


@functools.cache
def _verdicts(scale: str) -> dict:
    spec = SEED if scale == "seed" else RANGE[scale]
    backends = ([resolve(SWIGLU, "torch-eager")] + [Backend(n, f) for n, f in plain.CORRECT.items()]
                + [Backend(n, f) for n, f in plain.RANGE_BUGS.items()])
    out = evaluate_case(spec, backends, isolate=False, benchmark=None)
    assert out.error is None, out.error
    return out.verdicts


def _failing(scale: str) -> dict[str, set[str]]:
    return {b: {o for o, v in per_output.items() if not v.passed} for b, per_output in _verdicts(scale).items()}


def test_the_quick_matrix_holds_one_case_per_range_scale():
    assert set(RANGE) == RANGE_SCALES


@pytest.mark.parametrize("scale", sorted(RANGE))
def test_correct_kernels_pass_the_range_cases(scale):
    failing = _failing(scale)
    for name in ("torch-eager", *plain.CORRECT):
        assert not failing[name], (name, failing[name])


@pytest.mark.parametrize("name", sorted(CAUGHT_AT))
def test_each_range_bug_passes_at_the_seed_scale_and_fails_at_its_range_case(name):
    scale, outputs = CAUGHT_AT[name]
    assert not _failing("seed")[name], _failing("seed")[name]
    assert outputs <= _failing(scale)[name], (scale, _failing(scale)[name])


def test_a_nan_from_staging_is_named_by_its_source():
    """g staged through FP16 beyond 65504 gives NaN in dg: the failure's attribution counts the
    non-finite values of each source beside the finite pairs' max (the kernel's, and the article's
    schedule's own sigmoid NaN in the tiled layer it is measured against), never a bare 0."""
    message = _verdicts("g_above_fp16")["g_through_fp16_in_dg"]["dg"].message
    line = next(ln for ln in message.splitlines() if ln.strip().startswith("Error vs FP64 by source"))
    assert "non-finite)" in line and line.endswith("dominant: kernel"), line
