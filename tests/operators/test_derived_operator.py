"""An operator declared as math and rounding points only (``operators/bias_gelu_backward``): its
golden, allowances and bounds derived by the framework (``accuracy.derived``). PyTorch's own
autograd and the other correct backends pass its quick matrix; wrong kernels fail by the outputs
they get wrong."""
from __future__ import annotations

import pytest

import operators
from cases.matrix import quick_cases
from kernels.registry import resolve
from runs import platform_facts
from tests.operators.matrix_run import in_process, verdicts

MUTANTS = "operators.bias_gelu_backward.mutants"
# wrong kernel -> the outputs it must fail somewhere in the matrix, and those it must never fail
WRONG = {"bias_dropped": ({"dx", "db"}, set()),
         "pdf_term_halved": ({"dx", "db"}, set()),
         "db_first_tile_only": ({"db"}, {"dx"}),
         "tanh_gelu": ({"dx"}, set()),
         "bf16_math": ({"dx"}, set())}


@pytest.fixture(scope="module")
def matrix():
    op = operators.get("bias_gelu_backward")
    # the quick profile's small cases at N = 200, and M = 1 at N = 1024 (the larger ones are the matrix run's)
    cases = [c for c in quick_cases(op) if c.sizes[0] <= 1025 and (c.sizes[1] == 200 or c.sizes[0] == 1)]
    backends = [resolve(op, n) for n in op.default_backends] + [resolve(op, f"{MUTANTS}:{n}") for n in WRONG]
    return op, cases, verdicts(in_process(cases, backends))


def test_correct_backends_pass_every_cell(matrix):
    """Every cell passes, or fails within a known failure that holds on this platform's measured
    facts (torch-eager at the tiny profile where its BF16 GELU flushes subnormal results,
    ``expectations/torch.toml``); on a platform where it keeps them, those cells pass."""
    op, cases, cells = matrix
    flushing = platform_facts.bf16_gelu_keeps_subnormals("cpu") is not True
    for name in op.default_backends:
        for spec in cases:
            known = name == "torch-eager" and spec.scale == "tiny" and flushing
            allowed = {"pass", "expected_failure"} if known else {"pass"}
            assert set(cells[(name, spec.id)].values()) <= allowed and set(cells[(name, spec.id)]) == {"dx", "db"}, \
                (name, spec.id, cells[(name, spec.id)])


def test_wrong_kernels_fail_by_their_outputs(matrix):
    op, cases, cells = matrix
    for name, (must, never) in WRONG.items():
        failed = {o for spec in cases for o, v in cells[(f"{MUTANTS}:{name}", spec.id)].items() if v == "fail"}
        assert must <= failed, (name, failed)
        assert not (never & failed), (name, failed)


def test_the_folder_holds_no_allowance():
    """The operator's gate and golden are the framework's derivation, not hand-written modules."""
    from accuracy import derived
    op = operators.get("bias_gelu_backward")
    assert isinstance(op.gate, derived._Gate) and isinstance(op.golden, derived._Golden)
