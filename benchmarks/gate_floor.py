"""Detection floors, false alarms and catches of the gate at given cases (default: the
article's case, M=220000 K=512 N=1024 seed scale, seeds 0-2).

Per case: the correct kernels that declare nothing (torch-eager and the correct ones of
``operators.swiglu_backward.kernels.plain``) must pass every output; its wrong ones (truncating
stores, a uniform 1/128 error, BF16 math) must fail, and the table says by which check
(element-wise, fitted scale, rounding direction, own upstream). Every gated record's
element-wise detection floor and fitted-scale threshold are listed per output.

    python benchmarks/gate_floor.py                                  # the article's case, seeds 0-2
    python benchmarks/gate_floor.py --case M4097-K96-N200-unit-s0 --json out.json
    python benchmarks/gate_floor.py --all-backends-seeds 1           # every kernel at seed 0 only
    python benchmarks/gate_floor.py --case M220000-K512-N1024-seed-s1 --all-backends-seeds 0 --correct-only

Memory: each backend's outputs at the article's case are 1.1 GB (BF16), held together for
the one comparison pass; every kernel at once (nine, ``--all-backends-seeds 1``) peaked at
23.9 GB RSS on a 24 GiB machine (2026-12-03), with each kernel's own temporaries on top.
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
from cases.evaluate import declared_schedule            # noqa: E402
from cases.spec import CaseSpec, make_inputs             # noqa: E402
from operators.swiglu_backward.kernels import plain  # noqa: E402
from kernels.registry import Backend, resolve            # noqa: E402
from kernels.runner import run_backend                   # noqa: E402
from operators.swiglu_backward import OPERATOR as SWIGLU  # noqa: E402

CHECKS = ("elementwise_passed", "scale_passed", "direction_passed", "own_passed")
SHORT = {"elementwise_passed": "element", "scale_passed": "scale", "direction_passed": "direction",
         "own_passed": "own"}


def parse_case(text: str) -> CaseSpec:
    m, k, n, scale, seed = text.split("-")
    return CaseSpec(int(m[1:]), int(k[1:]), int(n[1:]), scale, int(seed[1:]), operator=SWIGLU)


def backends(everything: bool, correct_only: bool = False) -> list[Backend]:
    correct = [resolve(SWIGLU, "torch-eager")] + [Backend(f"plain:{n}", f) for n, f in plain.CORRECT.items()]
    wrong = [Backend(f"plain:{n}", f) for n, f in plain.WRONG.items()]
    if not everything:
        correct, wrong = correct[:2], [b for b in wrong if "bf16_math" not in b.name]
    return correct if correct_only else correct + wrong


def run(spec: CaseSpec, chosen: list[Backend]) -> dict:
    start = time.perf_counter()
    inputs = make_inputs(spec)
    outputs, seconds = {}, {}
    for b in chosen:
        r = run_backend(SWIGLU, b, inputs)
        if not r.ok:
            raise RuntimeError(f"{b.name} at {spec.id}: {r.error or r.skipped}")
        outputs[b.name], seconds[b.name] = r.outputs, r.seconds
    t_cmp = time.perf_counter()
    comparison = compare_case(SWIGLU, inputs, outputs, {b.name: declared_schedule(SWIGLU, b) for b in chosen},
                              diagnose=False)
    compare_s = time.perf_counter() - t_cmp
    rows = {}
    for name, metrics in comparison["backends"].items():
        verdicts = gated_verdicts(SWIGLU, metrics, case=spec.id, backend=name)
        rows[name] = {o: {"passed": v.passed, "failed_checks": [SHORT[c] for c in CHECKS if getattr(v, c) is False],
                          "mismatches": metrics[o][REFERENCE]["mismatches"],
                          "floor": metrics[o][REFERENCE]["detection_floor"],
                          "scale_allowed": (metrics[o][REFERENCE]["aggregate"] or {}).get("scale_allowed"),
                          "beta": (metrics[o][REFERENCE]["aggregate"] or {}).get("scale_beta")}
                      for o, v in verdicts.items()}
    return {"case": spec.id, "rows": rows, "backend_seconds": seconds, "compare_seconds": compare_s,
            "seconds": time.perf_counter() - start}


def table(results: list[dict]) -> str:
    lines = ["| case | backend | verdict | failing outputs (checks) |", "|---|---|---|---|"]
    for res in results:
        for name, per_o in res["rows"].items():
            failing = [f"{o} ({', '.join(r['failed_checks'])})" for o, r in per_o.items() if not r["passed"]]
            lines.append(f"| {res['case']} | {name} | {'fail' if failing else 'pass'} | {'; '.join(failing) or '-'} |")
    lines += ["", "| case | output | element-wise floor (x rtol) | fitted-scale threshold |", "|---|---|---|---|"]
    for res in results:
        first = next(iter(res["rows"].values()))
        for o in SWIGLU.output_names:
            r = first[o]
            lines.append(f"| {res['case']} | {o} | {r['floor'] * 128:.3g} ({r['floor']:.4g}) | "
                         f"{r['scale_allowed']:.3g} |")
    lines += ["", "| case | compare (s) | backends (s) |", "|---|---|---|"]
    for res in results:
        lines.append(f"| {res['case']} | {res['compare_seconds']:.0f} | "
                     + ", ".join(f"{n} {s:.0f}" for n, s in res["backend_seconds"].items()) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=None, help="case id (repeatable); default M220000 seeds 0-2")
    parser.add_argument("--all-backends-seeds", type=int, default=1,
                        help="the first N cases run every kernel; later ones torch-eager, plain and two wrong kernels")
    parser.add_argument("--correct-only", action="store_true",
                        help="the correct kernels only (torch-eager and plain beyond the first cases): a false-alarm check")
    parser.add_argument("--json", default=None)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cases = ([parse_case(c) for c in args.case] if args.case else
             [CaseSpec(220000, 512, 1024, "seed", s, operator=SWIGLU) for s in range(3)])
    results = []
    for i, spec in enumerate(cases):
        results.append(run(spec, backends(i < args.all_backends_seeds, args.correct_only)))
        print(f"{spec.id}: {results[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
