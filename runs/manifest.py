"""The run manifest: what produced a set of verdicts, so a reader can reproduce or distrust them.

Versions (framework, git commit, Python, torch, numpy, pypto, triton, torch_npu),
the CPU (model, the ISA flags that change BF16 numerics, torch's and oneDNN's
ISA), the accelerator (CUDA, cuBLAS, compute capability; or CANN, driver,
torch_npu and SoC on an NPU host), the precision flags a backend's numbers
depend on (reduced-precision reductions, TF32/HF32, flush-denormal), and the
measured platform facts (``runs.platform_facts``) that expectations are
conditioned on. Every field is plain JSON; a field that cannot be read is
``None``, never an exception: a manifest never stops a run.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

from goldens import heap
from runs import idle_threads, platform_facts

REPO_ROOT = Path(__file__).resolve().parent.parent

# CPU flags that change which BF16/FP16 kernels oneDNN can pick (bf16 dot products flush subnormals)
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16",
             "avx_vnni", "asimd", "bf16", "sve")
# environment variables that change numerics or the kernels picked
NUMERIC_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ONEDNN_DEFAULT_FPMATH_MODE", "OMP_NUM_THREADS",
               "MKL_NUM_THREADS", "OPENBLAS_CORETYPE", "TRITON_INTERPRET", "CUBLAS_WORKSPACE_CONFIG",
               "NVIDIA_TF32_OVERRIDE", "ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None


def source_digest(modules) -> str | None:
    """SHA-256 over the files of ``modules`` (a backend's: the module its address names and the
    one defining its callable, which differ for a re-exported kernel): a resumed run, or a shard
    merged with others, ran the same kernel code as the run it joins. None where no module has a
    file (a builtin, a function made at run time)."""
    def digest():
        h, found = hashlib.sha256(), False
        for name in sorted(set(modules)):
            path = getattr(sys.modules.get(name), "__file__", None)
            if path:
                h.update(name.encode() + b"\0" + Path(path).read_bytes())
                found = True
        return h.hexdigest() if found else None
    return _safe(digest)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# the packages whose code makes a verdict's or a study's numbers (the backends' own files are
# digested per backend, ``source_digest``)
NUMBERS_PACKAGES = ("contract", "goldens", "runs", "accuracy", "kernels", "operators", "cases")
# the files that decide a number or a verdict: the code, and the known failures' expectation files
CODE_FILES = ("*.py", "*.toml")


@functools.cache
def code_digest() -> str:
    """SHA-256 over the framework's Python and expectation files (``NUMBERS_PACKAGES``), by path: a drift study
    and a run with the same digest ran the same code, committed or not (the commit alone misses
    an edited tree)."""
    h = hashlib.sha256()
    for package in NUMBERS_PACKAGES:
        for path in sorted(p for pattern in CODE_FILES for p in (REPO_ROOT / package).rglob(pattern)):
            h.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def code_version() -> dict:
    """The framework's commit, whether its tree was edited, and its code's digest."""
    return {"commit": _git("rev-parse", "HEAD"),
            "dirty": (lambda s: None if s is None else bool(s))(_git("status", "--porcelain", "--untracked-files=no")),
            "digest": _safe(code_digest)}


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cpuinfo() -> dict:
    text = _safe(lambda: Path("/proc/cpuinfo").read_text()) or ""
    model, flags = None, set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "Hardware") and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return {"model": model or platform.processor() or None, "machine": platform.machine(),
            "cores": os.cpu_count(), "isa_flags": {f: f in flags for f in ISA_FLAGS} if flags else None}


def _onednn_version() -> str | None:
    for line in torch.__config__.show().splitlines():
        if "MKL-DNN" in line or "oneDNN" in line:
            return line.strip(" -")
    return None


def cpu() -> dict:
    return {**_cpuinfo(),
            "torch_cpu_capability": _safe(torch.backends.cpu.get_cpu_capability),
            "onednn": _safe(_onednn_version),
            "torch_threads": torch.get_num_threads()}


def cuda() -> dict | None:
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"cuda": torch.version.cuda, "device": props.name,
            "compute_capability": f"{props.major}.{props.minor}", "count": torch.cuda.device_count(),
            "cublas": _version("nvidia-cublas-cu12") or _version("nvidia-cublas") or f"bundled with CUDA {torch.version.cuda}",
            "cudnn": _safe(torch.backends.cudnn.version),
            "driver": _safe(lambda: subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0])}


def _first_line(*paths: str) -> str | None:
    for p in paths:
        text = _safe(lambda p=p: Path(p).read_text())
        if text:
            return " ".join(text.split())[:200]
    return None


def npu() -> dict | None:
    if _version("torch_npu") is None:
        return None
    home = os.environ.get("ASCEND_TOOLKIT_HOME", "/usr/local/Ascend/ascend-toolkit/latest")
    info = {"torch_npu": _version("torch_npu"),
            "cann": _first_line(f"{home}/version.cfg", f"{home}/aarch64-linux/ascend_toolkit_install.info",
                                f"{home}/x86_64-linux/ascend_toolkit_install.info"),
            "driver": _first_line("/usr/local/Ascend/driver/version.info")}
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
        info["available"] = bool(torch.npu.is_available())
        info["soc"] = torch.npu.get_device_name(0) if info["available"] else None
        info["count"] = torch.npu.device_count() if info["available"] else 0
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def precision_flags() -> dict:
    flags = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cuda_allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "cuda_allow_fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "mkldnn_enabled": torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "default_dtype": str(torch.get_default_dtype()),
        "flush_denormal": not platform_facts.fp32_keeps_subnormals("cpu"),
    }
    try:
        import torch_npu  # noqa: F401
        flags["npu_matmul_allow_hf32"] = bool(torch.npu.matmul.allow_hf32)
        flags["npu_conv_allow_hf32"] = bool(torch.npu.conv.allow_hf32)
    except Exception:
        pass
    return flags


def build(device: str = "cpu", facts: dict | None = None) -> dict:
    """The manifest of a run on ``device``; ``facts`` when already measured (else measured here)."""
    return {
        "framework": {"name": "swiglu-accuracy", "version": _version("swiglu-accuracy"), **code_version()},
        "host": platform.node(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {name: _version(dist) for name, dist in
                     (("torch", "torch"), ("numpy", "numpy"), ("pypto", "pypto"), ("triton", "triton"),
                      ("torch_npu", "torch_npu"), ("pytest", "pytest"), ("pytest_xdist", "pytest-xdist"))},
        "torch_build": str(torch.__version__),
        "device": device,
        "cpu": cpu(),
        "cuda": _safe(cuda),
        "npu": _safe(npu),
        "precision_flags": precision_flags(),
        "env": {k: os.environ[k] for k in NUMERIC_ENV if k in os.environ},
        "allocator": heap.state(),
        "omp_wait_policy": idle_threads.state(),
        "facts": facts if facts is not None else platform_facts.measure(device),
    }
