"""Known-wrong kernels must fail the gate, at the output where the bug lives, with the
worst element where the bug lives; the correct kernel beside them must pass."""
import pytest
import torch

from accuracy.compare import compare_case
from accuracy.gate import gated_verdicts
from cases.evaluate import evaluate_case
from cases.spec import CaseSpec
from goldens.layers import bf16_faithful
from goldens.schedule import BF16_FAITHFUL, FAITHFUL_GLOBAL
from kernels.registry import Backend
from kernels.torch_autograd import TORCH_BF16, torch_eager
from tests.core.helpers import case_inputs

TILE_B = 1024


def all_zero(**inp):
    return {k: torch.zeros_like(v) for k, v in torch_eager(**inp).items()}


def dropped_tail(**inp):
    """Loops over full tiles only: the ragged last tile is never computed."""
    m = inp["x"].shape[0]
    full = (m // TILE_B) * TILE_B
    head = torch_eager(**{k: v[:full] if k in ("x", "dy", "g", "fc") else v for k, v in inp.items()})
    out = torch_eager(**inp)
    for name in ("dg", "dfc", "dx"):
        out[name] = torch.cat([head[name], torch.zeros_like(out[name][full:])])
    for name in ("db_g", "db_fc", "dw_g", "dw_fc"):
        out[name] = head[name]
    return out


def db_last_tile_only(**inp):
    """The accumulation temp is overwritten, not accumulated: db holds the last tile's sum."""
    out = torch_eager(**inp)
    m = inp["x"].shape[0]
    last = ((m - 1) // TILE_B) * TILE_B
    out["db_g"] = out["dg"][last:].sum(0, keepdim=True)
    out["db_fc"] = out["dfc"][last:].sum(0, keepdim=True)
    return out


def swapped_weights(**inp):
    out = torch_eager(**inp)
    out["dx"] = out["dg"] @ inp["w_fc"].t() + out["dfc"] @ inp["w_g"].t()
    return out


def fp16_stores(**inp):
    """Rounds dg/dfc (and so everything downstream) to FP16 where the kernel stores BF16."""
    plan = BF16_FAITHFUL.with_store(dg=torch.float16, dfc=torch.float16)
    return {k: v.to(torch.bfloat16) for k, v in bf16_faithful(inp, plan).items()}


for fn in (all_zero, dropped_tail, db_last_tile_only, swapped_weights):
    fn.schedule = TORCH_BF16      # they claim torch's dtype path, and get it wrong
fp16_stores.schedule = FAITHFUL_GLOBAL

# (kernel, case, outputs that must fail, where the worst element must lie: (output, row predicate))
WRONG = [
    (all_zero, CaseSpec(3000, 96, 200, "seed", 0), {"dg", "dfc", "db_g", "db_fc", "dw_g", "dw_fc", "dx"}, None),
    (dropped_tail, CaseSpec(3000, 96, 200, "unit", 0), {"dg", "dfc", "dx", "db_g", "dw_g"}, ("dx", lambda r: r >= 2048)),
    (db_last_tile_only, CaseSpec(3000, 96, 200, "unit", 0), {"db_g", "db_fc"}, None),
    (swapped_weights, CaseSpec(1025, 96, 200, "unit", 0), {"dx"}, None),
    # at the seed scale FP16 holds dg (rms 9e-3) almost as BF16 would; the w/x kernels then read the
    # more precise FP16 values and dx moves by more than the gate allows
    (fp16_stores, CaseSpec(3000, 96, 200, "seed", 0), {"dx"}, None),
    # at the tiny profile FP16 underflows (its smallest subnormal is 6e-8): everything collapses
    # (db sums the FP32 dg before the store, so it stays right)
    (fp16_stores, CaseSpec(1025, 96, 200, "tiny", 0), {"dg", "dfc", "dw_g", "dw_fc", "dx"}, None),
]


@pytest.mark.parametrize("kernel, spec, must_fail, where", WRONG, ids=[f"{w[0].__name__}-{w[1].scale}" for w in WRONG])
def test_wrong_kernel_is_caught_where_the_bug_lives(kernel, spec, must_fail, where):
    outcome = evaluate_case(spec, [Backend(kernel.__name__, kernel), Backend("torch-eager", torch_eager)])
    verdicts = outcome.verdicts[kernel.__name__]
    failed = {o for o, v in verdicts.items() if not v.passed}
    assert must_fail <= failed, (must_fail - failed, {o: v.message for o, v in verdicts.items()})
    if spec.scale != "tiny":   # torch-eager's own BF16 GEMM fails at the tiny profile (cases/expectations/torch.toml)
        assert all(v.passed for v in outcome.verdicts["torch-eager"].values())   # no false alarm beside it
    if where:
        output, in_place = where
        row = outcome.comparison["backends"][kernel.__name__][output]["faithful"]["max_excess_index"][0]
        assert in_place(row), row
    assert all(kernel.__name__ in verdicts[o].message and spec.id in verdicts[o].message for o in must_fail)


def test_all_zero_passes_the_articles_gate_at_the_seed_scale_but_not_ours():
    """The article's case (M=220000) in miniature: 3000 rows drawn at the article's scale
    randn/sqrt(220000), where every dg, dfc, dx, dw element is below atol = 1e-4."""
    inputs = case_inputs(3000, scale="seed")
    shrink = (3000 / 220000) ** 0.5
    inputs = {k: (v.float() * shrink).to(torch.bfloat16) if k in ("x", "dy", "g", "fc") else v
              for k, v in inputs.items()}
    comparison = compare_case(inputs, {"zeros": all_zero(**inputs)}, {"zeros": TORCH_BF16})
    metrics = comparison["backends"]["zeros"]
    vacuous = {o for o in metrics if metrics[o]["faithful"]["zero_passes_seed_gate"]}
    assert vacuous == {"dg", "dfc", "dx", "dw_g", "dw_fc"}
    verdicts = gated_verdicts(metrics, case="seed-scale-3000", backend="zeros")
    assert all(not v.passed for v in verdicts.values())
    assert all(metrics[o]["faithful"]["mismatches_seed_gate"] == 0 for o in vacuous)
