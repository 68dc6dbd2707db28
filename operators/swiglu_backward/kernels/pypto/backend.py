"""The ``pypto`` and ``pypto-hardened`` backends: the article's three PyPTO kernels behind
the contract of ``contract/backend.py``.

Target (env ``SWIGLU_PYPTO_TARGET``):

* ``npu``  -- run on an Ascend NPU through torch_npu; fail (never skip) if none is usable;
* ``cpu``  -- run through PyPTO's own interpreter (``operators/swiglu_backward/kernels/pypto/interpreter.py``);
* ``auto`` (default) -- NPU when torch_npu imports and a device is visible, else CPU.

NPU device: ``TILE_FWK_DEVICE_ID`` (default 0); under pytest-xdist worker ``gw<i>`` takes
device ``i mod device_count`` unless ``TILE_FWK_DEVICE_ID`` is set.

On CPU the interpreter's cost per call grows with (loop iterations x tensor size), so
the runner calls each kernel on consecutive row blocks of ``cpu_chunk_rows(kernel)`` rows
(a multiple of that kernel's tile_m). Because db / dw accumulate in place into the
caller's output buffers and every block boundary is a tile boundary, the chunked run
performs exactly the same operations, in the same order, as one call over all M
(tests/pypto checks the bits); each call still exercises the dynamic-M loop and its tail
tile. Cases whose buffers would not fit in memory raise ``BackendUnsupported``.
"""
from __future__ import annotations

import contextlib
import os

import torch

from operators.swiglu_backward.schedule import TiledSchedule
from contract.backend import BackendUnsupported, validate_inputs
from operators.swiglu_backward import OPERATOR
from operators.swiglu_backward.schedule import ARTICLE, HARDENED

TARGET_ENV = "SWIGLU_PYPTO_TARGET"
DEVICE_ENV = "TILE_FWK_DEVICE_ID"
CHUNK_ENV = "SWIGLU_PYPTO_CPU_CHUNK_ROWS"
MAX_M_ENV = "SWIGLU_PYPTO_CPU_MAX_M"

# Rows per interpreter call, per kernel (rounded down to a multiple of the kernel's tile_m,
# at least one tile; SWIGLU_PYPTO_CPU_CHUNK_ROWS overrides all three). Each call costs
# ~1.2 s CPU of recompilation (PyPTO's passes + g++ on the control flow); within a call the
# interpreter's memory grows faster than linearly with the tiles it runs (it keeps every
# tile's intermediates). Measured at M=8192, K=512, N=1024 on 2 shared cores
# (benchmarks/pypto_cpu.py, docs/pypto.md): b one tile per call 0.85 GB peak vs 3.44 GB in
# one call, at a similar wall time; w and x are cheapest with 4096-8192 rows per call.
DEFAULT_CHUNK_ROWS = {"b": 1024, "w": 8192, "x": 4096}
# Above DEFAULT_CPU_MAX_M (a run that lifted the limit) memory decides: at the article's case
# (M=220000, K=512, N=1024, seed 0) the backend alone took 324 s at 4.51 GiB peak with the chunks
# above and 464 s at 3.77 GiB with 2048 rows per call for every kernel; the whole cell (pytest,
# isolated child, goldens, comparison) 8 min 27 s at 3.79 GiB.
LARGE_M_CHUNK_ROWS = 2048
# Beyond this M the CPU interpreter is refused for time, not memory (the chunks bound the
# memory): about 2.5 s per 1000 rows at K=512, N=1024 for the three kernels on 2 cores, so
# the seed case (M=220000) would take ~9 min per backend; it belongs to the NPU.
DEFAULT_CPU_MAX_M = 65536


class PyptoTargetError(RuntimeError):
    """The requested target cannot be used (no NPU although one was asked for, bad env value)."""


# --------------------------------------------------------------------------- target selection


def _npu_count() -> int:
    try:
        import torch_npu  # noqa: F401, PLC0415
    except Exception:  # noqa: BLE001  (absent or broken install: no NPU)
        return 0
    try:
        return int(torch.npu.device_count()) if torch.npu.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


def resolve_target() -> str:
    want = os.environ.get(TARGET_ENV, "auto").strip().lower()
    if want not in ("auto", "npu", "cpu"):
        raise PyptoTargetError(f"{TARGET_ENV}={want!r}: expected 'auto', 'npu' or 'cpu'")
    if want == "cpu":
        return "cpu"
    count = _npu_count()
    if want == "npu" and count == 0:
        raise PyptoTargetError(
            f"{TARGET_ENV}=npu but no NPU is usable: torch_npu does not import or sees no device "
            f"(check CANN's set_env.sh, the driver and `npu-smi info`); unset {TARGET_ENV} to use "
            f"PyPTO's CPU interpreter instead")
    return "npu" if count else "cpu"


def npu_device_index(count: int) -> int:
    """TILE_FWK_DEVICE_ID if set, else pytest-xdist worker gw<i> -> i mod count, else 0."""
    if os.environ.get(DEVICE_ENV):
        try:
            dev = int(os.environ[DEVICE_ENV])
        except ValueError:
            raise PyptoTargetError(f"{DEVICE_ENV}={os.environ[DEVICE_ENV]!r} is not an integer") from None
        if not 0 <= dev < count:
            raise PyptoTargetError(f"{DEVICE_ENV}={dev} but {count} NPU(s) are visible")
        return dev
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        return int(worker[2:]) % count
    return 0


# --------------------------------------------------------------------------- outputs


def _zeros(shape, dtype, device):
    return torch.zeros(shape, dtype=dtype, device=device)


def _alloc(m, k, n, variant, device):
    bf = torch.bfloat16
    out = {"dg": _zeros((m, n), bf, device), "dfc": _zeros((m, n), bf, device),
           "db_g": _zeros((1, n), bf, device), "db_fc": _zeros((1, n), bf, device),
           "dw_g": _zeros((k, n), bf, device), "dw_fc": _zeros((k, n), bf, device),
           "dx": _zeros((m, k), bf, device)}
    acc = {}
    if variant == "hardened":  # FP32 accumulators (kernel workspace), zeroed like the outputs
        acc = {"db_g": _zeros((1, n), torch.float32, device), "db_fc": _zeros((1, n), torch.float32, device),
               "dw_g": _zeros((k, n), torch.float32, device), "dw_fc": _zeros((k, n), torch.float32, device)}
    return out, acc


def _kernel_args(variant, inp, out, acc, rows=slice(None)):
    """Argument lists of the b, w and x kernels, restricted to a block of rows."""
    r = rows
    b = [inp["dy"][r], inp["g"][r], inp["fc"][r], out["dg"][r], out["dfc"][r], out["db_g"], out["db_fc"]]
    w = [inp["x"][r], out["dg"][r], out["dfc"][r], out["dw_g"], out["dw_fc"]]
    if variant == "hardened":
        b += [acc["db_g"], acc["db_fc"]]
        w += [acc["dw_g"], acc["dw_fc"]]
    x = [out["dg"][r], out["dfc"][r], inp["w_g"], inp["w_fc"], out["dx"][r]]
    return {"b": b, "w": w, "x": x}


# --------------------------------------------------------------------------- runners


@contextlib.contextmanager
def _npu_device(index: int):
    prev = torch.npu.current_device()
    torch.npu.set_device(index)
    try:
        yield torch.device("npu", index)
    finally:
        torch.npu.set_device(prev)


def _run_npu(schedule: TiledSchedule, inputs: dict) -> dict:
    from operators.swiglu_backward.kernels.pypto import interpreter  # noqa: PLC0415  (version check, quiet import only)

    pypto = interpreter.import_pypto()
    from operators.swiglu_backward.kernels.pypto import kernels as pk  # noqa: PLC0415

    count = _npu_count()
    if count == 0:
        raise PyptoTargetError("the NPU target was selected but no NPU is usable")
    m, k, n = validate_inputs(OPERATOR, inputs, allow_nonfinite=True)
    with _npu_device(npu_device_index(count)) as device:
        variant, b, w, x = pk.build(k, n, schedule, pypto.RunMode.NPU.value)
        inp = {name: t.to(device).contiguous() for name, t in inputs.items()}
        out, acc = _alloc(m, k, n, variant, device)
        args = _kernel_args(variant, inp, out, acc)
        for kernel, name in ((b, "b"), (w, "w"), (x, "x")):
            kernel(*args[name])
        torch.npu.synchronize()
    src = next(iter(inputs.values())).device
    return {name: t.to(src) for name, t in out.items()}


def cpu_chunk_rows(kernel: str, tile_m: int, m: int = 0) -> int:
    default = DEFAULT_CHUNK_ROWS[kernel] if m <= DEFAULT_CPU_MAX_M else min(DEFAULT_CHUNK_ROWS[kernel],
                                                                            LARGE_M_CHUNK_ROWS)
    rows = int(os.environ.get(CHUNK_ENV) or default)
    return max(tile_m, rows // tile_m * tile_m)


def _cpu_max_m() -> int:
    return int(os.environ.get(MAX_M_ENV, DEFAULT_CPU_MAX_M))


def _check_cpu_capacity(m: int, k: int, n: int, variant: str) -> None:
    max_m = _cpu_max_m()
    if m > max_m:
        est_s = 2.5e-3 * m * (k * n) / (512 * 1024)
        raise BackendUnsupported(
            f"M={m} is above the CPU interpreter limit M<={max_m} ({MAX_M_ENV}): PyPTO's interpreter "
            f"runs ~2.5 s per 1000 rows at K=512, N=1024 on 2 cores (about {est_s / 60:.0f} min for this "
            f"case, K={k}, N={n}); run it on an NPU host, or lift the limit for this run with "
            f"{MAX_M_ENV}={m}")
    # Buffers the backend holds: a CPU copy of the inputs, the outputs, the FP32 accumulators,
    # plus one call's interpreter working set (measured <= 1.4 GB with the default chunks at
    # K=512, N=1024; scaled with the row width and the chunk).
    need = 2 * 2 * (2 * m * n + m * k + 2 * k * n) + (8 * k * n if variant == "hardened" else 0)
    rows = min(m, max(cpu_chunk_rows(kern, 2048, m) for kern in ("b", "w", "x")))
    need += int(1.4e9 * (max(k, n) / 1024) * (rows / 8192))
    avail = _mem_available()
    if avail is not None and need > 0.8 * avail:
        raise BackendUnsupported(
            f"M={m}, K={k}, N={n} needs ~{need / 2**30:.1f} GiB for the PyPTO interpreter "
            f"but {avail / 2**30:.1f} GiB are available")


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _run_cpu(schedule: TiledSchedule, inputs: dict) -> dict:
    m, k, n = validate_inputs(OPERATOR, inputs, allow_nonfinite=True)
    from operators.swiglu_backward.kernels.pypto import interpreter  # noqa: PLC0415

    pypto = interpreter.import_pypto()  # checks the version; keeps PyPTO's logs out of ~/ascend

    from operators.swiglu_backward.kernels.pypto import kernels as pk  # noqa: PLC0415

    variant, b, w, x = pk.build(k, n, schedule, pypto.RunMode.SIM.value, widen_matmul_inputs=False)
    _check_cpu_capacity(m, k, n, variant)
    inp = {name: t.detach().to("cpu").contiguous() for name, t in inputs.items()}
    out, acc = _alloc(m, k, n, variant, "cpu")
    tiles = {"b": schedule.tile_m_b, "w": schedule.tile_m_w, "x": schedule.tile_m_x}
    for kernel, name in ((b, "b"), (w, "w"), (x, "x")):
        step = cpu_chunk_rows(name, tiles[name], m)
        for r0 in range(0, m, step):
            args = _kernel_args(variant, inp, out, acc, slice(r0, min(m, r0 + step)))
            interpreter.run(kernel, *args[name])
    src = inputs["x"].device
    return {name: t.to(src) for name, t in out.items()}


def run(schedule: TiledSchedule, inputs: dict) -> dict:
    target = resolve_target()
    if target == "npu":
        return _run_npu(schedule, inputs)
    return _run_cpu(schedule, inputs)


def pypto_article(*, x, w_g, w_fc, dy, g, fc):
    """The article's kernels: exp(g)/(1+exp(g)) sigmoid, BF16 cross-tile accumulation of db, dw."""
    return run(ARTICLE, {"x": x, "w_g": w_g, "w_fc": w_fc, "dy": dy, "g": g, "fc": fc})


def pypto_hardened(*, x, w_g, w_fc, dy, g, fc):
    """Stable sigmoid, FP32 accumulators for db and dw rounded to BF16 once after the last tile."""
    return run(HARDENED, {"x": x, "w_g": w_g, "w_fc": w_fc, "dy": dy, "g": g, "fc": fc})


pypto_article.schedule = ARTICLE      # the path each backend claims: its tiled golden replays it
pypto_hardened.schedule = HARDENED
