"""Catch rate of a uniform relative error on one output at the seed and unit cells, over seeds.

The localized-error issue's target: a uniform +-1/64 on any one output is caught in >= 95% of
seeds at every seed/unit cell of the quick profile. Each wrong kernel is the plain correct kernel
(``operators.swiglu_backward.kernels.plain.plain``) with one output times (1 + eps) or (1 - eps)
and stored in BF16 again: a kernel's own outputs scaled, on the BF16 grid, not the reference's.
All 14 of them (7 outputs x 2 signs) and the unedited kernel, which must pass, are judged in one
pass per case and seed by the matrix's own gate without the diagnosis layers
(``false_alarms.lean_verdicts``, the same verdicts).

The article's case is left out for time (one pass there takes minutes on 2 cores); its
whole-output fitted-scale thresholds are 5e-5 to 1.2e-3 relative (docs/gate-power.md), against
an error of 1.6e-2 here.

    python benchmarks/uniform_catch.py --seeds 20
    python benchmarks/uniform_catch.py --seeds 10 --first-seed 10 --json b.json
    python benchmarks/uniform_catch.py --merge a.json b.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

# several processes share the cores (--first-seed): OpenMP threads sleep while they wait
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cases.evaluate import declared_schedule                      # noqa: E402
from cases.matrix import LARGE_M, quick_cases                     # noqa: E402
from cases.spec import make_inputs                                # noqa: E402
from false_alarms import lean_verdicts                            # noqa: E402
from kernels.registry import Backend                              # noqa: E402
from operators.swiglu_backward import OPERATOR as SWIGLU          # noqa: E402
from operators.swiglu_backward.kernels.plain import plain         # noqa: E402
from runs.seed_stats import wilson_interval                       # noqa: E402

SCALES = ("seed", "unit")


def cells() -> list:
    """The quick profile's seed- and unit-scale cases below ``LARGE_M`` rows."""
    return [c for c in quick_cases(SWIGLU) if c.scale in SCALES and c.m < LARGE_M]


def judge(spec, eps: float) -> dict:
    """{"plain": outputs that failed, (output, sign): caught?} at one case."""
    inputs = make_inputs(spec)
    base = plain(**{k: v.clone() for k, v in inputs.items()})
    kernels = {"plain": base}
    for o in base:
        for sign in (1, -1):
            kernels[f"{o}{'+' if sign > 0 else '-'}"] = {**base, o: (base[o].float() * (1 + sign * eps)).to(torch.bfloat16)}
    schedule = declared_schedule(SWIGLU, Backend("plain", plain))
    verdicts = lean_verdicts(inputs, kernels, dict.fromkeys(kernels, schedule), case=spec.id)
    result = {"plain": sorted(o for o, (v, _) in verdicts["plain"].items() if not v.passed)}
    for name, per_output in verdicts.items():
        if name != "plain":
            result[name] = not per_output[name[:-1]][0].passed
    return result


def study(seeds: int, first_seed: int, eps: float, checkpoint=None) -> dict:
    res = {"eps": eps, "seeds": [], "cells": [c.id.rsplit("-s", 1)[0] for c in cells()], "caught": {},
           "plain_failed": {}, "seconds": 0.0}
    start = time.perf_counter()
    for seed in range(first_seed, first_seed + seeds):
        for base in cells():
            spec = replace(base, seed=seed)
            cell = base.id.rsplit("-s", 1)[0]
            out = judge(spec, eps)
            if out.pop("plain"):
                res["plain_failed"].setdefault(cell, []).append(seed)
            for name, caught in out.items():
                res["caught"].setdefault(cell, {}).setdefault(name, 0)
                res["caught"][cell][name] += int(caught)
        res["seeds"].append(seed)
        res["seconds"] = time.perf_counter() - start
        print(f"seed {seed} done at {res['seconds']:.0f} s", file=sys.stderr, flush=True)
        if checkpoint:
            checkpoint(res)
    return res


def merge(parts: list[dict]) -> dict:
    """Split sweeps (disjoint seeds, the same eps and cells) as one."""
    res = {"eps": parts[0]["eps"], "seeds": [], "cells": parts[0]["cells"], "caught": {}, "plain_failed": {},
           "seconds": 0.0}
    for i, part in enumerate(parts):
        if part["eps"] != res["eps"] or part["cells"] != res["cells"]:
            raise ValueError(f"sweep {i} has another eps or other cells than sweep 0")
        if set(part["seeds"]) & set(res["seeds"]):
            raise ValueError(f"sweep {i} repeats seeds {sorted(set(part['seeds']) & set(res['seeds']))[:10]}")
        res["seeds"] += part["seeds"]
        res["seconds"] = max(res["seconds"], part["seconds"])
        for cell, per in part["caught"].items():
            for name, n in per.items():
                res["caught"].setdefault(cell, {}).setdefault(name, 0)
                res["caught"][cell][name] += n
        for cell, failed in part["plain_failed"].items():
            res["plain_failed"].setdefault(cell, []).extend(failed)
    return res


def table(res: dict) -> str:
    n = len(res["seeds"])
    outputs = [o.name for o in SWIGLU.outputs]
    lines = [f"Uniform error of {res['eps']:.6g} (relative, either sign) on one output, caught / {n} seeds "
             f"(seeds {min(res['seeds'])}-{max(res['seeds'])}); {res['seconds']:.0f} s.", "",
             "| cell | " + " | ".join(outputs) + " | lowest rate (Wilson 95% lower bound) | plain kernel failed at |",
             "|---" * (len(outputs) + 3) + "|"]
    for cell in res["cells"]:
        per = res["caught"].get(cell, {})
        counts = {o: (per.get(o + "+", 0), per.get(o + "-", 0)) for o in outputs}
        low = min(min(c) for c in counts.values())
        bound = 1.0 - wilson_interval(n - low, n)[1]
        failed = res["plain_failed"].get(cell, [])
        lines.append(f"| {cell} | " + " | ".join(f"+{a} / -{b}" for a, b in counts.values())
                     + f" | {low / n:.3f} ({bound:.3f}) | {', '.join(map(str, failed)) or '-'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--eps", type=float, default=1 / 64)
    parser.add_argument("--json", default=None, help="write the raw counts here (after every seed)")
    parser.add_argument("--merge", nargs="+", default=None, metavar="JSON", help="print the table of split sweeps")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.merge:
        print(table(merge([json.loads(Path(p).read_text()) for p in args.merge])))
        return 0
    torch.set_num_threads(args.threads)

    def checkpoint(res):
        if args.json:
            Path(args.json).write_text(json.dumps(res))

    print(table(study(args.seeds, args.first_seed, args.eps, checkpoint)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
