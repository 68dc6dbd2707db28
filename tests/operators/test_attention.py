"""Attention (``operators/attention``): forward and backward, non-causal and causal, as derived math.
Its correct backends pass the quick matrix's small cases; each wrong kernel of its zoo fails at
the output and case ``mutants.KILLS`` names, where the correct flash kernel passes; the tiled
golden replays the online softmax (the flash emulation equals it to the bit on o)."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import operators
from cases.matrix import parse_case, quick_cases
from cases.spec import CaseSpec, make_inputs
from goldens.layers import bf16_faithful, fp64_ideal, tiled_emulation
from kernels.registry import resolve
from operators.attention import flash, mutants
from tests.operators.matrix_run import in_process, interpreted_defaults, verdicts, wrong_and_right

NAMES = ("attention", "attention_causal")
FORWARD_NAMES = ("attention_forward", "attention_forward_causal")


@pytest.fixture(scope="module", params=NAMES + FORWARD_NAMES)
def quick(request):
    """Every default backend at the quick profile's cases up to M = 257, the Triton kernel in
    triton's interpreter."""
    op = operators.get(request.param)
    cases = [c for c in quick_cases(op) if c.sizes[0] <= 257]
    return op, cases, interpreted_defaults(op, cases)


def test_correct_backends_pass_the_small_quick_cases(quick):
    op, cases, cells = quick
    assert len(cases) >= 8
    for name in op.default_backends:
        for spec in cases:
            assert set(cells[(name, spec.id)].values()) == {"pass"}, (name, spec.id, cells[(name, spec.id)])


@pytest.mark.parametrize("name", sorted(mutants.KILLS))
def test_each_wrong_kernel_fails_its_named_output(name):
    output, (op_name, case) = mutants.KILLS[name]
    wrong, right = wrong_and_right(op_name, case, f"operators.attention.mutants:{name}")
    assert wrong[output] == "fail" and set(right.values()) == {"pass"}, (wrong, right)


@pytest.mark.parametrize("name", sorted(mutants.FORWARD_KILLS))
def test_each_wrong_forward_kernel_fails_its_named_output(name):
    """The forward operators' zoo: among them two kernels whose O is right and whose LSE, returned
    in FP32, is not the FP32 statistic (rounded through BF16; in base 2)."""
    output, (op_name, case) = mutants.FORWARD_KILLS[name]
    wrong, right = wrong_and_right(op_name, case, mutants.forward_kernel_path(name, op_name))
    assert wrong[output] == "fail" and set(right.values()) == {"pass"}, (wrong, right)


def test_an_lse_returned_in_bf16_is_refused_by_the_contract_naming_its_dtype():
    op = operators.get("attention_forward")
    spec = parse_case(op, "129,129,64,unit")

    def bf16_lse(*, q, kt, vt):
        out = flash.forward(q, kt, vt, causal=False)
        return {"o": out["o"], "lse": out["lse"].to(torch.bfloat16)}

    from kernels.registry import Backend
    cells = in_process([spec], [Backend("bf16_lse", bf16_lse)])
    record = next(r for r in cells if r["backend"] == "bf16_lse")
    assert record["status"] == "error", record
    assert "output 'lse' has dtype torch.bfloat16, expected torch.float32" in record["message"], record["message"]


def test_the_fp32_output_is_held_to_fp32_not_to_the_bf16_criterion():
    """LSE rounded through BF16 is within the operator's BF16 rtol (1/128) of the reference at
    every element, and fails the FP32 criterion its dtype gives it."""
    from accuracy.tolerances import ACCEPTANCE, FP32_ACCEPTANCE, tolerances_for
    op = operators.get("attention_forward")
    assert tolerances_for(op) == {"o": ACCEPTANCE, "lse": FP32_ACCEPTANCE}
    inputs = make_inputs(parse_case(op, "129,129,64,unit"))
    lse = flash.forward(**inputs, causal=False)["lse"].double()
    rounded = lse.float().to(torch.bfloat16).double()
    assert bool(((rounded - lse).abs() <= ACCEPTANCE.element_bound(lse)).all())
    assert not bool(((rounded - lse).abs() <= FP32_ACCEPTANCE.element_bound(lse)).all())


@pytest.mark.parametrize("name", NAMES + FORWARD_NAMES)
def test_the_tiled_golden_replays_the_online_softmax(name):
    """Three key blocks: the flash plan's golden runs the running max and rescale chain (its o
    differs from the global softmax's) and the emulated kernel's o equals it bit for bit."""
    op = operators.get(name)
    causal = name.endswith("causal")
    sizes = (257, 64) if causal else (129, 257, 64)
    inputs = make_inputs(CaseSpec(*sizes, "large_logits", 0, operator=op))
    schedule = op.schedules.default_schedule()
    tiled = tiled_emulation(op, inputs, schedule)["o"].to(torch.bfloat16)
    faithful = bf16_faithful(op, inputs, schedule.plan)["o"].to(torch.bfloat16)
    kernel = (flash.forward if name in FORWARD_NAMES else flash.run)(**inputs, causal=causal)["o"]
    assert torch.equal(kernel, tiled)
    assert not torch.equal(tiled, faithful)


def test_causal_rows_see_only_earlier_keys():
    """The causal golden's o at query i depends on keys 0..i only: changing the last key's value
    moves the last row of o and no other."""
    op = operators.get("attention_causal")
    inputs = make_inputs(CaseSpec(64, 64, "unit", 0, operator=op))
    before = fp64_ideal(op, inputs)["o"]
    changed = dict(inputs, vt=inputs["vt"].clone())
    changed["vt"][:, -1] += 1
    after = fp64_ideal(op, changed)["o"]
    moved = (after != before).any(dim=1)
    assert moved[-1] and not moved[:-1].any()


def test_the_triton_kernel_without_the_interpreter_on_cpu_is_a_skip_that_says_why(monkeypatch):
    pytest.importorskip("triton", reason="the triton-flash backend needs triton (pip install -e '.[triton]')")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    op = operators.get("attention")
    spec = parse_case(op, "2,3,64,unit")
    records = in_process([spec], [resolve(op, "triton-flash")])
    assert [r["status"] for r in records] == ["skipped"], records
    assert "TRITON_INTERPRET=1" in records[0]["message"]


CUDA_BACKENDS = ("torch-flash-cuda", "torch-efficient-cuda")


@pytest.mark.parametrize("operator", ["attention", "attention_forward"])
@pytest.mark.parametrize("name", CUDA_BACKENDS)
def test_a_cuda_only_kernel_on_cpu_inputs_is_a_skip_that_says_why(name, operator):
    op = operators.get(operator)
    spec = parse_case(op, "2,3,64,unit")
    records = in_process([spec], [resolve(op, name)])
    assert [r["status"] for r in records] == ["skipped"], records
    assert "CUDA only" in records[0]["message"] and "--device cuda" in records[0]["message"], records[0]


@pytest.mark.parametrize("name", NAMES)
def test_cuda_kernels_pass_the_small_quick_cases_on_a_gpu(name):
    """PyTorch's CUDA flash and memory-efficient SDPA kernels and the Triton kernel compiled, on
    the GPU, judged against goldens computed there (cases up to M = 257)."""
    if not (torch.cuda.is_available() and torch.cuda.device_count() > 0):
        pytest.skip("no CUDA device is present (torch.cuda.is_available() is False)")
    op = operators.get(name)
    cases = [c for c in quick_cases(op) if c.sizes[0] <= 257]
    backends = [resolve(op, n) for n in CUDA_BACKENDS]
    if importlib.util.find_spec("triton") is not None:
        backends.append(resolve(op, "triton-flash"))
    cells = verdicts(in_process(cases, backends, device="cuda"))
    for b in backends:
        for spec in cases:
            assert set(cells[(b.name, spec.id)].values()) == {"pass"}, (b.name, spec.id, cells[(b.name, spec.id)])


def test_a_legitimately_one_sided_output_skips_the_direction_test_and_not_the_fitted_scale():
    """At near-uniform scores every P~ in (1 - 2^-9, 1) rounds up to 1, so a kernel storing P~
    (a legitimate choice) rounds o away from zero on most elements: 83% at this case and seed,
    beyond the direction test's 75% (its one false alarm in 200 seeds before the derived gate
    read the legitimate paths' own direction). A store that truncates o is still caught there,
    by the fitted scale."""
    op = operators.get("attention")
    spec = parse_case(op, "127,128,64,near_uniform,67")
    right = resolve(op, "flash-emulation")
    truncating = resolve(op, "operators.attention.mutants:o_truncated")
    cells = verdicts(in_process([spec], [right, truncating]))
    assert cells[(right.name, spec.id)]["o"] == "pass"
    assert cells[(truncating.name, spec.id)]["o"] == "fail"


def test_an_output_in_a_dtype_without_a_criterion_is_refused_naming_it():
    from dataclasses import replace

    from accuracy.tolerances import tolerances_for
    from contract.operator import OutputDecl
    op = operators.get("attention_forward")
    half = replace(op, outputs=(op.outputs[0], OutputDecl("lse", ("M", 1), dtype=torch.float16)))
    with pytest.raises(ValueError, match=r"no acceptance criterion for outputs \{'lse': torch.float16\}"):
        tolerances_for(half)
