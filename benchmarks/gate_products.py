"""Benchmark: how much of the gate is matrix products, and how many it computes.

``benchmarks/seed_case.py`` sets the gate's roofline from a model of the work (the FP64 layer's
four [M,K]x[K,N]-sized products, sixteen FP32 ones for the allowance's term sums and the kernel's
own dw and dx, plus one read of each operand). This one counts what the gate actually computes:
it runs ``compare_case(..., diagnose=False)`` once plain (the wall time) and once with every
matrix product timed and its FLOPs counted per dtype (a dispatch mode; its per-operation cost
inflates that run's other operations, never the products' own time), and prints

* the products per dtype, in units of one [M,K]x[K,N] product (the model's unit);
* their time, and the time the same FLOPs take at this machine's matmul rate measured now
  (``seed_case.measure_matmul``): the products' own efficiency;
* the rest of the gate (wall minus products): the element-wise golden math, the term sums'
  element-wise parts and the comparison's compiled pass.

    python benchmarks/gate_products.py --m 65536 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

aten = torch.ops.aten
PRODUCTS = (aten.mm, aten.addmm, aten.bmm)


class ProductTimer(TorchDispatchMode):
    """Wall time and FLOPs per dtype of every matrix product dispatched while active."""

    def __init__(self):
        super().__init__()
        self.seconds = 0.0
        self.flops: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket not in PRODUCTS:
            return func(*args, **(kwargs or {}))
        lhs, rhs = args[1:3] if func.overloadpacket is aten.addmm else args[:2]
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.seconds += time.perf_counter() - start
        batch = lhs.shape[0] if lhs.dim() == 3 else 1
        dtype = str(lhs.dtype).replace("torch.", "")
        self.flops[dtype] = self.flops.get(dtype, 0) + 2 * batch * lhs.shape[-2] * lhs.shape[-1] * rhs.shape[-1]
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=65536)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--json", help="also write the numbers as one JSON object to this file")
    args = parser.parse_args()

    from goldens.heap import keep_freed_memory
    from accuracy.compare import compare_case
    from benchmarks.seed_case import measure_matmul, work
    from cases.spec import CaseSpec, make_inputs
    from operators.swiglu_backward.kernels.torch_autograd import TORCH_BF16, torch_eager
    from operators.swiglu_backward import OPERATOR as SWIGLU

    keep_freed_memory()          # as the case matrix's processes do (cases/plugin.py)
    inputs = make_inputs(CaseSpec(args.m, args.k, args.n, "seed", 0, operator=SWIGLU))
    outputs = {"torch-eager": torch_eager(**inputs)}
    schedules = {"torch-eager": TORCH_BF16}
    compare_case(SWIGLU, inputs, outputs, schedules, diagnose=False)      # numba's pass loaded, buffers warm
    start = time.perf_counter()
    compare_case(SWIGLU, inputs, outputs, schedules, diagnose=False)
    wall = time.perf_counter() - start
    timer = ProductTimer()
    with timer:
        compare_case(SWIGLU, inputs, outputs, schedules, diagnose=False)
    rates = {"float64": measure_matmul(torch.float64), "float32": measure_matmul(torch.float32)}
    unit = 2 * args.m * args.k * args.n
    model = {str(dt).replace("torch.", ""): f for dt, f in work("gate", args.m, args.k, args.n)["flops"].items()}
    at_rate = sum(f / rates[dt] for dt, f in timer.flops.items())
    report = {"m": args.m, "k": args.k, "n": args.n, "threads": torch.get_num_threads(),
              "matmul_gflops": {dt: r / 1e9 for dt, r in rates.items()},
              "gate_wall_s": wall, "products_s": timer.seconds, "products_at_rate_s": at_rate,
              "rest_s": wall - timer.seconds,
              "products": {dt: f / unit for dt, f in timer.flops.items()},
              "model_products": {dt: f / unit for dt, f in model.items()},
              "model_products_at_rate_s": sum(f / rates[dt] for dt, f in model.items())}
    print(f"case M={args.m} K={args.k} N={args.n}; {report['threads']} threads; matmul GFLOP/s "
          + ", ".join(f"{dt} {r:.1f}" for dt, r in report["matmul_gflops"].items()))
    print("products computed (units of one [M,K]x[K,N] product): "
          + ", ".join(f"{dt} {u:.2f}" for dt, u in report["products"].items())
          + "; the roofline's model: " + ", ".join(f"{dt} {u:.2f}" for dt, u in report["model_products"].items()))
    print(f"gate {wall:.1f} s: products {timer.seconds:.1f} s (their FLOPs at the measured rate: {at_rate:.1f} s; "
          f"the model's products: {report['model_products_at_rate_s']:.1f} s), the rest {wall - timer.seconds:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
