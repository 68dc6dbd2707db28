"""A derived golden's reductions-only pass (``GoldenPass(rows=False)``, the drift study's): the
reductions, their allowances and their paths' bias the same bits as a whole pass's, the matmuls
only row outputs read left out (SwiGLU's dx products), and a row output's bias refused, never
read as zero."""
from __future__ import annotations

import pytest
import torch

import accuracy.derived
import operators
from accuracy import allowance
from cases.matrix import quick_cases
from cases.spec import make_inputs
from goldens.stream import GoldenPass


def _pass(op, inputs, rows: bool):
    gp = GoldenPass(op, inputs, {"fp64": op.schedules.FP64_GLOBAL}, terms=True, rows=rows)
    for _ in gp.blocks():
        pass
    m = op.sizes(inputs)[op.dims[0]]
    return gp, {o: (gp.reductions["fp64"][o], allowance.reduction(gp.terms, o, op.output(o).kind, m).vs_reference,
                    gp.terms.scale_bias(o, gp.reductions["fp64"][o])) for o in op.reduction_outputs}


@pytest.mark.parametrize("name, prefix, matmuls_left_out", [("swiglu_backward_derived", "M2049-K96", True),
                                                            ("attention", "M257-N129", False)])
def test_a_reductions_only_pass_gives_the_whole_passs_reductions(monkeypatch, name, prefix, matmuls_left_out):
    torch.set_num_threads(1)
    op = operators.get(name)
    inputs = make_inputs(next(c for c in quick_cases(op) if c.id.startswith(prefix)))
    _, whole = _pass(op, inputs, rows=True)
    calls = []
    model_matmul = accuracy.derived.matmul      # the rounding model's matmul, as the golden calls it
    monkeypatch.setattr(accuracy.derived, "matmul", lambda *a, **k: calls.append(1) or model_matmul(*a, **k))
    gp, reduced = _pass(op, inputs, rows=False)
    for o in op.reduction_outputs:
        assert torch.equal(whole[o][0], reduced[o][0]) and torch.equal(whole[o][1], reduced[o][1]), o
        assert whole[o][2] == reduced[o][2], o
    # SwiGLU's reductions read no matmul: the model's dx products are left out; attention's dK, dV
    # are matmuls' operands: its math is evaluated whole
    assert (not calls) == matmuls_left_out, len(calls)
    with pytest.raises(ValueError, match="reductions-only"):
        gp.terms.scale_bias(op.row_outputs[0])
