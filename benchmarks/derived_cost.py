"""The gate's cost with the derived allowances against the hand models', back to back.

For SwiGLU backward and RMSNorm backward: the gate stage of one case (the golden pass with the
allowances and the comparison of one backend's outputs, ``compare_case(..., diagnose=False)``),
once with the hand golden and gate and once with the derived ones, each in its own process
(a warm-up call, then ``--calls`` timed ones; peak RSS of the process). Rounds alternate hand and
derived so that a host's drift shows in both. Printed: one line per process, then per operator
the range of each gate's times and derived / hand.

``--gemm``: one more call per process under ``torch.profiler``, whose matrix products (``aten::mm``,
``bmm``, ``addmm``, ``dot``, ``mv``: their own time) are printed beside the call's time. What the
derived gate spends in products alone, against the hand gate's whole time, is the floor its
design sets: a 1.5x bound cannot hold where the products alone take the hand gate's time.

    python benchmarks/derived_cost.py                        # M8192 cases of both operators
    python benchmarks/derived_cost.py --operator swiglu_backward --m 32768 --rounds 1
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
sys.path.insert(0, str(ROOT / "benchmarks"))

CASES = {"swiglu_backward": lambda m: (m, 512, 1024, "seed", 0),
         "rmsnorm_backward": lambda m: (m, 4096, "unit", 0)}


GEMM_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::dot", "aten::mv")


def gemm_share(call) -> dict:
    """One ``call()`` under torch's profiler: its time, and its matrix products' own time and count."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        call()
        seconds = time.perf_counter() - start
    products = [e for e in prof.key_averages() if e.key in GEMM_OPS]
    return {"profiled_seconds": seconds, "gemm_seconds": sum(e.self_cpu_time_total for e in products) / 1e6,
            "gemm_calls": sum(e.count for e in products)}


def one(operator: str, gate: str, m: int, calls: int, gemm: bool = False) -> dict:
    """Time the gate stage in this process (called in a child by ``main``)."""
    import operators
    from accuracy.compare import compare_case
    from cases.evaluate import declared_schedule
    from cases.spec import CaseSpec, make_inputs
    from derived_vs_hand import derived_operator
    from goldens.heap import fragment_releases
    from kernels.registry import resolve
    op = operators.get(operator)
    inputs = make_inputs(CaseSpec(*CASES[operator](m), operator=operator))
    backend = resolve(op, "torch-eager")
    outputs = {backend.name: backend.fn(**{k: v.clone() for k, v in inputs.items()})}
    schedules = {backend.name: declared_schedule(op, backend)}
    judged = op if gate == "hand" else derived_operator(op)
    compare_case(judged, inputs, outputs, schedules, diagnose=False)
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        compare_case(judged, inputs, outputs, schedules, diagnose=False)
        seconds.append(time.perf_counter() - start)
    out = {"operator": operator, "gate": gate, "m": m, "seconds": seconds,
           "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
           "heap_releases": fragment_releases()}
    if gemm:
        out.update(gemm_share(lambda: compare_case(judged, inputs, outputs, schedules, diagnose=False)))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operator", action="append", choices=sorted(CASES))
    parser.add_argument("--m", type=int, default=8192)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gemm", action="store_true", help="one more call profiled: its matrix products' time")
    parser.add_argument("--child", nargs=2, metavar=("OPERATOR", "GATE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(one(*args.child, args.m, args.calls, args.gemm)))
        return 0
    results = []
    for operator in args.operator or sorted(CASES, reverse=True):
        for _ in range(args.rounds):
            for gate in ("hand", "derived"):
                out = subprocess.run([sys.executable, __file__, "--child", operator, gate, "--m", str(args.m),
                                      "--calls", str(args.calls), *(["--gemm"] if args.gemm else [])],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                results.append(r)
                print(f"{operator} M{args.m} {gate}: " + " ".join(f"{s:.2f}" for s in r["seconds"])
                      + f" s, peak RSS {r['peak_rss_gb']:.2f} GB, heap releases {r['heap_releases']}"
                      + (f"; profiled call {r['profiled_seconds']:.2f} s, matrix products {r['gemm_seconds']:.2f} s "
                         f"in {r['gemm_calls']} calls" if args.gemm else ""), flush=True)
        times = {g: [s for r in results if r["operator"] == operator and r["gate"] == g for s in r["seconds"]]
                 for g in ("hand", "derived")}
        h, d = times["hand"], times["derived"]
        print(f"{operator} M{args.m}: hand {min(h):.2f}-{max(h):.2f} s, derived {min(d):.2f}-{max(d):.2f} s, "
              f"derived / hand {min(d) / max(h):.2f}-{max(d) / min(h):.2f} (medians "
              f"{sorted(d)[len(d) // 2] / sorted(h)[len(h) // 2]:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
