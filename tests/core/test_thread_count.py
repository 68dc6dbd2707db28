"""A record does not depend on how many threads the process has: the comparison runs torch on a
fixed number of threads (``goldens.threads``: MKL splits a small product's inner dimension among
threads, and torch a full reduction's sum), and the framework's FP64 sums that feed a record use a
fixed order (``accuracy.term_sums.dot64``). Seen failing on a 2-core Xeon with avx512_bf16 before
the comparison fixed its thread count: db, dw's allowances and dw's reference differed in their
last bits."""
from __future__ import annotations

import torch

import operators
from accuracy.compare import compare_case
from cases.spec import CaseSpec, make_inputs
from kernels.registry import resolve
from kernels.runner import run_backend
from cases.evaluate import declared_schedule


def _records(threads: int) -> dict:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        op = operators.get("swiglu_backward")
        spec = CaseSpec(2049, 96, 200, "unit", 0)
        inputs = make_inputs(spec)
        backend = resolve(op, "torch-eager")
        outputs = {backend.name: run_backend(op, backend, inputs).outputs}
        result = compare_case(op, inputs, outputs, {backend.name: declared_schedule(op, backend)}, diagnose=False)
        return result["backends"][backend.name]
    finally:
        torch.set_num_threads(before)


def test_records_are_the_same_at_one_two_and_three_threads():
    one, two, three = _records(1), _records(2), _records(3)
    for o in one:
        for other in (two, three):
            assert one[o]["reference"]["aggregate"] == other[o]["reference"]["aggregate"], o
            assert one[o]["reference"]["golden_rms"] == other[o]["reference"]["golden_rms"], o


def test_the_compiled_pass_leaves_torchs_thread_count_as_it_was():
    """numba's OpenMP layer shares torch's runtime: launching its pool set torch's count to numba's
    maximum, so a process that set 1 thread ran the rest of its products on 2."""
    from accuracy import compiled_pass
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        compiled_pass.set_threads(2)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_comparison_runs_on_its_fixed_threads_and_puts_the_count_back():
    from goldens.threads import COMPARISON_THREADS, comparison_threads, compiled_pass_threads
    before = torch.get_num_threads()
    try:
        for outer in (1, 3):
            torch.set_num_threads(outer)
            with comparison_threads():
                assert torch.get_num_threads() == COMPARISON_THREADS
                assert compiled_pass_threads() == outer
            assert torch.get_num_threads() == outer
    finally:
        torch.set_num_threads(before)
