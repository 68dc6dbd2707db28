"""The lowest element-wise detection floor any gate can have without false alarms, per case.

Correct kernels differ by their legitimate roundings (``operators.swiglu_backward.gate.LEGITIMATE_CHOICES``):
PyTorch's autograd sums the stored BF16 dg into db and multiplies it into dx, the article's b
kernel sums dg before the store, a kernel may store dy*fc or silu(g) before dg / dfc, and
PyTorch stores dx's two products before adding them. Any element-wise test must pass all of
them, so its threshold on an element of db or dx is at least

    rtol |r| + atol_eff + z sigma,    sigma^2 = sum over the roundings of spacing^2 / 12

with the exact BF16 spacing of each value rounded (round to nearest: uniform in +-spacing/2),
and z the two-sided Gaussian quantile for a false-alarm probability alpha per case run split
evenly over the 7 outputs and that output's elements: the ideal test, which knows each
element's legitimate spread exactly and whose sums are Gaussian. Its floor is the minimum over
elements of that threshold / |r|, where the Gaussian term is capped by the roundings' worst case
(sums of one or two terms; dx's two stored products are added at theirs). The gate (``accuracy.allowance``) sits above it by its rigour:
a sub-Gaussian tail bound instead of the Gaussian quantile, the same alpha split over 14 checks,
and worst cases where there are too few roundings for a tail bound (dx's two products, M <= 2).
Where the ideal floor itself exceeds 1/64 (2.0 rtol), no element-wise gate meets that target at
that false-alarm rate; the fitted scale is the test that catches a uniform error there.

    python benchmarks/floor_bound.py                      # the quick profile's seed / unit cases
    python benchmarks/floor_bound.py --case M2048-K512-N1024-seed-s0 --alpha 1e-3 --alpha 1e-5
    python benchmarks/floor_bound.py --store-only          # PyTorch's roundings alone
    python benchmarks/floor_bound.py --gate-table          # the gate's floors, every small quick case
    python benchmarks/floor_bound.py --db-only --case M220000-K512-N1024-seed-s1
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import NormalDist

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accuracy.compare import REFERENCE, compare_case     # noqa: E402
from accuracy.tolerances import tolerances_for          # noqa: E402
from accuracy.ulp import bf16_spacing                   # noqa: E402
from benchmarks.gate_floor import parse_case            # noqa: E402
from cases.evaluate import declared_schedule            # noqa: E402
from cases.matrix import quick_cases                    # noqa: E402
from cases.spec import make_inputs                      # noqa: E402
from kernels.registry import resolve                    # noqa: E402
from kernels.runner import run_backend                  # noqa: E402
from operators.swiglu_backward import OPERATOR as SWIGLU  # noqa: E402
from operators.swiglu_backward import math as swiglu  # noqa: E402

OUTPUTS = len(SWIGLU.output_names)


def quantile(p_two_sided: float) -> float:
    """z with P(|N(0,1)| > z) = p (from the lower tail, exact for the tiny p used here)."""
    return -NormalDist().inv_cdf(p_two_sided / 2)


def reference_terms(inputs, intermediates: bool):
    """FP64 dg, dfc from the BF16 inputs, and per element the variance and the worst case (half
    spacings) of its legitimate roundings: its store and, with ``intermediates``, the stored dy*fc
    (times dg's factor) and silu(g) (times dy) before it."""
    dy, g, fc = (inputs[n].double() for n in ("dy", "g", "fc"))
    s = swiglu.sigmoid(g)
    factor, silu = swiglu.dg_factor(g, s), swiglu.silu(g, s)
    dg, dfc = dy * fc * factor, dy * silu
    spacings = {"g": [bf16_spacing(dg)], "fc": [bf16_spacing(dfc)]}
    if intermediates:
        spacings["g"].append(bf16_spacing(dy * fc) * factor.abs())
        spacings["fc"].append(bf16_spacing(silu) * dy.abs())
    var = {k: sum(h ** 2 for h in v) / 12 for k, v in spacings.items()}
    worst = {k: sum(v) / 2 for k, v in spacings.items()}
    return dg, dfc, var, worst


def gate_floors(inputs) -> dict:
    """The gate's own element-wise floor and fitted-scale threshold per output at these inputs,
    in units of rtol (they depend on the reference alone; torch-eager supplies the outputs the
    comparison needs)."""
    backend = resolve(SWIGLU, "torch-eager")
    run = run_backend(SWIGLU, backend, inputs)
    metrics = compare_case(SWIGLU, inputs, {backend.name: run.outputs}, {backend.name: declared_schedule(SWIGLU, backend)},
                           diagnose=False)["backends"][backend.name]
    tolerances = tolerances_for(SWIGLU)
    return {o: (m[REFERENCE]["detection_floor"] / tolerances[o].rtol,
                m[REFERENCE]["aggregate"]["scale_allowed"] / tolerances[o].rtol) for o, m in metrics.items()}


def gate_table(specs) -> str:
    """The gate's floors, element-wise / fitted scale, per case and output (docs/gate-power.md)."""
    names = SWIGLU.output_names
    lines = ["| case | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for spec in specs:
        floors_ = gate_floors(make_inputs(spec))
        lines.append(f"| {spec.id} | " + " | ".join(f"{floors_[o][0]:.2f} / {floors_[o][1]:.2f}" for o in names)
                     + " |")
    return "\n".join(lines)


def db_sums(inputs, intermediates: bool, rows: int = 8192) -> dict:
    """db's exact sums, rounding variances and worst cases, streamed over rows (the article's case)."""
    acc: dict = {}
    for start in range(0, inputs["dy"].shape[0], rows):
        part = {n: inputs[n][start:start + rows] for n in ("dy", "g", "fc")}
        dg, dfc, var, worst = reference_terms(part, intermediates)
        for name, values in (("db_g", (dg, var["g"], worst["g"])), ("db_fc", (dfc, var["fc"], worst["fc"]))):
            sums = [v.sum(0) for v in values]
            acc[name] = sums if name not in acc else [a + b for a, b in zip(acc[name], sums)]
    return {name: (*sums, 0.0) for name, sums in acc.items()}


def floors(spec, alphas, intermediates: bool, db_only: bool = False) -> dict:
    inputs = make_inputs(spec)
    if db_only:       # without the gate's own floors, which need a whole comparison
        return _floors(db_sums(inputs, intermediates), alphas, {"db_g": math.nan, "db_fc": math.nan})
    gate = {o: f[0] for o, f in gate_floors(inputs).items()}
    dg, dfc, var, worst = reference_terms(inputs, intermediates)
    w_g, w_fc = inputs["w_g"].double(), inputs["w_fc"].double()
    p_g, p_fc = dg @ w_g.t(), dfc @ w_fc.t()
    var_dx = var["g"] @ (w_g * w_g).t() + var["fc"] @ (w_fc * w_fc).t()
    worst_dx = worst["g"] @ w_g.abs().t() + worst["fc"] @ w_fc.abs().t()
    # dx's two stored products: two bounded roundings, whose tail is their worst case
    products = (bf16_spacing(p_g) + bf16_spacing(p_fc)) / 2 if intermediates else torch.zeros_like(p_g)
    sums = {"db_g": (dg.sum(0), var["g"].sum(0), worst["g"].sum(0), 0.0),
            "db_fc": (dfc.sum(0), var["fc"].sum(0), worst["fc"].sum(0), 0.0),
            "dx": (p_g + p_fc, var_dx, worst_dx, products)}
    return _floors(sums, alphas, gate)


def _floors(sums: dict, alphas, gate: dict) -> dict:
    """Per output: the ideal test's floor at each alpha (in rtol) beside the gate's."""
    out = {}
    tolerances = tolerances_for(SWIGLU)
    for name, (exact, var, worst, fixed) in sums.items():
        tol = tolerances[name]
        ref = exact.to(torch.bfloat16).double()
        atol = tol.effective_atol(float(ref.pow(2).mean().sqrt()))
        r = exact.abs()
        keep = r > 0
        row = {}
        for alpha in alphas:
            z = quantile(alpha / (OUTPUTS * exact.numel()))
            spread = torch.minimum(z * var.sqrt(), worst) + fixed     # few terms: their worst case
            row[f"{alpha:g}"] = {"z": z, "floor_rtol": float(((tol.rtol * r + atol + spread)[keep] / r[keep]).min()) / tol.rtol}
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
    parser.add_argument("--db-only", action="store_true",
                        help="db alone, streamed over rows, without the gate's floors (for the article's case)")
    parser.add_argument("--gate-table", action="store_true",
                        help="print the gate's floors at every small case of the quick profile instead")
    args = parser.parse_args(argv)
    if args.gate_table:
        print(gate_table(sorted((c for c in quick_cases(SWIGLU) if c.m * c.n <= 2 ** 22), key=lambda c: (c.scale, c.m))))
        return 0
    alphas = args.alpha or [1e-3, 1e-5]
    specs = ([parse_case(c) for c in args.case] if args.case else
             [c for c in quick_cases(SWIGLU) if c.scale in ("seed", "unit") and c.m * c.n <= 2 ** 22])
    results = {s.id: floors(s, alphas, not args.store_only, args.db_only) for s in specs}
    names = ("db_g", "db_fc") if args.db_only else ("db_g", "db_fc", "dx")
    lines = ["| case | " + " | ".join(f"{o}: ideal at alpha {a:g}" for o in names for a in alphas)
             + " | " + " | ".join(f"{o}: gate" for o in names) + " |", "|---|" + "---|" * (len(names) * (len(alphas) + 1))]
    for case, per in results.items():
        lines.append(f"| {case} | " + " | ".join(f"{per[o][f'{a:g}']['floor_rtol']:.2f}" for o in names for a in alphas)
                     + " | " + " | ".join(f"{per[o]['gate']:.2f}" for o in names) + " |")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
