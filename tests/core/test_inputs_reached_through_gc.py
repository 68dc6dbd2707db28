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
from cases.spec import CaseSpec, make_inputs
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


def keeps_what_it_was_given(**inputs):
    """Correct outputs, then every tensor it can reach of dy's shape scaled: its own inputs and
    whatever else its process holds."""
    out = torch_eager(**inputs)
    scales_the_originals(**inputs)
    return out


def sees_the_case_inputs(**inputs):
    """torch-eager, after checking it was given the case's own inputs, bit for bit."""
    changed = [k for k, v in make_inputs(SPEC).items() if not torch.equal(v.view(torch.int16), inputs[k].view(torch.int16))]
    if changed:
        raise AssertionError(f"given inputs {changed} are not the case's")
    return torch_eager(**inputs)


def test_an_isolated_backend_writes_only_into_its_own_copy_of_the_inputs():
    """Isolated, a backend gets the case's inputs as a copy in shared pages made for its call alone
    (``kernels.isolated.run_isolated``): its write is named, and the backends after it and the
    goldens see the case's own inputs."""
    attack, checker = (resolve(SWIGLU, f"{__name__}:{fn.__name__}") for fn in (keeps_what_it_was_given,
                                                                              sees_the_case_inputs))
    outcome = evaluate_case(SPEC, [attack, checker], isolate=True)
    run = outcome.runs[attack.name]
    assert run.error is not None and "wrote into its inputs ['dy']" in run.error, run.error
    assert outcome.runs[checker.name].error is None, outcome.runs[checker.name].error
    verdicts = outcome.verdicts[checker.name]
    assert all(v.passed for v in verdicts.values()), {o: v.message for o, v in verdicts.items() if not v.passed}
