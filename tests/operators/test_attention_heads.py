"""Attention over heads (``operators.attention.heads``): every head judged on its own by the one-head
operator, a kernel that crosses heads caught at its named output, and the record of a failing
output naming the head and the element in the kernel's [H, ...] tensor."""
from __future__ import annotations

import pytest
import torch

import operators
from accuracy.heads import compare_heads
from cases.evaluate import declared_schedule
from cases.matrix import parse_case, quick_cases
from cases.spec import make_inputs
from contract.backend import ContractError, validate_inputs
from contract.heads import head_by_head
from kernels.registry import resolve
from kernels.runner import run_backend
from operators.attention import flash, mutants
from tests.operators.matrix_run import interpreted_defaults, wrong_and_right

NAMES = ("attention_heads", "attention_heads_causal", "attention_forward_heads", "attention_forward_heads_causal")
KILLS = {**mutants.HEAD_KILLS, **mutants.FORWARD_HEAD_KILLS}


@pytest.fixture(scope="module", params=NAMES)
def quick(request):
    """Every default backend at the quick profile's cases of at most 129 queries and 3 heads (each
    scale but outliers; the false-alarm sweep has every case), the Triton kernel in triton's
    interpreter."""
    op = operators.get(request.param)
    cases = [c for c in quick_cases(op) if c.sizes[0] <= 129 and c.sizes[-1] <= 3]
    return op, cases, interpreted_defaults(op, cases)


def test_correct_backends_pass_every_head_of_the_quick_cases(quick):
    op, cases, cells = quick
    assert len(cases) >= 8 and {c.sizes[-1] for c in cases} >= {2, 3}
    for name in op.default_backends:
        for spec in cases:
            assert set(cells[(name, spec.id)].values()) == {"pass"}, (name, spec.id, cells[(name, spec.id)])


@pytest.mark.parametrize("name", sorted(KILLS))
def test_each_kernel_that_crosses_heads_fails_its_named_output(name):
    output, (op_name, case) = KILLS[name]
    wrong, right = wrong_and_right(op_name, case, f"operators.attention.mutants:{name}")
    assert wrong[output] == "fail" and set(right.values()) == {"pass"}, (wrong, right)


def _compared(op_name: str, case: str, *backends: str):
    op = operators.get(op_name)
    spec = parse_case(op, case)
    inputs = make_inputs(spec)
    chosen = [resolve(op, b) for b in backends]
    outputs = {b.name: run_backend(op, b, inputs).outputs for b in chosen}
    schedules = {b.name: declared_schedule(op, b) for b in chosen}
    return compare_heads(op, inputs, outputs, schedules, case=spec.id), inputs, outputs


def test_one_wrong_head_of_eight_fails_on_its_own_and_its_record_names_it():
    """The last of 8 heads reads its neighbour's values: 1/8 of each output is wrong. Judged per head,
    head 7 fails with most of its elements; its record's indices lead with 7 and its message lists it
    as the one failing head. Heads 0..6 pass."""
    wrong = "operators.attention.mutants:last_head_previous_values"
    heads, _, outputs = _compared("attention_heads", "129,129,64,8,unit", wrong)
    v = heads.verdicts[wrong]["o"]
    m = heads.comparison["backends"][wrong]["o"]["reference"]
    assert not v.passed and m["head"] == 7 and m["heads"] == 8 and m["failing_heads"] == [7]
    assert m["max_abs_index"][0] == 7 and all(w["index"][0] == 7 for w in m["worst"])
    assert "head 7 (of 8" in v.message and "Heads failing this output: 1 of 8 (7)" in v.message
    # an index into the kernel's [H, M, D] tensor: the element the record quotes
    assert len(m["max_abs_index"]) == 3 and len(m["worst"][0]["index"]) == 3
    assert float(outputs[wrong]["o"][tuple(m["worst"][0]["index"])]) == m["worst"][0]["actual"]
    # every other head passes: the per-head verdicts of o
    per_head = [c["backends"][wrong]["o"]["reference"]["mismatches"] for c in heads.per_head]
    assert per_head[:7] == [0] * 7 and per_head[7] > 0


def test_a_passing_output_shows_the_head_with_the_largest_error():
    heads, _, _ = _compared("attention_heads", "129,129,64,3,unit", "flash-emulation")
    m = heads.comparison["backends"]["flash-emulation"]["dq"]["reference"]
    errors = [c["backends"]["flash-emulation"]["dq"]["reference"]["max_abs_err"] for c in heads.per_head]
    assert heads.verdicts["flash-emulation"]["dq"].passed and m["failing_heads"] == []
    assert m["head"] == errors.index(max(errors))


def test_the_heads_are_drawn_apart_and_each_is_the_one_head_operators_case_layout():
    op = operators.get("attention_heads")
    inputs = make_inputs(parse_case(op, "129,127,64,3,unit"))
    assert tuple(inputs["q"].shape) == (3, 129, 64) and tuple(inputs["kt"].shape) == (3, 64, 127)
    assert not torch.equal(inputs["q"][0], inputs["q"][1]) and not torch.equal(inputs["kt"][1], inputs["kt"][2])
    validate_inputs(op.one_head, {n: t[2] for n, t in inputs.items()})
    with pytest.raises(ContractError, match=r"input 'kt' has shape \(3, 64, 127\), expected \(2, 64, 127\).*H=2 from q"):
        validate_inputs(op, {**inputs, "q": inputs["q"][:2]})
    with pytest.raises(ContractError, match="expected a 3-D tensor"):
        validate_inputs(op, {**inputs, "q": inputs["q"][0]})


def test_a_one_head_kernel_runs_head_by_head_on_heads_and_as_it_is_on_one():
    op = operators.get("attention_heads")
    inputs = make_inputs(parse_case(op, "127,129,64,2,unit"))
    run = head_by_head(lambda *, q, kt, vt, do: flash.run(q, kt, vt, do, causal=False))
    both = run(**inputs)
    for h in range(2):
        one = run(**{n: t[h] for n, t in inputs.items()})
        assert all(torch.equal(both[o][h], one[o]) for o in one)


@pytest.mark.parametrize("causal", [False, True])
def test_the_triton_kernel_launches_over_every_head_as_one_launch_per_head_does(causal, monkeypatch):
    """One launch over H heads (a program per block and head, offset by the head's stride) gives
    the bits of H one-head launches: forward and backward, and the forward alone."""
    pytest.importorskip("triton", reason="the triton-flash backend needs triton (pip install -e '.[triton]')")
    from operators.attention import triton_flash
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    op = operators.get("attention_heads_causal" if causal else "attention_heads")
    inputs = make_inputs(parse_case(op, "129,64,3,unit" if causal else "129,127,64,3,unit"))
    both = triton_flash.run(**inputs, causal=causal)
    forward = triton_flash.run_forward(inputs["q"], inputs["kt"], inputs["vt"], causal=causal)
    assert tuple(forward["lse"].shape) == (3, 129, 1)
    for h in range(3):
        one = triton_flash.run(**{n: t[h] for n, t in inputs.items()}, causal=causal)
        assert all(torch.equal(both[o][h], one[o]) for o in one), h
        alone = triton_flash.run_forward(inputs["q"][h], inputs["kt"][h], inputs["vt"][h], causal=causal)
        assert all(torch.equal(forward[o][h], alone[o]) for o in alone), h


def _fp32_with_values_scaled(q, kt, vt, do, factor: float):
    from torch.nn.attention import SDPBackend
    from operators.attention.backends import sdpa
    return sdpa(q.float(), kt.float(), vt.float() * factor, do.float(), causal=False, dtype=torch.float32,
                backend=SDPBackend.MATH)


def values_scaled_in_every_head(*, q, kt, vt, do):
    """FP32 math with every head's V scaled by 1 + 3e-4, each output stored once in BF16."""
    return _fp32_with_values_scaled(q, kt, vt, do, 1 + 3e-4)


def values_in_fp32(*, q, kt, vt, do):
    """The same FP32 math, V as given: correct."""
    return _fp32_with_values_scaled(q, kt, vt, do, 1.0)


def test_a_bias_every_head_shares_fails_by_the_pooled_fitted_scale_though_no_head_fails_alone():
    """V scaled by 1 + 3e-4 in all 8 heads: under one head's fitted-scale floor (4.7e-4 at
    M = N = 257, D = 128), above the pooled one (sigma / sqrt(8) plus the heads' bias bound)."""
    here = "tests.operators.test_attention_heads"
    heads, _, _ = _compared("attention_heads", "257,257,128,8,unit", f"{here}:values_scaled_in_every_head",
                            f"{here}:values_in_fp32")
    wrong, right = f"{here}:values_scaled_in_every_head", f"{here}:values_in_fp32"
    v = heads.verdicts[wrong]["o"]
    m = heads.comparison["backends"][wrong]["o"]["reference"]
    assert not v.passed and not v.fails_on_its_own and v.heads_scale_passed is False
    assert m["failing_heads"] == [] and not m["heads_scale"]["passed"]
    assert abs(m["heads_scale"]["beta"] - 3e-4) < 3e-5
    assert all(abs(c["backends"][wrong]["o"]["reference"]["aggregate"]["scale_beta"])
               <= c["backends"][wrong]["o"]["reference"]["aggregate"]["scale_allowed"] for c in heads.per_head)
    assert "Fitted scale pooled over the 8 heads" in v.message and "none on its own" in v.message
    assert all(x.passed for x in heads.verdicts[right].values())
    assert all(heads.comparison["backends"][right][o]["reference"]["heads_scale"]["passed"] for o in ("o", "dq"))


def test_the_pooled_scale_weights_each_head_by_its_inverse_noise_variance():
    from accuracy.heads import pooled_scale

    def gated(beta, sigma, bias):
        return {"aggregate": {"scale_beta": beta, "scale_sigma": sigma, "scale_bias": bias}}
    p = pooled_scale([gated(2e-3, 1e-4, 1e-5), gated(-1e-3, 2e-4, 3e-5)])
    # weights 1e8 and 2.5e7: beta (2e-3 * 1e8 - 1e-3 * 2.5e7) / 1.25e8 = 1.4e-3, above 7.5 x 8.9e-5 + 1.4e-5
    assert p["beta"] == pytest.approx(1.4e-3) and p["sigma"] == pytest.approx(1.25e8 ** -0.5)
    assert p["bias"] == pytest.approx(1.4e-5) and p["allowed"] == pytest.approx(7.5 * 1.25e8 ** -0.5 + 1.4e-5)
    assert p["passed"] is False and p["heads"] == 2
    assert pooled_scale([gated(1e-3, 0.0, 0.0), gated(0.0, 1e-4, 0.0)]) is None     # an exact head decides alone
    assert pooled_scale([gated(1e-3, 1e-4, 0.0)]) is None                         # one head: its own test
