"""Peak memory and time of the golden pass of one case, over its first chunks: the reference with
its rounding model (the allowances' term sums), the BF16-faithful and the tiled layer of the
operator's default schedule, as the matrix streams them. Every chunk has the same rows, so the
first chunks' peak is the case's.

    python benchmarks/golden_memory.py --operator attention --case 32768,32768,128,unit --chunks 1
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import operators                               # noqa: E402
from cases.matrix import CaseSyntaxError, parse_case   # noqa: E402
from cases.spec import make_inputs              # noqa: E402
from goldens.stream import GoldenPass           # noqa: E402


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6     # Linux: kB


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operator", default=operators.DEFAULT)
    parser.add_argument("--case", required=True, help="the operator's sizes,SCALE[,SEED]")
    parser.add_argument("--chunks", type=int, default=1, help="stop after this many chunks (0: all)")
    args = parser.parse_args(argv)
    try:
        op = operators.get(args.operator)
        spec = parse_case(op, args.case)
    except (operators.OperatorNotFound, CaseSyntaxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    inputs = make_inputs(spec)
    schedules = op.schedules
    default = schedules.default_schedule()
    layers = {"fp64": schedules.FP64_GLOBAL, "faithful": schedules.faithful_schedule(default.plan), "tiled": default}
    golden = GoldenPass(op, inputs, layers, terms=True)
    print(f"{spec.id}: inputs, peak RSS {peak_gb():.2f} GB; {golden.chunk_rows} rows per chunk", flush=True)
    start = time.perf_counter()
    for i, block in enumerate(golden.blocks(), 1):
        print(f"rows {block.stop} of {spec.sizes[0]}: peak RSS {peak_gb():.2f} GB, {time.perf_counter() - start:.0f} s",
              flush=True)
        if args.chunks and i >= args.chunks:
            break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
