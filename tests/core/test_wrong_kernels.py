"""The article's gate is vacuous at its own scale; ours is not. (The zoo of wrong kernels
and the kill matrix are in tests/mutants/, the kernels in operators/swiglu_backward/kernels/mutants.py.)"""
import torch

from accuracy.compare import compare_case
from accuracy.gate import gated_verdicts
from operators.swiglu_backward.kernels.mutants import MUTANTS
from tests.core.helpers import case_inputs
from operators.swiglu_backward import OPERATOR as SWIGLU


def test_all_zero_passes_the_articles_gate_at_the_seed_scale_but_not_ours():
    """The article's case (M=220000) in miniature: 3000 rows drawn at the article's scale
    randn/sqrt(220000), where every dg, dfc, dx, dw element is below atol = 1e-4."""
    all_zero = MUTANTS["all_zero"]
    inputs = case_inputs(3000, scale="seed")
    shrink = (3000 / 220000) ** 0.5
    inputs = {k: (v.float() * shrink).to(torch.bfloat16) if k in ("x", "dy", "g", "fc") else v
              for k, v in inputs.items()}
    comparison = compare_case(SWIGLU, inputs, {"zeros": all_zero(**inputs)}, {"zeros": all_zero.schedule})
    metrics = comparison["backends"]["zeros"]
    vacuous = {o for o in metrics if metrics[o]["reference"]["zero_passes_seed_gate"]}
    assert vacuous == {"dg", "dfc", "dx", "dw_g", "dw_fc"}
    verdicts = gated_verdicts(SWIGLU, metrics, case="seed-scale-3000", backend="zeros")
    assert all(not v.passed for v in verdicts.values())
    assert all(metrics[o]["reference"]["mismatches_seed_gate"] == 0 for o in vacuous)
