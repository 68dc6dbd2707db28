"""The torch backends as they compute on a CPU with BF16 instructions, emulated on one without.

On a CPU with avx512_bf16 or AMX, oneDNN's BF16 GEMM uses ``vdpbf16ps`` /
``tdpbf16ps``, which treat subnormal operands as zero and flush subnormal results
(Intel SDM: "denormal inputs are treated as zero, denormal outputs are flushed");
elsewhere it converts to FP32 and keeps them. ``torch.set_flush_denormal(True)``
sets the same FTZ + DAZ for FP32 arithmetic on x86, so the emulation reruns each
backend's matmuls (``x.t() @ dg``, ``x.t() @ dfc``, ``dg @ w_g.t() + dfc @ w_fc.t()``,
autograd's formulas) on its own stored BF16 dg/dfc under that mode; the
elementwise backward, the sums and the goldens run as usual, as they do there.

It writes a results directory whose manifest's ``bf16_gemm_keeps_subnormals`` is
measured inside the emulation (false), so

    python benchmarks/bf16_isa_emulation.py --results-dir /tmp/bf16isa
    python -m cases.expectations update /tmp/bf16isa

measures the bounds of the expectations that hold where the GEMM flushes. It is
an emulation: the run of that branch on real BF16 hardware is what confirms it
(the manifest says ``emulation``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import operators                                                # noqa: E402
from cases.evaluate import evaluate_case, golden_records, records_for   # noqa: E402
from cases.matrix import LARGE_M, PROFILES                      # noqa: E402
from kernels.registry import Backend, resolve                   # noqa: E402
from operators.swiglu_backward import OPERATOR as SWIGLU        # noqa: E402
from runs import manifest as run_manifest, platform_facts       # noqa: E402
from runs.results import SCHEMA_VERSION, write_atomic           # noqa: E402

EMULATION = ("BF16 GEMMs under FTZ+DAZ (torch.set_flush_denormal), as vdpbf16ps/AMX compute them; "
             "benchmarks/bf16_isa_emulation.py")


def _check_goldens_unflushed() -> None:
    if not platform_facts.fp32_keeps_subnormals("cpu"):
        raise RuntimeError("FP32 arithmetic flushes subnormals outside the emulated GEMMs: the goldens of "
                           "this run are not trustworthy")


def with_flushing_gemm(backend: Backend) -> Backend:
    """``backend`` with its three matmuls recomputed on its own BF16 dg/dfc under FTZ+DAZ."""
    def fn(*, x, w_g, w_fc, dy, g, fc):
        out = dict(backend.fn(x=x, w_g=w_g, w_fc=w_fc, dy=dy, g=g, fc=fc))
        dg, dfc = out["dg"], out["dfc"]
        with platform_facts.flushing_subnormals():
            out["dw_g"], out["dw_fc"] = x.t() @ dg, x.t() @ dfc
            out["dx"] = dg @ w_g.t() + dfc @ w_fc.t()
        return out
    return Backend(backend.name, fn)


def emulated_facts(device: str) -> dict:
    facts = platform_facts.measure(device)
    with platform_facts.flushing_subnormals():
        facts["bf16_gemm_keeps_subnormals"] = platform_facts.bf16_gemm_keeps_subnormals(device)
    return facts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", required=True)
    parser.add_argument("--backend", action="append", default=None,
                        help="registered torch backends to emulate (default: torch-eager, torch-compile)")
    parser.add_argument("--profile", choices=tuple(PROFILES), default="quick")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--scale", default="tiny", help="scale profile of the cases to run (default: tiny)")
    args = parser.parse_args(argv)
    backends = [with_flushing_gemm(resolve(SWIGLU, n)) for n in (args.backend or ["torch-eager", "torch-compile"])]
    cases = [c for c in PROFILES[args.profile](SWIGLU, args.seeds) if c.m < LARGE_M and c.scale == args.scale]
    _check_goldens_unflushed()
    manifest = run_manifest.build("cpu", facts=emulated_facts("cpu"))
    manifest["emulation"] = EMULATION
    # whose known failures ``python -m cases.expectations update`` measures (and whom the report names)
    manifest["selection"] = {"operator": operators.key(SWIGLU), "profile": args.profile, "seeds": args.seeds}
    records = []
    for spec in cases:
        outcome = evaluate_case(spec, backends)
        records += golden_records(outcome)
        for b in backends:
            recs = records_for(outcome, b.name)
            records += recs
            failed = sorted({r["output"] for r in recs if r.get("gated") and r["status"] == "fail"})
            print(f"{spec.id} {b.name}: {'fails ' + ', '.join(failed) if failed else 'passes'}")
        _check_goldens_unflushed()
    out = Path(args.results_dir).resolve() / "results.json"
    write_atomic(out, {"schema": SCHEMA_VERSION, "manifest": manifest, "records": records})
    print(f"facts {manifest['facts']}\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
