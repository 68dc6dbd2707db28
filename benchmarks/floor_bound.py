"""The lowest element-wise detection floor any gate can have without false alarms, per case.

Correct kernels differ by their legitimate roundings (``accuracy.allowance.LEGITIMATE_CHOICES``):
PyTorch's autograd sums the stored BF16 dg into db and multiplies it into dx, the article's b
kernel sums dg before the store, a kernel may store dy*fc or silu(g) before dg / dfc, and
PyTorch stores dx's two products before adding them. Any element-wise test must pass all of
them, so its threshold on an element of db or dx is at least

    rtol |r| + atol_eff + z sigma,    sigma^2 = sum over the roundings of spacing^2 / 12

with the exact BF16 spacing of each value rounded (round to nearest: uniform in +-spacing/2),
and z the two-sided Gaussian quantile for a false-alarm probability alpha per case run split
evenly over the 7 outputs and that output's elements: the ideal test, which knows each
element's legitimate spread exactly and whose sums are Gaussian. Its floor is the minimum over
elements of that threshold / |r|. The gate (``accuracy.allowance``) sits above it by its rigour:
a sub-Gaussian tail bound instead of the Gaussian quantile, the same alpha split over 14 checks,
and worst cases where there are too few roundings for a tail bound (dx's two products, M <= 2).
Where the ideal floor itself exceeds 1/64 (2.0 rtol), no element-wise gate meets that target at
that false-alarm rate; the fitted scale is the test that catches a uniform error there.

    python benchmarks/floor_bound.py                      # the quick profile's seed / unit cases
    python benchmarks/floor_bound.py --case M2048-K512-N1024-seed-s0 --alpha 1e-3 --alpha 1e-5
    python benchmarks/floor_bound.py --store-only          # PyTorch's roundings alone
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accuracy.compare import REFERENCE, compare_case     # noqa: E402
from accuracy.tolerances import TOLERANCES              # noqa: E402
from accuracy.ulp import bf16_spacing                   # noqa: E402
from benchmarks.gate_floor import parse_case            # noqa: E402
from cases.evaluate import declared_schedule            # noqa: E402
from cases.matrix import quick_cases                    # noqa: E402
from cases.spec import make_inputs                      # noqa: E402
from kernels.registry import resolve                    # noqa: E402
from kernels.runner import run_backend                  # noqa: E402

OUTPUTS = 7
CHUNK = 8192


def quantile(p_two_sided: float) -> float:
    """z with P(|N(0,1)| > z) = p, by bisection on erfc."""
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erfc(mid / math.sqrt(2)) > p_two_sided else (lo, mid)
    return (lo + hi) / 2


def reference_terms(inputs, intermediates: bool):
    """FP64 dg, dfc from the BF16 inputs, and the variance of each one's legitimate roundings:
    its store and, with ``intermediates``, the stored dy*fc (times dg's factor) and silu(g)
    (times dy) before it."""
    dy, g, fc = (inputs[n].double() for n in ("dy", "g", "fc"))
    s = torch.sigmoid(g)
    factor, silu = s * (1 + g * (1 - s)), g * s
    dg, dfc = dy * fc * factor, dy * silu
    var_g, var_fc = bf16_spacing(dg) ** 2 / 12, bf16_spacing(dfc) ** 2 / 12
    if intermediates:
        var_g += (bf16_spacing(dy * fc) * factor) ** 2 / 12
        var_fc += (bf16_spacing(silu) * dy) ** 2 / 12
    return dg, dfc, var_g, var_fc


def gate_floors(inputs) -> dict:
    """The gate's own detection floors at these inputs (they depend on the reference alone;
    torch-eager supplies the outputs the comparison needs)."""
    backend = resolve("torch-eager")
    run = run_backend(backend, inputs)
    metrics = compare_case(inputs, {backend.name: run.outputs}, {backend.name: declared_schedule(backend)},
                           diagnose=False)["backends"][backend.name]
    return {o: metrics[o][REFERENCE]["detection_floor"] / TOLERANCES[o].rtol for o in ("db_g", "db_fc", "dx")}


def floors(spec, alphas, intermediates: bool) -> dict:
    inputs = make_inputs(spec)
    gate = gate_floors(inputs)
    dg, dfc, u_g, u_fc = reference_terms(inputs, intermediates)
    w_g, w_fc = inputs["w_g"].double(), inputs["w_fc"].double()
    p_g, p_fc = dg @ w_g.t(), dfc @ w_fc.t()
    var_dx = u_g @ (w_g * w_g).t() + u_fc @ (w_fc * w_fc).t()
    if intermediates:
        var_dx += (bf16_spacing(p_g) ** 2 + bf16_spacing(p_fc) ** 2) / 12
    sums = {"db_g": (dg.sum(0), u_g.sum(0)), "db_fc": (dfc.sum(0), u_fc.sum(0)), "dx": (p_g + p_fc, var_dx)}
    out = {}
    for name, (exact, var) in sums.items():
        tol = TOLERANCES[name]
        ref = exact.to(torch.bfloat16).double()
        atol = tol.effective_atol(float(ref.pow(2).mean().sqrt()))
        r = exact.abs()
        keep = r > 0
        row = {}
        for alpha in alphas:
            z = quantile(alpha / (OUTPUTS * exact.numel()))
            row[f"{alpha:g}"] = {"z": z, "floor_rtol": float(((tol.rtol * r + atol + z * var.sqrt())[keep] / r[keep]).min()) / tol.rtol}
        row["gate"] = gate[name]
        out[name] = row
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=None)
    parser.add_argument("--alpha", action="append", type=float, default=None,
                        help="false-alarm probability per case run (repeatable; default 1e-3 and 1e-5)")
    parser.add_argument("--store-only", action="store_true",
                        help="count only the store of dg / dfc, not the stored intermediates and dx products")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    alphas = args.alpha or [1e-3, 1e-5]
    specs = ([parse_case(c) for c in args.case] if args.case else
             [c for c in quick_cases() if c.scale in ("seed", "unit") and c.m * c.n <= 2 ** 22])
    results = {s.id: floors(s, alphas, not args.store_only) for s in specs}
    names = ("db_g", "db_fc", "dx")
    lines = ["| case | " + " | ".join(f"{o}: ideal at alpha {a:g}" for o in names for a in alphas)
             + " | " + " | ".join(f"{o}: gate" for o in names) + " |", "|---|" + "---|" * (3 * len(alphas) + 3)]
    for case, per in results.items():
        lines.append(f"| {case} | " + " | ".join(f"{per[o][f'{a:g}']['floor_rtol']:.2f}" for o in names for a in alphas)
                     + " | " + " | ".join(f"{per[o]['gate']:.2f}" for o in names) + " |")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
