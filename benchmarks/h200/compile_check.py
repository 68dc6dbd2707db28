"""Compile the Triton kernels for sm_90 (H100/H200) on a machine without a GPU, and
report registers, spill stack and whether the matmuls use wgmma.

    python benchmarks/h200/compile_check.py        (needs triton; no GPU, no driver)

Catches front-end errors of the compiled path, which the CPU interpreter never runs,
and sizes the CUDA blocks in ``operators/swiglu_backward/kernels/triton/backend.py`` (CUDA_BLOCKS) before any
GPU time is spent. ``aligned``: integer arguments and pointers divisible by 16, as
triton specialises them at launch for K, N = 512, 1024; ``odd``: no such hint (K, N =
96, 200). Exit status 1 if a kernel fails to compile.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from operators.swiglu_backward.kernels.triton import _kernels  # noqa: E402
from operators.swiglu_backward.kernels.triton.backend import CUDA_BLOCKS as B  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def jobs():
    k = _kernels.build(False)
    bf, f32 = "*bf16", "*fp32"
    b_args = dict(dy_ptr=bf, g_ptr=bf, fc_ptr=bf, dg_ptr=bf, dfc_ptr=bf, M="i32", N="i32")
    opts_b = dict(num_warps=B.warps_b, enable_fp_fusion=False)
    opts_w = dict(num_warps=B.warps_w, num_stages=B.stages, enable_fp_fusion=False)
    opts_x = dict(num_warps=B.warps_x, num_stages=B.stages, enable_fp_fusion=False)
    b_const = dict(TILE_M=1024, BLOCK_R=B.b_rows, BLOCK_N=B.b_cols)
    w_const = dict(TILE_M=2048, BLOCK_M=B.w_rows, BLOCK_K=B.w_k, BLOCK_N=B.w_n, DOT_FP32=False)
    yield "b (tile order, stable)", k.b, {**b_args, "part_g_ptr": bf, "part_fc_ptr": bf}, \
        {**b_const, "EXP_RATIO": False, "ATOMIC": False, "PART_BF16": True}, opts_b
    yield "b (atomic, exp ratio)", k.b, {**b_args, "part_g_ptr": f32, "part_fc_ptr": f32}, \
        {**b_const, "EXP_RATIO": True, "ATOMIC": True, "PART_BF16": False}, opts_b
    w_args = dict(x_ptr=bf, d_ptr=bf, M="i32", K="i32", N="i32")
    yield "w (tile order)", k.w, {**w_args, "part_ptr": bf}, {**w_const, "ATOMIC": False, "PART_BF16": True}, opts_w
    yield "w (atomic)", k.w, {**w_args, "part_ptr": f32}, {**w_const, "ATOMIC": True, "PART_BF16": False}, opts_w
    yield "x", k.x, dict(dg_ptr=bf, dfc_ptr=bf, wg_ptr=bf, wfc_ptr=bf, dx_ptr=bf, M="i32", K="i32", N="i32"), \
        dict(TILE_M=1024, BLOCK_M=B.x_rows, BLOCK_K=B.x_k, BLOCK_N=B.x_n, DOT_FP32=False), opts_x
    yield "reduce (bf16 acc)", k.reduce, dict(part_ptr=bf, out_ptr=bf, n_tiles="i32", L="i32"), \
        dict(BLOCK=B.reduce, ACC_BF16=True), dict(enable_fp_fusion=False)
    yield "to_bf16", k.to_bf16, dict(src_ptr=f32, dst_ptr=bf, L="i32"), dict(BLOCK=B.reduce), dict(enable_fp_fusion=False)


def compile_one(fn, args: dict, const: dict, opts: dict, aligned: bool):
    signature = {**args, **{c: "constexpr" for c in const}}
    constexprs = {(fn.arg_names.index(c),): v for c, v in const.items()}
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in args} if aligned else {}
    compiled = triton.compile(ASTSource(fn, signature=signature, constexprs=constexprs, attrs=attrs),
                              target=TARGET, options=opts)
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(compiled.asm["cubin"])
    usage = subprocess.run([CUOBJDUMP, "-res-usage", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    fields = dict(tok.split(":") for line in usage.splitlines() if "REG:" in line for tok in line.split()
                  if ":" in tok and tok.split(":")[1].isdigit())
    return {"regs": int(fields.get("REG", -1)), "stack": int(fields.get("STACK", -1)),
            "wgmma": "wgmma" in compiled.asm["ptx"]}


def main() -> int:
    ok = True
    print(f"triton {triton.__version__}, target sm_{TARGET.arch}, blocks {B}")
    for name, fn, args, const, opts in jobs():
        for aligned in (True, False):
            try:
                r = compile_one(fn, args, const, opts, aligned)
                print(f"  {name:24s} {'aligned' if aligned else 'odd':8s} regs {r['regs']:4d}  spill stack "
                      f"{r['stack']:5d} B  wgmma {r['wgmma']}")
            except Exception as exc:
                ok = False
                print(f"  {name:24s} {'aligned' if aligned else 'odd':8s} FAILED {type(exc).__name__}: {exc}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
