"""H200 measurements of the Triton backends, in one process: environment, the GPU's
ceilings measured in the same run, kernel times at the article's case against them,
and run-to-run determinism. Called by ``run.sh``; writes one JSON file.

    python3 benchmarks/h200/bench.py --out OUT/bench.json [--quick]

Ceilings (measured here, not datasheet): copy bandwidth = bytes read + written by a
large device-to-device copy / time; BF16 matmul rate = 2*8192^3 / time of a cuBLAS
product on random data. A kernel's floor is max(bytes / bandwidth, flops / rate),
with bytes = each input read once + each output written once (+ the deterministic
variant's partial buffers, written and read back once).

Times: CUDA events around each call, median of ``--reps`` after warm-up; per-kernel
device times from torch.profiler (one profiled call after warm-up), by kernel name.
Every step is guarded: a failing step records its error and the rest still runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SEED = (220000, 512, 1024)


def _step(results: dict, name: str, fn, *args, **kwargs):
    t0 = time.perf_counter()
    try:
        results[name] = fn(*args, **kwargs)
    except Exception as exc:  # record and go on: one broken step must not lose the others
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=6)}
    print(f"[bench] {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    _empty_cache()


def environment() -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError as exc:
        env["triton"] = f"not importable: {exc}"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, sm_count=p.multi_processor_count, memory_gib=round(p.total_memory / 2 ** 30, 1),
                   capability=f"{p.major}.{p.minor}")
    try:
        env["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:
        env["nvidia_smi"] = f"unavailable: {exc}"
    env["TRITON_INTERPRET"] = os.environ.get("TRITON_INTERPRET")
    return env


DEVICE = "cuda"   # "cpu" only for a dry run of this script's code paths (--cpu-dry-run)


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _empty_cache() -> None:
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def _events_ms(fn, reps: int, warmup: int = 3) -> dict:
    for _ in range(warmup):
        fn()
    _sync()
    times = []
    for _ in range(reps):
        if DEVICE == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "reps": reps}


def ceilings(reps: int) -> dict:
    """Copy bandwidth and BF16 / FP32 matmul rates, measured now on this GPU."""
    out = {}
    n = 2 ** 30 if DEVICE == "cuda" else 2 ** 24  # 1 GiB a buffer: far beyond the 60 MB L2
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    t = _events_ms(lambda: dst.copy_(src), reps)
    out["copy"] = {**t, "bytes": 2 * n, "tb_per_s": 2 * n / (t["median_ms"] * 1e-3) / 1e12}
    del src, dst
    s = 8192 if DEVICE == "cuda" else 256
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a = torch.randn(s, s, device=DEVICE, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(s, s, device=DEVICE, dtype=torch.bfloat16, generator=gen)
    t = _events_ms(lambda: a @ b, reps)
    out["matmul_bf16"] = {**t, "shape": [s, s, s], "tflop_per_s": 2 * s ** 3 / (t["median_ms"] * 1e-3) / 1e12}
    af, bf = a.float(), b.float()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    t = _events_ms(lambda: af @ bf, max(3, reps // 3))
    torch.backends.cuda.matmul.allow_tf32 = prev
    out["matmul_fp32"] = {**t, "shape": [s, s, s], "tflop_per_s": 2 * s ** 3 / (t["median_ms"] * 1e-3) / 1e12}
    return out


def work(m: int, k: int, n: int, n_tiles_w: int) -> dict:
    """Fewest bytes and flops per kernel of the operator (BF16 = 2 bytes)."""
    e = 2
    return {
        "b": {"bytes": 5 * m * n * e, "flops": 15 * m * n},        # read dy, g, fc; write dg, dfc
        "w": {"bytes": (m * k + 2 * m * n + 2 * k * n) * e, "flops": 2 * 2 * m * k * n},
        "w_partials": {"bytes": 2 * 2 * n_tiles_w * k * n * e, "flops": 0},   # deterministic: write + read back
        "x": {"bytes": (2 * m * n + 2 * k * n + m * k) * e, "flops": 2 * 2 * m * n * k},
    }


def floor_ms(w: dict, ceil: dict) -> float:
    bw = ceil["copy"]["tb_per_s"] * 1e12
    rate = ceil["matmul_bf16"]["tflop_per_s"] * 1e12
    return 1e3 * max(w["bytes"] / bw, w["flops"] / rate)


def _profile_kernels(fn) -> dict:
    """Device time per kernel name of one call (torch.profiler over CUPTI)."""
    from torch.profiler import ProfilerActivity, profile
    if DEVICE != "cuda":
        return {}
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    per = {}
    for ev in prof.key_averages():
        dev_us = getattr(ev, "device_time_total", None)
        if dev_us is None:
            dev_us = getattr(ev, "cuda_time_total", 0)
        if dev_us and ev.key:
            per[ev.key] = {"ms": dev_us / 1e3, "calls": ev.count}
    return dict(sorted(per.items(), key=lambda kv: -kv[1]["ms"]))


def kernel_times(ceil: dict, reps: int, shape=SEED) -> dict:
    from cases.spec import CaseSpec, make_inputs
    from kernels.registry import resolve
    from operators.swiglu_backward.kernels.triton.backend import triton_article
    from operators.swiglu_backward import OPERATOR as SWIGLU
    m, k, n = shape
    inputs = make_inputs(CaseSpec(m, k, n, "seed", 0, operator=SWIGLU), DEVICE)
    tiles_w = -(-m // 2048)
    w = work(m, k, n, tiles_w)
    floors = {name: floor_ms(v, ceil) for name, v in w.items()}
    total_floor = floors["b"] + floors["w"] + floors["x"]
    out = {"shape": {"M": m, "K": k, "N": n}, "work": w, "floor_ms": floors, "operator_floor_ms": total_floor,
           "backends": {}}
    backends = {"triton": resolve(SWIGLU, "triton").fn, "triton-atomic": resolve(SWIGLU, "triton-atomic").fn,
                "triton-article": triton_article, "torch-eager": resolve(SWIGLU, "torch-eager").fn}
    for name, fn in backends.items():
        rec = {}
        try:
            t0 = time.perf_counter()
            fn(**inputs)          # first call: compiles (triton) or warms cuBLAS
            _sync()
            rec["first_call_s"] = time.perf_counter() - t0
            rec["end_to_end"] = _events_ms(lambda: fn(**inputs), reps)
            rec["fraction_of_operator_floor"] = total_floor / rec["end_to_end"]["median_ms"]
            kernels = _profile_kernels(lambda: fn(**inputs))
            rec["kernels"] = kernels
            if name.startswith("triton"):
                by = {"b": "_b_kernel", "w": "_w_kernel", "x": "_x_kernel"}
                rec["per_kernel_vs_floor"] = {
                    kk: {"ms": kernels[kn]["ms"], "floor_ms": floors[kk],
                         "fraction_of_floor": floors[kk] / kernels[kn]["ms"]}
                    for kk, kn in by.items() if kn in kernels}
        except Exception as exc:
            rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["traceback"] = traceback.format_exc(limit=6)
        out["backends"][name] = rec
        print(f"[bench]   {name}: {json.dumps({k_: v for k_, v in rec.items() if k_ in ('end_to_end', 'error')})}",
              flush=True)
        _empty_cache()
    return out


def determinism_runs(repeats: int, shape=SEED) -> dict:
    from accuracy.determinism import determinism
    from cases.spec import CaseSpec, make_inputs
    from kernels.registry import resolve
    from operators.swiglu_backward import OPERATOR as SWIGLU
    m, k, n = shape
    out = {}
    for scale in ("seed", "unit"):
        inputs = make_inputs(CaseSpec(m, k, n, scale, 0, operator=SWIGLU), DEVICE)
        for name in ("triton", "triton-atomic", "torch-eager"):
            rec = determinism(resolve(SWIGLU, name).fn, inputs, repeats=repeats, name=name)
            out[f"{name}@M{m}-K{k}-N{n}-{scale}"] = rec
            print(f"[bench]   determinism {name} {scale}: status {rec['status']}, bit_identical {rec['bit_identical']}, "
                  f"differing {({o: r['differing_elements'] for o, r in rec['outputs'].items() if not r['bit_identical']})}",
                  flush=True)
        del inputs
        _empty_cache()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5, help="determinism: runs per backend")
    ap.add_argument("--quick", action="store_true", help="small shape and few reps (a smoke run of this script)")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="exercise this script's code on CPU through triton's interpreter (numbers meaningless)")
    args = ap.parse_args(argv)
    global DEVICE
    t0 = time.perf_counter()
    results: dict = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if args.cpu_dry_run:
        DEVICE = "cpu"
        os.environ["TRITON_INTERPRET"] = "1"
        results["dry_run"] = "CPU dry run: code paths only, numbers are not GPU numbers"
    _step(results, "environment", environment)
    if DEVICE == "cuda" and not torch.cuda.is_available():
        results["error"] = "no CUDA device: nothing to measure"
        args.out.write_text(json.dumps(results, indent=1))
        print(json.dumps(results, indent=1))
        return 2
    shape = (2049, 96, 200) if args.cpu_dry_run else (4097, 512, 1024) if args.quick else SEED
    reps = 3 if args.quick or args.cpu_dry_run else args.reps
    _step(results, "ceilings", ceilings, reps)
    if "error" not in results["ceilings"]:
        _step(results, "kernel_times", kernel_times, results["ceilings"], reps, shape)
    _step(results, "determinism", determinism_runs, 3 if args.quick or args.cpu_dry_run else args.repeats, shape)
    results["wall_s"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str))
    print_table(results)
    return 0


def print_table(r: dict) -> None:
    c = r.get("ceilings", {})
    if "copy" in c:
        print(f"ceilings: copy {c['copy']['tb_per_s']:.2f} TB/s, bf16 matmul {c['matmul_bf16']['tflop_per_s']:.0f} "
              f"TFLOP/s, fp32 matmul {c['matmul_fp32']['tflop_per_s']:.0f} TFLOP/s")
    kt = r.get("kernel_times", {})
    if "backends" in kt:
        print(f"operator floor at {kt['shape']}: {kt['operator_floor_ms']:.3f} ms "
              f"(b {kt['floor_ms']['b']:.3f}, w {kt['floor_ms']['w']:.3f}, x {kt['floor_ms']['x']:.3f})")
        for name, rec in kt["backends"].items():
            if "end_to_end" in rec:
                per = " ".join(f"{k}={v['ms']:.3f}ms({100 * v['fraction_of_floor']:.0f}%)"
                               for k, v in rec.get("per_kernel_vs_floor", {}).items())
                print(f"  {name:15s} {rec['end_to_end']['median_ms']:.3f} ms "
                      f"({100 * rec['fraction_of_operator_floor']:.0f}% of floor) {per}")
            else:
                print(f"  {name:15s} ERROR {rec.get('error')}")
    for name, rec in r.get("determinism", {}).items():
        if isinstance(rec, dict) and "status" in rec:
            diff = {o: (v["differing_elements"], v["max_ulp_spread"]) for o, v in rec["outputs"].items()
                    if not v["bit_identical"]}
            print(f"  determinism {name}: {rec['status']} bit_identical={rec['bit_identical']} {diff or ''}")
    print(f"bench wall {r.get('wall_s', float('nan')):.1f} s")


if __name__ == "__main__":
    sys.exit(main())
