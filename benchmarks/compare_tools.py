"""Benchmark: which tool runs the element-wise comparison fastest on this machine.

The per-slice core of the gated comparison (``accuracy.metrics.ErrorStats``: error, excess over
rtol |golden| + allowance, the mismatch count, the maxima of |error|, relative error and ULPs,
the signed counts and the FP64 sums of squares), on the article's row shape, in 2^18-element
slices as the framework streams them, written three ways:

* ``eager``: plain torch, one pass per operation (what ``accuracy/metrics.py`` does);
* ``compiled``: the same function through ``torch.compile`` (Inductor's C++ backend fuses the
  passes into one loop per output); compile time reported separately;
* ``numba``: one explicit loop, when numba is installed (``pip install numba``).

    python benchmarks/compare_tools.py [--rows 16384] [--json F]
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

from accuracy.metrics import SLICE_ELEMENTS  # noqa: E402
from accuracy.ulp import bf16_spacing  # noqa: E402

RTOL, ATOL = 1 / 128, 1e-6


def core(a: torch.Tensor, b: torch.Tensor, allow: torch.Tensor):
    err = a - b
    abs_err = err.abs()
    abs_b = b.abs()
    excess = abs_err - RTOL * abs_b - allow
    rel = (abs_err / abs_b).nan_to_num(nan=0.0)
    ulp = abs_err / bf16_spacing(b)
    a64, b64 = a.double(), b.double()
    return (torch.count_nonzero(excess > ATOL), abs_err.max(), rel.max(), ulp.max(), excess.max(),
            torch.count_nonzero(err > 0), torch.count_nonzero(err < 0), torch.dot(a64, b64), torch.dot(a64, a64),
            torch.dot(b64, b64))


def _numba_core():
    import numba
    import numpy as np

    @numba.njit(cache=False, fastmath=False)
    def loop(a, b, allow):
        n_mis = n_pos = n_neg = 0
        m_abs = m_rel = m_ulp = m_exc = -1.0
        dot = sqa = sqb = 0.0
        for i in range(a.size):
            e = a[i] - b[i]
            ae, ab = abs(e), abs(b[i])
            exc = ae - RTOL * ab - allow[i]
            if exc > ATOL:
                n_mis += 1
            m_abs = max(m_abs, ae)
            m_exc = max(m_exc, exc)
            if ab > 0:
                m_rel = max(m_rel, ae / ab)
                m_ulp = max(m_ulp, ae / (2.0 ** (np.floor(np.log2(ab)) - 7)))
            n_pos += e > 0
            n_neg += e < 0
            dot += float(a[i]) * float(b[i])
            sqa += float(a[i]) * float(a[i])
            sqb += float(b[i]) * float(b[i])
        return n_mis, m_abs, m_rel, m_ulp, m_exc, n_pos, n_neg, dot, sqa, sqb

    return lambda a, b, allow: loop(a.numpy(), b.numpy(), allow.numpy())


def run(fn, slices) -> float:
    start = time.perf_counter()
    for a, b, allow in slices:
        out = fn(a, b, allow)
        [float(v) for v in out]           # every scalar is read, as the framework reads it
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--json")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    golden = torch.randn(args.rows, args.n, generator=gen) * 1e-3
    kernel = golden.to(torch.bfloat16).float()
    allow = golden.abs() * 2 ** -9
    step = max(1, SLICE_ELEMENTS // args.n)
    slices = [(kernel[i:i + step].reshape(-1), golden[i:i + step].reshape(-1), allow[i:i + step].reshape(-1))
              for i in range(0, args.rows, step)]
    report = {"rows": args.rows, "n": args.n, "slices": len(slices), "threads": torch.get_num_threads(), "tools": {}}
    tools = {"eager": (core, 0.0)}
    t = time.perf_counter()
    compiled = torch.compile(core, dynamic=False)
    run(compiled, slices[:1])
    tools["compiled"] = (compiled, time.perf_counter() - t)
    try:
        t = time.perf_counter()
        numba_fn = _numba_core()
        run(numba_fn, slices[:1])
        tools["numba"] = (numba_fn, time.perf_counter() - t)
    except ImportError:
        report["tools"]["numba"] = {"skipped": "numba is not installed"}
    reference = [float(v) for v in core(*slices[0])]
    for name, (fn, setup) in tools.items():
        got = [float(v) for v in fn(*slices[0])]
        same = all(abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(got, reference))
        best = min(run(fn, slices) for _ in range(3))
        report["tools"][name] = {"seconds": best, "per_element_ns": best / (args.rows * args.n) * 1e9,
                                 "setup_s": setup, "agrees_with_eager": same}
        print(f"{name:<9} {best:7.3f} s  {best / (args.rows * args.n) * 1e9:6.2f} ns/element  "
              f"setup {setup:6.1f} s  agrees with eager: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
