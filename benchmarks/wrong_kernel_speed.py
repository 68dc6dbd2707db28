"""Benchmark: is a badly wrong kernel judged as fast as a right one?

One case's comparison (``compare_case``, every golden layer) against torch-eager's outputs and
against all-zero outputs of the same shapes, each in its own process: wall and CPU seconds of the
comparison and of the whole process (inputs, kernel, comparison), peak RSS, and every output's
mismatch count with whether it is exact. An all-zero kernel fails nearly every element of every
output; its count must stay exact without a second pass over the case.

    python benchmarks/wrong_kernel_speed.py                 # M=16384, K=512, N=1024
    python benchmarks/wrong_kernel_speed.py --m 220000      # the article's case (minutes)
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_one(kind: str, m: int, k: int, n: int) -> dict:
    import torch

    from accuracy.compare import compare_case
    from cases.spec import CaseSpec, make_inputs
    from operators.swiglu_backward import OPERATOR as SWIGLU
    from operators.swiglu_backward.kernels.torch_autograd import TORCH_BF16, torch_eager
    from goldens.heap import keep_freed_memory

    keep_freed_memory()          # as the case matrix's processes do
    inputs = make_inputs(CaseSpec(m, k, n, "seed", 0, operator=SWIGLU))
    outputs = torch_eager(**inputs)
    if kind == "zero":
        outputs = {name: torch.zeros_like(t) for name, t in outputs.items()}
    wall, cpu = time.perf_counter(), time.process_time()
    result = compare_case(SWIGLU, inputs, {kind: outputs}, {kind: TORCH_BF16})
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    usage = resource.getrusage(resource.RUSAGE_SELF)
    counts = {o: {"mismatches": g["reference"]["mismatches"], "exact": g["reference"]["mismatches_exact"]}
              for o, g in result["backends"][kind].items()}
    return {"kernel": kind, "compare_wall_s": wall, "compare_cpu_s": cpu,
            "process_cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_gb": usage.ru_maxrss / 2 ** 20,
            "counts": counts}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/wrong_kernel_speed.py")
    parser.add_argument("--m", type=int, default=16384)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--one", choices=("eager", "zero"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.m, args.k, args.n)))
        return 0
    rows = []
    for kind in ("eager", "zero"):
        proc = subprocess.run([sys.executable, __file__, "--one", kind, "--m", str(args.m), "--k", str(args.k),
                               "--n", str(args.n)], capture_output=True, text=True, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"M={args.m}, K={args.k}, N={args.n}")
    print("| kernel | compare wall s | compare CPU s | process CPU s | peak RSS GB | counts exact |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        exact = all(c["exact"] for c in r["counts"].values())
        print(f"| {r['kernel']} | {r['compare_wall_s']:.1f} | {r['compare_cpu_s']:.1f} | {r['process_cpu_s']:.1f} "
              f"| {r['peak_rss_gb']:.2f} | {exact} |")
    ratio = rows[1]["compare_cpu_s"] / rows[0]["compare_cpu_s"]
    print(f"all-zero / torch-eager comparison CPU time: {ratio:.2f}x")
    print("all-zero mismatches: " + ", ".join(f"{o} {c['mismatches']}" for o, c in rows[1]["counts"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
