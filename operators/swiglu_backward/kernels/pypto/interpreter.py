"""Run ``@pypto.frontend.jit`` kernels on CPU through PyPTO's own pass-verify interpreter.

PyPTO 0.2.0 has no public CPU execution path: ``RunMode.SIM`` only runs a timing
model and never writes outputs (see ``shared/notes/pypto-on-cpu.md``). What does
execute the tensor graph is the interpreter behind ``enable_pass_verify`` (the
"calculator", a torch-based C++ library that PyPTO compiles with CMake). This
module drives it, and is the only place in the project that touches PyPTO's
private API:

* ``JitCallableWrapper._parse_call_args``, ``_get_or_create_kmodule``,
  ``_convert_tensors_with_metadata``, ``_set_config_option`` and ``compile``;
* the per-instance hook ``_setup_verify_data`` (shadowed on the instance, only
  for the duration of one call) which registers the caller's tensors as the
  interpreter's inputs;
* ``BuildOnlineManager.calculator_loaded`` (we build and cache the calculator
  ourselves instead of PyPTO's rebuild-in-every-process).

Every entry point calls :func:`check_version` first: any PyPTO other than
``SUPPORTED_VERSION`` fails loudly, never silently.

Global state (environment variables, the working directory) is only changed
inside context managers that restore it. PyPTO's ``output/`` folders and its
``~/ascend/log`` plog files go to a private temporary directory that is removed
after each call (and at interpreter exit).
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

SUPPORTED_VERSION = "0.2.0"
CACHE_ENV = "SWIGLU_ACCURACY_CACHE"  # overrides the cache root (default: $XDG_CACHE_HOME or ~/.cache)


class PyptoVersionError(RuntimeError):
    """The installed PyPTO is not the one whose private API this module drives."""


class InterpreterBuildError(RuntimeError):
    """The calculator library could not be built (cmake or a C++ compiler missing, build failed)."""


# --------------------------------------------------------------------------- version


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("pypto")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_version(version: str | None = None) -> str:
    """Return the PyPTO version, or raise PyptoVersionError if it is not SUPPORTED_VERSION."""
    version = installed_version() if version is None else version
    if version is None:
        raise PyptoVersionError(
            f"pypto is not installed; the CPU interpreter path needs pypto=={SUPPORTED_VERSION} "
            f"(pip install 'swiglu-accuracy[pypto]' or pip install pypto=={SUPPORTED_VERSION})")
    if version != SUPPORTED_VERSION:
        raise PyptoVersionError(
            f"pypto {version} is installed, but operators/swiglu_backward/kernels/pypto/interpreter.py drives private API of "
            f"pypto {SUPPORTED_VERSION} only (JitCallableWrapper internals, the pass-verify tensor dump). "
            f"Install pypto=={SUPPORTED_VERSION}, or port and re-test this module for {version}.")
    return version


# --------------------------------------------------------------------------- global state


@contextlib.contextmanager
def environ(**values: str | None):
    """Set (or, with None, unset) environment variables; restore the previous values on exit."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def working_directory(path: str | os.PathLike):
    saved = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(saved)


_SCRATCH: Path | None = None


def scratch_dir() -> Path:
    """A per-process temporary directory for PyPTO's logs and output folders, removed at exit."""
    global _SCRATCH
    if _SCRATCH is None or not _SCRATCH.exists():
        _SCRATCH = Path(tempfile.mkdtemp(prefix=f"swiglu-pypto-{os.getpid()}-"))
        atexit.register(shutil.rmtree, _SCRATCH, True)
    return _SCRATCH


def quiet_env(scratch: Path, run_dir: Path | None = None) -> dict[str, str]:
    """Environment that sends PyPTO's plog files into ``scratch`` and its ``output/``
    folders (generated sources, objects, dumps) into ``run_dir`` (default: scratch)."""
    run_dir = scratch if run_dir is None else run_dir
    return {
        "ASCEND_PROCESS_LOG_PATH": str(scratch / "plog"),  # default ~/ascend/log
        "ASCEND_WORK_PATH": str(run_dir / "work"),
        "TILE_FWK_OUTPUT_DIR": str(run_dir / "output"),    # default ./output
        "ASCEND_GLOBAL_LOG_LEVEL": os.environ.get("ASCEND_GLOBAL_LOG_LEVEL", "3"),  # errors only
    }


_PYPTO = None


def import_pypto():
    """Import pypto with its import-time log directory redirected (it creates ~/ascend/log otherwise)."""
    global _PYPTO
    if _PYPTO is None:
        check_version()
        scratch = scratch_dir()
        with environ(**quiet_env(scratch)), working_directory(scratch):
            import pypto  # noqa: PLC0415
        _PYPTO = pypto
    return _PYPTO


# --------------------------------------------------------------------------- calculator cache


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "swiglu-accuracy"


def calculator_key() -> str:
    """Cache key: pypto version, torch version and C++ ABI, python tag."""
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    raw = f"pypto{installed_version()}-torch{torch.__version__}-abi{abi}-py{sys.version_info[0]}{sys.version_info[1]}"
    return re.sub(r"[^A-Za-z0-9._+-]", "_", raw)


def calculator_path(root: Path | None = None) -> Path:
    return (root or cache_root()) / "pypto-calculator" / calculator_key() / "libtile_fwk_calculator.so"


@contextlib.contextmanager
def file_lock(path: Path, timeout_s: float = 600.0):
    """An exclusive flock on ``path`` (created if needed): several pytest-xdist workers
    starting at once build the library once, the others wait and then find it cached."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"waited {timeout_s:.0f} s for the lock {path}") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def ensure_cached(target: Path, builder) -> bool:
    """Make ``target`` exist, calling ``builder(tmp_dir) -> Path of the built file`` at most once
    across processes. Returns True if this call built it, False on a cache hit."""
    if target.exists():
        return False
    with file_lock(target.with_name(target.name + ".lock")):
        if target.exists():  # another worker built it while we waited
            return False
        with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as tmp:
            built = Path(builder(Path(tmp)))
            staged = target.with_name(target.name + f".tmp{os.getpid()}")
            shutil.copy2(built, staged)
            os.replace(staged, target)  # atomic: readers never see a half-written file
        return True


def _build_calculator(tmp: Path) -> Path:
    """Configure, build and install PyPTO's calculator against the installed torch (~25 s)."""
    import pypto  # noqa: PLC0415  (already imported through import_pypto)

    cmake = shutil.which("cmake")
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    missing = [name for name, found in (("cmake", cmake), ("a C++17 compiler (g++ >= 9.4 or clang++ >= 15)", cxx))
               if not found]
    if missing:
        raise InterpreterBuildError(
            f"building PyPTO's CPU interpreter needs {' and '.join(missing)} on PATH "
            f"(e.g. apt-get install cmake g++); without them the pypto backends cannot run on CPU")
    src = Path(pypto.__file__).parent / "lib" / "calculator"
    if not (src / "CMakeLists.txt").exists():
        raise InterpreterBuildError(f"PyPTO's calculator sources are missing: {src}/CMakeLists.txt")
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    build, install = tmp / "build", tmp / "install"
    jobs = str(max(1, os.cpu_count() or 1))
    steps = [
        [cmake, "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
         f"-DCMAKE_INSTALL_PREFIX={install}", f"-DCMAKE_CXX_COMPILER={cxx}",
         f"-DPY3_MOD_TORCH_VERSION={torch.__version__.split('+')[0]}",
         f"-DPY3_MOD_TORCH_ROOT_PATH={torch_dir}", f"-DPY3_MOD_TORCH_C_GLIBCXX_USE_CXX11_ABI={abi}"],
        [cmake, "--build", str(build), "-j", jobs],
        [cmake, "--install", str(build), "--prefix", str(install)],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise InterpreterBuildError(f"building PyPTO's calculator failed at `{' '.join(cmd[:3])} ...` "
                                        f"(exit {proc.returncode}):\n{tail}")
    lib = install / "lib" / "libtile_fwk_calculator.so"
    if not lib.exists():
        raise InterpreterBuildError(f"the calculator build finished but {lib} does not exist")
    return lib


_LOADED: Path | None = None


def load_calculator(root: Path | None = None) -> tuple[Path, bool]:
    """Build (once, cached across processes) and load the calculator. Returns (path, built_now)."""
    global _LOADED
    import_pypto()
    target = calculator_path(root)
    built = ensure_cached(target, _build_calculator)
    if _LOADED is None:
        from pypto._utils import BuildOnlineManager  # noqa: PLC0415  (private API, pinned version)

        with environ(**quiet_env(scratch_dir())):
            ctypes.CDLL(str(target), mode=ctypes.RTLD_GLOBAL)
        BuildOnlineManager().calculator_loaded = True  # stop PyPTO from rebuilding it in a temp dir
        _LOADED = target
    return target, built


# --------------------------------------------------------------------------- running a kernel

_HUGE_TOL = [3.0e38, 3.0e38]  # the interpreter compares against "goldens"; we only want its outputs


def _dump_index(path: str) -> int:
    # tensor_graph~<k>~<timestamp>.data: raw bytes of the kernel's k-th tensor argument
    return int(Path(path).name.split("~")[1])


def run(kernel, *tensors: torch.Tensor) -> None:
    """Execute a ``@pypto.frontend.jit`` kernel on CPU tensors through the interpreter.

    Inputs are read and outputs written in place, as on an NPU. The interpreter runs
    the kernel's tensor graph (before PyPTO's tiling passes): every op is a torch op
    in its declared dtype; see docs/pypto.md for what this does and does not model.
    """
    pypto = import_pypto()
    load_calculator()
    from pypto import pypto_impl  # noqa: PLC0415
    from pypto.frontend.parser.entry import _pto_to_tensor_data  # noqa: PLC0415

    for i, t in enumerate(tensors):
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"interpreter argument {i} must be a contiguous CPU tensor, got {t.device}, "
                             f"contiguous={t.is_contiguous()}")
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=scratch_dir()))
    dump_dir = scratch / "dump"

    def setup_verify_data(pto_tensors):
        # Register the caller's own buffers (no copies) as the interpreter's inputs and as
        # the goldens it compares against (with tolerances that always pass).
        datas = _pto_to_tensor_data(pto_tensors)
        pypto_impl.SetVerifyData(datas, [], datas)

    try:
        with environ(**quiet_env(scratch_dir(), scratch)), working_directory(scratch):
            in_tensors, non_tensor_values, defs = kernel._parse_call_args(tensors, {})
            kernel._get_or_create_kmodule(non_tensor_values)
            pto_tensors = kernel._convert_tensors_with_metadata(in_tensors, defs)
            kernel._setup_verify_data = setup_verify_data  # instance attribute, removed below
            try:
                with pypto.options("jit_scope"):
                    kernel._set_config_option()
                    pypto.set_verify_options(
                        enable_pass_verify=True, pass_verify_save_tensor=False,  # True dumps every op
                        pass_verify_save_tensor_dir=str(dump_dir),
                        pass_verify_pass_filter=["no_verify"],
                        pass_verify_error_tol=_HUGE_TOL)
                    pypto_impl.DeviceInit()
                    kernel.compile(pto_tensors)
            finally:
                del kernel._setup_verify_data
        dumps = sorted(glob.glob(str(dump_dir / "**" / "tensor_graph" / "tensor_graph~*~*.data"), recursive=True),
                       key=lambda p: int(Path(p).stem.rsplit("~", 1)[1]))
        by_index: dict[int, str] = {}
        for path in dumps:  # sorted by timestamp: the latest dump of an argument wins
            if "~golden~" not in Path(path).name:  # the goldens are our own inputs, echoed back
                by_index[_dump_index(path)] = path
        if not by_index:
            raise RuntimeError(f"PyPTO's interpreter produced no tensor dump under {dump_dir}; "
                               f"the pass-verify path of pypto {SUPPORTED_VERSION} did not run")
        for k, path in by_index.items():
            t = tensors[k]
            raw = Path(path).read_bytes()
            if len(raw) != t.numel() * t.element_size():
                raise RuntimeError(f"interpreter dump {Path(path).name} has {len(raw)} bytes, argument {k} "
                                   f"{tuple(t.shape)} {t.dtype} needs {t.numel() * t.element_size()}")
            # every argument is dumped; inputs come back bit-identical, outputs with the results
            t.view(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
