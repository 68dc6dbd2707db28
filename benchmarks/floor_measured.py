"""The detection floor measured as kernels err: the smallest uniform relative error of one output
that the gate fails, for errors on the BF16 grid (what a kernel returns), beside the record's
``detection_floor`` (computed for ``reference x (1 + eps)`` off the grid, the continuous model).

Two erring kernels per output, every other output right (torch-eager's):

* **fp64**: the FP64 value (the reference's math, nothing stored) times (1 + eps), rounded once
  to BF16: the most accurate kernel there is, wrong by eps;
* **eager**: torch-eager's own BF16 output times (1 + eps), rounded to BF16: a real kernel's
  roundings plus eps.

eps runs over a grid of ``--step`` rtol (both signs), all grid points compared in one pass
(``compare_case`` with one backend per point). Reported per output, in rtol (1/128): the floor
of the element-wise check alone and of the whole gate (every check) = the smallest |eps| from
which every larger grid point fails, and the record's continuous floor and fitted-scale
threshold. Verdicts only; the gate is the matrix's own (``diagnose=False``).

    python benchmarks/floor_measured.py                                   # M1025-K96-N200-seed-s0
    python benchmarks/floor_measured.py --case M2049-K96-N200-unit-s0 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accuracy.compare import REFERENCE, compare_case     # noqa: E402
from accuracy.gate import gated_verdicts                 # noqa: E402
from cases.spec import CaseSpec, make_inputs             # noqa: E402
from kernels.registry import resolve                     # noqa: E402
from kernels.runner import run_backend                   # noqa: E402
from contract import records                             # noqa: E402
from operators.swiglu_backward import OPERATOR as SWIGLU  # noqa: E402

RTOL = 1 / 128
BF16 = torch.bfloat16


def fp64_outputs(x, w_g, w_fc, dy, g, fc) -> dict[str, torch.Tensor]:
    """Every output in FP64 from the BF16 inputs, nothing stored in between (the reference's math)."""
    x, w_g, w_fc, dy, g, fc = (t.double() for t in (x, w_g, w_fc, dy, g, fc))
    s = torch.sigmoid(g)
    dg = dy * fc * s * (1 + g * (1 - s))
    dfc = dy * g * s
    return {"dg": dg, "dfc": dfc, "db_g": dg.sum(0, keepdim=True), "db_fc": dfc.sum(0, keepdim=True),
            "dw_g": x.t() @ dg, "dw_fc": x.t() @ dfc, "dx": dg @ w_g.t() + dfc @ w_fc.t()}


def _floor(eps: list[float], failed: list[bool]) -> float | None:
    """The smallest |eps| from which every larger grid point fails (None: the largest passes)."""
    floor = None
    for e, f in sorted(zip(eps, failed), reverse=True):
        if not f:
            break
        floor = e
    return floor


def measure(spec: CaseSpec, grid: list[float]) -> dict:
    inputs = make_inputs(spec)
    eager = run_backend(SWIGLU, resolve(SWIGLU, "torch-eager"), inputs).outputs
    exact = fp64_outputs(**inputs)
    result = {}
    for output in SWIGLU.output_names:
        outputs, points = {}, {}
        for base in ("fp64", "eager"):
            for sign in (1, -1):
                for e in grid:
                    name = f"{base}{'+' if sign > 0 else '-'}{e:.3f}"
                    value = exact[output] if base == "fp64" else eager[output].double()
                    outputs[name] = {**eager, output: (value * (1 + sign * e * RTOL)).to(BF16)}
                    points[name] = (base, sign, e)
        comparison = compare_case(SWIGLU, inputs, outputs, dict.fromkeys(outputs, SWIGLU.schedules.default_schedule()),
                                  diagnose=False)
        verdicts = {name: gated_verdicts(SWIGLU, comparison["backends"][name], case=spec.id, backend=name)[output]
                    for name in outputs}
        record = comparison["backends"][f"eager+{grid[0]:.3f}"][output][REFERENCE]
        row = {"continuous_floor": (record["detection_floor"] or 0) / RTOL,
               "scale_threshold": (record["aggregate"] or {}).get("scale_allowed", 0) / RTOL}
        for base in ("fp64", "eager"):
            for sign in (1, -1):
                names = [n for n, p in points.items() if p[0] == base and p[1] == sign]
                eps = [points[n][2] for n in names]
                key = f"{base}{'+' if sign > 0 else '-'}"
                row[f"{key} element-wise"] = _floor(eps, [not verdicts[n].elementwise_passed for n in names])
                row[f"{key} gate"] = _floor(eps, [not verdicts[n].passed for n in names])
        result[output] = row
    return result


def table(case: str, result: dict) -> str:
    cols = ["continuous_floor", "fp64+ element-wise", "fp64- element-wise", "eager+ element-wise",
            "eager- element-wise", "scale_threshold", "fp64+ gate", "fp64- gate", "eager+ gate", "eager- gate"]
    lines = [f"{case}, in rtol (1/128); '-' = not reached on the grid",
             "", "| output | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for output, row in result.items():
        cells = ["-" if row[c] is None else f"{row[c]:.3g}" for c in cols]
        lines.append(f"| {output} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="case id (default M1025-K96-N200-seed-s0)")
    parser.add_argument("--step", type=float, default=0.05, help="grid step in rtol (default 0.05)")
    parser.add_argument("--max", type=float, default=3.0, help="largest |eps| in rtol (default 3)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    grid = [round(args.step * i, 6) for i in range(1, int(args.max / args.step) + 1)]
    out = {}
    for case in args.case or ["M1025-K96-N200-seed-s0"]:
        start = time.perf_counter()
        sizes, scale, seed = records.parse(case)
        spec = CaseSpec(*(sizes[d] for d in SWIGLU.dims), scale, seed, operator=SWIGLU)
        out[case] = measure(spec, grid)
        print(table(case, out[case]))
        print(f"\n({time.perf_counter() - start:.0f} s)\n")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
