"""Benchmark: the goldens and the comparison at the article's case (M=220000, K=512, N=1024).

Prints, per golden layer and for the whole comparison (all three layers, metrics and
bounds against one backend's outputs): wall time, peak RSS, and the ratio to this
machine's own roofline measured in the same run:

    roofline = matmul FLOPs / measured matmul rate (per dtype) + bytes / measured copy bandwidth

Each stage runs in its own process so its peak RSS is its own (inputs included; for
compare, the backend's outputs too).

    python benchmarks/seed_case.py                 # the article's case
    python benchmarks/seed_case.py --m 32768       # a smaller M for a quick look
    python benchmarks/seed_case.py --json out.json # the table as one JSON object too
    python benchmarks/seed_case.py --markdown out.json   # docs/performance.md's table from it
    python benchmarks/seed_case.py --operator swiglu_backward_derived --stages backend gate compare
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from goldens.threads import COMPARISON_THREADS, comparison_threads  # noqa: E402

# compare: what the case matrix runs (reference, own, and the three diagnosis layers);
# gate: the verdict alone (``compare_case(..., diagnose=False)``, the same verdicts)
# backend: torch-eager alone on the case's inputs (its peak RSS is the floor the framework adds to)
STAGES = ("fp64", "faithful", "tiled", "backend", "gate", "compare")
# the SwiGLU backward judged by its hand model, or by the allowances its math derives (the same
# goldens for every stage but gate and compare: ``accuracy.derived_switch``)
OPERATORS = ("swiglu_backward", "swiglu_backward_derived")
DTYPE_BYTES = {torch.float64: 8, torch.float32: 4, torch.bfloat16: 2}


def measure_matmul(dtype: torch.dtype, n: int = 2048, repeats: int = 3) -> float:
    """FLOP/s of an n x n x n matmul in dtype (best of repeats)."""
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(0)).to(dtype)
    b = a.t().contiguous()
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def machine_rates() -> dict:
    """Matmul FLOP/s per dtype and copy bytes/s, measured now with the process's threads, and on
    the comparison's (``comparison_threads``, ``goldens.threads``)."""
    def rates():
        return {"matmul": {dt: measure_matmul(dt) for dt in (torch.float64, torch.float32, torch.bfloat16)},
                "copy": measure_copy()}
    measured = rates()
    with comparison_threads():
        measured["comparison"] = rates()
    return measured


# the stages that run through ``compare_case``, on its fixed threads: their roofline is measured there
COMPARISON_STAGES = ("gate", "compare")


def measure_copy(nbytes: int = 1 << 29, repeats: int = 3) -> float:
    """Bytes/s moved by a large tensor copy (read + write counted)."""
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best


def work(stage: str, m: int, k: int, n: int) -> dict:
    """FLOPs per math dtype and bytes of the ideal single-pass implementation of a stage."""
    mm = 2 * m * k * n                     # one of the four [M,K]x[K,N]-sized products
    layers = {"fp64": torch.float64, "faithful": torch.float32, "tiled": torch.float32}
    compares = stage in ("compare", "gate")
    used = {"compare": tuple(layers), "gate": ("fp64",)}.get(stage, (stage,))
    flops: dict = {}
    nbytes = 0
    for layer in used:
        dtype = layers[layer]
        # dx (2 products) + dw (2 products); the tiled layer shares dx with the faithful one
        count = 2 if (layer == "tiled" and compares) else 4
        flops[dtype] = flops.get(dtype, 0) + count * mm
        s = DTYPE_BYTES[dtype]
        nbytes += 2 * (3 * m * n + m * k) + s * (2 * m * n + m * k)   # read BF16 inputs, write dg, dfc, dx
    if compares:
        # what the verdict needs beside the FP64 layer, in FP32: the term sums of the allowance
        # (|t| and t^2 for dx and dw, 4 products; dx's and dw's shared-rounding sums, 2 + 2) and
        # the kernel's own dw and dx from its stored dg, dfc (4)
        flops[torch.float32] = flops.get(torch.float32, 0) + 12 * mm + 4 * mm
        # every comparison reads the kernel's rows and a golden's rows once: the reference and
        # each layer x (dg, dfc, dx), and the own dx
        goldens = len(used) + 1
        nbytes += goldens * (2 + 8) * (2 * m * n + m * k) + (2 + 4) * m * k
    return {"flops": flops, "bytes": nbytes}


def run_stage(stage: str, m: int, k: int, n: int, operator: str = "swiglu_backward") -> dict:
    from accuracy.compare import compare_case
    from cases.spec import CaseSpec, make_inputs
    from goldens.stream import GoldenPass
    from operators.swiglu_backward.schedule import ARTICLE
    from operators.swiglu_backward.kernels.torch_autograd import TORCH_BF16, torch_eager
    from goldens.heap import keep_freed_memory
    import operators
    SWIGLU = operators.get(operator)

    keep_freed_memory()          # as the case matrix's processes do (cases/plugin.py)
    inputs = make_inputs(CaseSpec(m, k, n, "seed", 0, operator=SWIGLU))
    start = time.perf_counter()
    if stage == "backend":              # what the case needs without the framework: inputs, outputs
        torch_eager(**inputs)
        backend_seconds = None
    elif stage in ("compare", "gate"):
        outputs = torch_eager(**inputs)
        backend_seconds = time.perf_counter() - start
        start = time.perf_counter()
        compare_case(SWIGLU, inputs, {"torch-eager": outputs}, {"torch-eager": TORCH_BF16},
                     diagnose=stage == "compare")
    else:
        backend_seconds = None
        layer = {"fp64": SWIGLU.schedules.FP64_GLOBAL, "faithful": SWIGLU.schedules.FAITHFUL_GLOBAL,
                 "tiled": ARTICLE}[stage]
        golden = GoldenPass(SWIGLU, inputs, {stage: layer})
        for _ in golden.blocks():
            pass
    seconds = time.perf_counter() - start
    return {"stage": stage, "seconds": seconds, "backend_seconds": backend_seconds,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20}


def markdown(report: dict) -> str:
    """docs/performance.md's table from a ``--json`` report: the numbers as the benchmark printed them."""
    lines = [f"M={report['m']}, K={report['k']}, N={report['n']}; {report['threads']} threads; matmul GFLOP/s "
             + ", ".join(f"{dt} {r:.1f}" for dt, r in report["matmul_gflops"].items())
             + f"; copy {report['copy_gbps']:.1f} GB/s"
             + "".join(f"; on {report[key].get('threads', 1)} thread(s) ({', '.join(report[key]['stages'])}): "
                       "matmul GFLOP/s " + ", ".join(f"{dt} {r:.1f}" for dt, r in report[key]["matmul_gflops"].items())
                       + f", copy {report[key]['copy_gbps']:.1f} GB/s"
                       for key in ("comparison", "one_thread") if key in report), "",
             "| stage | wall s | roofline s | ratio | peak RSS GB |", "|---|---|---|---|---|"]
    for row in report["stages"]:
        if "failed" in row:
            lines.append(f"| {row['stage']} | failed | | | |")
            continue
        roof = f"{row['roofline_s']:.1f}" if row["roofline_s"] is not None else "-"
        ratio = f"{row['ratio']:.2f}" if row["ratio"] is not None else "-"
        lines.append(f"| {row['stage']} | {row['wall_s']:.1f} | {roof} | {ratio} | {row['peak_rss_gb']:.2f} |")
    if "framework_rss_gb" in report:
        extra = max(0.0, report["framework_rss_gb"])
        lines += ["", f"Framework memory (compare minus the backend alone): {extra:.2f} GB"
                  + (" (the case's peak is the backend's own)" if extra < 0.005 else "")]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=220000)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--json", help="also write the table as one JSON object to this file")
    parser.add_argument("--markdown", metavar="JSON", help="print docs/performance.md's table from a --json report and exit")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES), help="the stages to run (default: all)")
    parser.add_argument("--operator", choices=OPERATORS, default=OPERATORS[0],
                        help="judged by the hand model (default) or by the allowances its math derives")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return
    if args.stage:
        print(json.dumps(run_stage(args.stage, args.m, args.k, args.n, args.operator)))
        return

    # The machine's rates, measured before and after the stages: on a shared host one measurement
    # varied by 2x between runs (FP64 75.1 against 145.7 GFLOP/s, 2026-12-03), and a slowed
    # measurement shrinks every ratio. The faster of the two sets the roofline: the stricter ratio.
    measured = [machine_rates()]
    results = {}
    for stage in args.stages:
        proc = subprocess.run([sys.executable, __file__, "--stage", stage, "--m", str(args.m), "--k", str(args.k),
                               "--n", str(args.n), "--operator", args.operator], capture_output=True, text=True, cwd=ROOT)
        results[stage] = proc
    measured.append(machine_rates())
    rates = {dt: max(m["matmul"][dt] for m in measured) for dt in measured[0]["matmul"]}
    bandwidth = max(m["copy"] for m in measured)
    rates1 = {dt: max(m["comparison"]["matmul"][dt] for m in measured) for dt in measured[0]["matmul"]}
    bandwidth1 = max(m["comparison"]["copy"] for m in measured)
    print(f"machine: {torch.get_num_threads()} threads; matmul GFLOP/s "
          + ", ".join(f"{str(dt).replace('torch.', '')} {r / 1e9:.1f}" for dt, r in rates.items())
          + f"; copy {bandwidth / 1e9:.1f} GB/s (the faster of before and after the stages: "
          + "; ".join(", ".join(f"{m['matmul'][dt] / 1e9:.1f}" for dt in rates) + f", {m['copy'] / 1e9:.1f}"
                      for m in measured) + ")")
    print(f"the comparison's {COMPARISON_THREADS} threads ({', '.join(COMPARISON_STAGES)}): matmul GFLOP/s "
          + ", ".join(f"{str(dt).replace('torch.', '')} {r / 1e9:.1f}" for dt, r in rates1.items())
          + f"; copy {bandwidth1 / 1e9:.1f} GB/s")
    print(f"case M={args.m} K={args.k} N={args.n}")
    print(f"{'stage':<10}{'wall s':>9}{'roofline s':>12}{'ratio':>8}{'peak RSS GB':>13}")
    report = {"m": args.m, "k": args.k, "n": args.n, "operator": args.operator, "threads": torch.get_num_threads(),
              "matmul_gflops": {str(dt).replace("torch.", ""): r / 1e9 for dt, r in rates.items()},
              "copy_gbps": bandwidth / 1e9,
              "comparison": {"threads": COMPARISON_THREADS, "stages": list(COMPARISON_STAGES), "copy_gbps": bandwidth1 / 1e9,
                             "matmul_gflops": {str(dt).replace("torch.", ""): r / 1e9 for dt, r in rates1.items()}},
              "measured": [{"matmul_gflops": {str(dt).replace("torch.", ""): r / 1e9 for dt, r in m["matmul"].items()},
                            "copy_gbps": m["copy"] / 1e9,
                            "comparison": {"matmul_gflops": {str(dt).replace("torch.", ""): r / 1e9
                                                             for dt, r in m["comparison"]["matmul"].items()},
                                           "copy_gbps": m["comparison"]["copy"] / 1e9}} for m in measured],
              "stages": []}
    for stage, proc in results.items():
        if proc.returncode != 0:
            print(f"{stage:<10} failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr else proc.returncode}")
            report["stages"].append({"stage": stage, "failed": proc.stderr.strip()[-2000:] or proc.returncode})
            continue
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        w = work(stage, args.m, args.k, args.n) if stage != "backend" else None
        r, bw = (rates1, bandwidth1) if stage in COMPARISON_STAGES else (rates, bandwidth)
        roof = sum(f / r[dt] for dt, f in w["flops"].items()) + w["bytes"] / bw if w else None
        row = {"stage": stage, "wall_s": result["seconds"], "roofline_s": roof,
               "ratio": result["seconds"] / roof if roof else None, "peak_rss_gb": result["peak_rss_gb"],
               "backend_s": result["backend_seconds"]}
        report["stages"].append(row)
        extra = f"  (backend torch-eager {row['backend_s']:.1f} s, not included)" if row["backend_s"] else ""
        def fmt(v, width, digits):
            return f"{v:>{width}.{digits}f}" if v is not None else f"{'-':>{width}}"
        print(f"{stage:<10}{fmt(row['wall_s'], 9, 1)}{fmt(roof, 12, 1)}{fmt(row['ratio'], 8, 2)}"
              f"{fmt(row['peak_rss_gb'], 13, 2)}{extra}")
    rss = {r["stage"]: r.get("peak_rss_gb") for r in report["stages"]}
    if rss.get("backend") and rss.get("compare"):
        report["framework_rss_gb"] = rss["compare"] - rss["backend"]
        print(f"framework memory (compare minus backend alone): {report['framework_rss_gb']:.2f} GB")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
