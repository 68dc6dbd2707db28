"""A record does not depend on how many threads the process has: the framework's FP32 and FP64
sums that feed a record (the fitted scale's rounding bias, the reference's rms) use a fixed
order, not torch's thread-split reductions (``accuracy.term_sums.dot64``)."""
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


def test_records_are_the_same_at_one_and_two_threads():
    one, two = _records(1), _records(2)
    for o in one:
        assert one[o]["reference"]["aggregate"] == two[o]["reference"]["aggregate"], o
        assert one[o]["reference"]["golden_rms"] == two[o]["reference"]["golden_rms"], o
