"""A backend run in the framework's process can reach the case's own inputs, not only its clones.

It finds them through the garbage collector, scales dy by 1.05 in them and in its clones alike,
and returns the right outputs of the scaled inputs: compared with clones only, nothing changed,
and the goldens, computed from the scaled inputs, agree with it. The case's input digests catch
it, and the inputs are made again, so the backend after it is judged on the case's own inputs.
"""
from __future__ import annotations

import gc

import torch

from cases.evaluate import evaluate_case
from cases.spec import CaseSpec
from kernels.registry import Backend, resolve
from operators.swiglu_backward.kernels.torch_autograd import torch_eager
from operators.swiglu_backward import OPERATOR as SWIGLU

SPEC = CaseSpec(1025, 96, 200, "seed", 0)


def scales_the_originals(**inputs):
    dy = inputs["dy"]
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj is not dy and obj.shape == dy.shape and obj.dtype == dy.dtype:
            if torch.equal(obj.view(torch.int16), dy.view(torch.int16)):
                obj.mul_(1.05)
    dy.mul_(1.05)
    return torch_eager(**inputs)


def test_a_write_into_the_case_inputs_through_the_gc_fails_that_backend_only():
    attack = Backend("tests:scales_the_originals", scales_the_originals)
    outcome = evaluate_case(SPEC, [attack, resolve(SWIGLU, "torch-eager")], isolate=False)
    run = outcome.runs[attack.name]
    assert run.error is not None and "wrote into the case's inputs ['dy']" in run.error, run.error
    assert attack.name not in outcome.verdicts
    eager = outcome.verdicts["torch-eager"]
    assert all(v.passed for v in eager.values()), {o: v.message for o, v in eager.items() if not v.passed}
