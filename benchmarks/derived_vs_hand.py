"""The derived allowances (``accuracy.derived``) against the hand models, element by element.

For each operator with a hand model and a derived re-expression (SwiGLU backward, RMSNorm
backward) and each case, the reference's golden pass is run twice, once with the hand golden
and gate and once with the derived ones, and every output element's allowance against the
reference (what the gate adds to rtol |reference| + atol) is divided: derived / hand. Printed
per output: the 1st, 50th and 99th percentiles and the minimum of the ratio, over the elements
where the hand allowance is above 2^-120 (below it both are subnormal floors).

    python benchmarks/derived_vs_hand.py                          # quick small cases, both operators
    python benchmarks/derived_vs_hand.py --case M2048-K512-N1024-seed-s0
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import operators  # noqa: E402
from accuracy.derived import case_allowances  # noqa: E402
from cases.matrix import quick_cases  # noqa: E402
from cases.spec import make_inputs  # noqa: E402

# the operators with a hand model, each registered a second time as ``<name>_derived``: the same
# kernels judged by the allowances its math derives (``operators.OPERATORS``)
DERIVED = ("swiglu_backward", "rmsnorm_backward")
QUANTILES = (0.01, 0.5, 0.99)


def derived_operator(operator):
    """The operator judged by the allowances its math derives (its own schedules serve the rest:
    ``accuracy.derived_switch``)."""
    return operators.get(f"{operator.name}_derived")


# Below this an allowance is a subnormal floor, orders of magnitude under any atol: the two models'
# floors differ there (half a subnormal spacing, or the value itself) and their ratio says nothing
MEANINGFUL = 2.0 ** -120


def ratios(operator, inputs) -> dict[str, torch.Tensor]:
    hand = case_allowances(operator, inputs)
    derived = case_allowances(derived_operator(operator), inputs)
    return {o: (derived[o] / hand[o])[hand[o] > MEANINGFUL] for o in hand}


def summary(r: torch.Tensor) -> dict:
    if r.numel() == 0:
        return {"n": 0}
    q = torch.quantile(r.float()[torch.randperm(r.numel(), generator=torch.Generator().manual_seed(0))[:2 ** 24]],
                       torch.tensor(QUANTILES))
    return {"n": r.numel(), "min": float(r.min()), **{f"p{int(p * 100)}": float(v) for p, v in zip(QUANTILES, q)},
            "max": float(r.max())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operator", action="append", default=None)
    parser.add_argument("--case", action="append", default=None, help="a case id (default: the quick small cases)")
    parser.add_argument("--max-m", type=int, default=4097)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("| operator | case | output | elements | min | p1 | p50 | p99 | max |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.operator or list(DERIVED):
        op = operators.get(name)
        specs = [c for c in quick_cases(op) if (c.id in args.case if args.case else c.sizes[0] <= args.max_m)]
        for spec in specs:
            inputs = make_inputs(spec)
            for o, r in ratios(op, inputs).items():
                s = summary(r)
                if s["n"]:
                    print(f"| {name} | {spec.id} | {o} | {s['n']} | {s['min']:.2f} | {s['p1']:.2f} | {s['p50']:.2f} "
                          f"| {s['p99']:.2f} | {s['max']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
