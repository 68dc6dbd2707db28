"""Benchmark: which tool runs the element-wise comparison fastest on this machine.

The per-slice core of the gated comparison (``accuracy.metrics.ErrorStats``: error, excess over
rtol |golden| + allowance, the mismatch count, the maxima of |error|, relative error and ULPs,
the signed counts and the FP64 sums of squares), on the article's row shape, in 2^18-element
slices as the framework streams them, written three ways:

* ``eager``: plain torch, one pass per operation (what ``accuracy/metrics.py`` does);
* ``compiled``: the same function through ``torch.compile`` (Inductor's C++ backend fuses the
  passes into one loop per output); compile time reported separately;
* ``numba``: one explicit loop, when numba is installed (``pip install numba``).

Then the framework's own comparison, ``ErrorStats.update`` as the case matrix calls it (the
gated comparison with allowance, FP64 values and variances; a diagnosis layer; the reference's
dual-only metrics), on its eager passes and on the compiled pass (``accuracy.compiled_pass``), whole
chunks of 2048 rows: what the choice buys end to end, every count, maximum and selection
included.

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
    report["error_stats"] = error_stats(args.rows, args.n)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def error_stats(rows: int, n: int, chunk: int = 2048) -> dict:
    """ns per element of ``ErrorStats.update``, eager and compiled, per kind of comparison."""
    from accuracy.metrics import ErrorStats
    from accuracy.tolerances import Tolerance
    gen = torch.Generator().manual_seed(1)
    exact = torch.randn(rows, n, generator=gen, dtype=torch.float64)
    reference = exact.to(torch.bfloat16)
    kernel = (exact * (1 + 2 ** -8 * torch.randn(rows, n, generator=gen, dtype=torch.float64))).to(torch.bfloat16)
    allowance = (exact.abs() * 2 ** -9).float()
    kinds = {"gated": ({}, {"allowance": allowance, "exact": exact, "noise_var": (exact * 2 ** -10) ** 2}),
             "diagnosis": ({"dual": True}, {"bound": allowance * 4}),
             "dual_only": ({"dual_only": True}, {})}
    result = {}
    for kind, (stats_args, update_args) in kinds.items():
        for path in ("eager", "compiled"):
            def once() -> float:
                st = ErrorStats(Tolerance(RTOL, 1e-4), (rows, n), scale_rms=1.0, **stats_args)
                if path == "eager":
                    st._update_compiled = lambda *a, **k: False
                start = time.perf_counter()
                for r in range(0, rows, chunk):
                    st.update(kernel[r:r + chunk], reference[r:r + chunk], row_offset=r,
                              **{k: v[r:r + chunk] for k, v in update_args.items()})
                st.finalize()
                return time.perf_counter() - start
            once()       # compiles, or loads the compiled pass from numba's cache
            best = min(once() for _ in range(3))
            result.setdefault(kind, {})[path] = best / (rows * n) * 1e9
        print(f"ErrorStats.update {kind:<10} eager {result[kind]['eager']:6.2f} ns/element, "
              f"compiled {result[kind]['compiled']:6.2f} ns/element")
    return result


if __name__ == "__main__":
    main()
