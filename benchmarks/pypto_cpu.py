"""Time and peak memory of the PyPTO kernels on CPU (PyPTO's interpreter).

    python benchmarks/pypto_cpu.py                      # M = 1025, 4097, 8192; K=512, N=1024
    python benchmarks/pypto_cpu.py --m 1025 16384 --variant hardened

Each (variant, kernel, M) runs in a fresh subprocess, so ``ru_maxrss`` is that kernel's
own peak (inputs included; ``base`` is the RSS before the kernel call, after pypto,
the calculator and the inputs are loaded). One call = one recompile (~0.5 s) plus the
interpretation; the backend calls a kernel once per block of
``SWIGLU_PYPTO_CPU_CHUNK_ROWS`` rows (default 8192), which this benchmark reproduces.
Prints a Markdown table: wall time, CPU time (this process + its g++ children; less
sensitive to other load than wall time), peak RSS. Timing, not accuracy: run it on an
otherwise idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (g++ on the control flow)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def child(variant: str, kernel: str, m: int, k: int, n: int) -> dict:
    sys.path.insert(0, str(ROOT))
    import torch

    from operators.swiglu_backward.kernels.pypto import backend, interpreter
    from operators.swiglu_backward.schedule import ARTICLE, HARDENED

    pypto = interpreter.import_pypto()
    interpreter.load_calculator()
    from operators.swiglu_backward.kernels.pypto import kernels as pk

    schedule = {"article": ARTICLE, "hardened": HARDENED}[variant]
    var, b, w, x = pk.build(k, n, schedule, pypto.RunMode.SIM.value, widen_matmul_inputs=False)
    gen = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=gen).to(torch.bfloat16)  # noqa: E731
    inp = {"x": r(m, k), "w_g": r(k, n), "w_fc": r(k, n), "dy": r(m, n), "g": r(m, n), "fc": r(m, n)}
    out, acc = backend._alloc(m, k, n, var, "cpu")
    out["dg"].copy_(r(m, n))
    out["dfc"].copy_(r(m, n))
    fn = {"b": b, "w": w, "x": x}[kernel]
    tile = {"b": schedule.tile_m_b, "w": schedule.tile_m_w, "x": schedule.tile_m_x}[kernel]
    step = backend.cpu_chunk_rows(kernel, tile)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    calls = 0
    for r0 in range(0, m, step):
        args = backend._kernel_args(var, inp, out, acc, slice(r0, min(m, r0 + step)))[kernel]
        interpreter.run(fn, *args)
        calls += 1
    dt = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"variant": variant, "kernel": kernel, "m": m, "k": k, "n": n, "seconds": dt, "cpu_seconds": cpu, "calls": calls,
            "tiles": -(-m // tile), "peak_rss": peak, "base_rss": base}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, nargs="+", default=[1025, 4097, 8192])
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--variant", choices=["article", "hardened"], nargs="+", default=["article"])
    ap.add_argument("--kernel", choices=["b", "w", "x"], nargs="+", default=["b", "w", "x"])
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        v, kern, m, k, n = args.child
        print(json.dumps(child(v, kern, int(m), int(k), int(n))))
        return 0
    rows = []
    from operators.swiglu_backward.kernels.pypto.backend import DEFAULT_CHUNK_ROWS  # noqa: PLC0415

    chunks = os.environ.get("SWIGLU_PYPTO_CPU_CHUNK_ROWS") or DEFAULT_CHUNK_ROWS
    print(f"PyPTO {'/'.join(args.variant)} kernels on CPU (interpreter), K={args.k}, N={args.n}, "
          f"{os.cpu_count()} cores, rows per call {chunks}, load average {os.getloadavg()[0]:.1f}\n")
    print("| variant | kernel | M | tiles | calls | wall (s) | CPU (s) | peak RSS (GB) | kernel's own (GB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for v in args.variant:
        for m in args.m:
            for kern in args.kernel:
                cmd = [sys.executable, __file__, "--child", v, kern, str(m), str(args.k), str(args.n)]
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
                if proc.returncode != 0:
                    print(f"| {v} | {kern} | {m} | - | - | failed: {proc.stderr.strip().splitlines()[-1][:80]} | | | |")
                    continue
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(f"| {v} | {kern} | {m} | {row['tiles']} | {row['calls']} | {row['seconds']:.1f} | {row['cpu_seconds']:.1f} | "
                      f"{row['peak_rss'] / 1e9:.2f} | {(row['peak_rss'] - row['base_rss']) / 1e9:.2f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
