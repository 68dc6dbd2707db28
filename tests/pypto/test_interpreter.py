"""The private-API patch: version pinning, the calculator cache and its lock, cleanup."""
from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest
import torch

from operators.swiglu_backward.kernels.pypto import interpreter


# --------------------------------------------------------------------------- version check


@pytest.mark.parametrize("version", ["0.1.9", "0.2.1", "0.3.0", "1.0.0"])
def test_other_pypto_versions_are_refused(version):
    with pytest.raises(interpreter.PyptoVersionError, match=f"pypto {version} is installed.*0.2.0"):
        interpreter.check_version(version)


def test_supported_version_is_accepted():
    assert interpreter.check_version("0.2.0") == "0.2.0"


def test_missing_pypto_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(interpreter, "installed_version", lambda: None)
    with pytest.raises(interpreter.PyptoVersionError, match="not installed"):
        interpreter.check_version()


def test_running_with_another_version_fails_loudly(monkeypatch):
    """The entry points check the version before touching any private API."""
    monkeypatch.setattr(interpreter, "installed_version", lambda: "0.2.1")
    monkeypatch.setattr(interpreter, "_PYPTO", None)
    with pytest.raises(interpreter.PyptoVersionError):
        interpreter.import_pypto()
    with pytest.raises(interpreter.PyptoVersionError):
        interpreter.run(object(), torch.zeros(1))


def test_backend_with_another_version_fails_loudly(monkeypatch):
    from operators.swiglu_backward.kernels.pypto.backend import pypto_article

    monkeypatch.setenv("SWIGLU_PYPTO_TARGET", "cpu")
    monkeypatch.setattr(interpreter, "installed_version", lambda: "0.3.0")
    bf = torch.bfloat16
    inputs = dict(x=torch.zeros(2, 3, dtype=bf), w_g=torch.zeros(3, 4, dtype=bf), w_fc=torch.zeros(3, 4, dtype=bf),
                  dy=torch.zeros(2, 4, dtype=bf), g=torch.zeros(2, 4, dtype=bf), fc=torch.zeros(2, 4, dtype=bf))
    with pytest.raises(interpreter.PyptoVersionError, match="0.3.0"):
        pypto_article(**inputs)


# --------------------------------------------------------------------------- cache + lock


def _fake_builder(log: Path, delay: float = 0.0):
    def build(tmp: Path) -> Path:
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        time.sleep(delay)
        out = tmp / "lib.so"
        out.write_bytes(b"built")
        return out
    return build


def test_second_build_is_a_cache_hit(tmp_path):
    target = tmp_path / "cache" / "key" / "lib.so"
    log = tmp_path / "builds.log"
    assert interpreter.ensure_cached(target, _fake_builder(log)) is True
    assert interpreter.ensure_cached(target, _fake_builder(log)) is False
    assert target.read_bytes() == b"built"
    assert log.read_text().count("\n") == 1
    assert not list(target.parent.glob("build-*")), "the temporary build folder was left behind"


def _worker(target: str, log: str, barrier) -> None:
    barrier.wait()
    interpreter.ensure_cached(Path(target), _fake_builder(Path(log), delay=0.5))


def test_concurrent_workers_build_once(tmp_path):
    """Four processes starting at once (as pytest-xdist workers do): one builds, three wait."""
    target, log = tmp_path / "c" / "lib.so", tmp_path / "builds.log"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_worker, args=(str(target), str(log), barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert log.read_text().count("\n") == 1
    assert target.read_bytes() == b"built"


def test_cache_key_names_pypto_and_torch():
    key = interpreter.calculator_key()
    assert "torch" + torch.__version__.split("+")[0] in key and "pypto" in key
    assert str(interpreter.calculator_path()).startswith(str(interpreter.cache_root()))


def test_cache_root_is_outside_the_repo(monkeypatch, tmp_path):
    repo = Path(__file__).resolve().parents[2]
    assert repo not in interpreter.cache_root().resolve().parents
    monkeypatch.setenv("SWIGLU_ACCURACY_CACHE", str(tmp_path))
    assert interpreter.cache_root() == tmp_path
    monkeypatch.delenv("SWIGLU_ACCURACY_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert interpreter.cache_root() == tmp_path / "xdg" / "swiglu-accuracy"


def test_missing_cmake_is_a_clear_error(pypto_cpu, monkeypatch, tmp_path):
    monkeypatch.setattr(interpreter.shutil, "which", lambda name, *a, **k: None)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(interpreter.InterpreterBuildError, match="cmake and a C\\+\\+17 compiler"):
        interpreter._build_calculator(tmp_path)


def test_real_calculator_second_load_is_a_cache_hit(pypto_cpu):
    path, built = pypto_cpu.load_calculator()
    assert path.exists() and built is False
    path2, built2 = pypto_cpu.load_calculator()
    assert (path2, built2) == (path, False)


# --------------------------------------------------------------------------- global state, cleanup


def test_environ_and_cwd_are_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("SWIGLU_T_A", "a")
    monkeypatch.delenv("SWIGLU_T_B", raising=False)
    cwd = os.getcwd()
    with pytest.raises(RuntimeError):
        with interpreter.environ(SWIGLU_T_A=None, SWIGLU_T_B="b"), interpreter.working_directory(tmp_path):
            assert os.environ.get("SWIGLU_T_A") is None and os.environ["SWIGLU_T_B"] == "b"
            assert os.getcwd() == str(tmp_path)
            raise RuntimeError("boom")
    assert os.environ["SWIGLU_T_A"] == "a" and "SWIGLU_T_B" not in os.environ
    assert os.getcwd() == cwd


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def test_a_run_leaves_no_files_behind(pypto_cpu, tmp_path, monkeypatch):
    """No output/ folder or log file in the cwd, the repo or ~/ascend; env and cwd unchanged."""
    from operators.swiglu_backward.kernels.pypto.backend import pypto_article

    repo = Path(__file__).resolve().parents[2]
    home_logs = Path.home() / "ascend"
    before_home, before_repo = _snapshot(home_logs), {p.name for p in repo.iterdir()}
    monkeypatch.chdir(tmp_path)
    env_before = dict(os.environ)
    gen = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=gen).to(torch.bfloat16)  # noqa: E731
    out = pypto_article(x=r(5, 8), w_g=r(8, 16), w_fc=r(8, 16), dy=r(5, 16), g=r(5, 16), fc=r(5, 16))
    assert out["dg"].abs().sum() > 0
    assert list(tmp_path.iterdir()) == [], "PyPTO wrote into the working directory"
    assert os.getcwd() == str(tmp_path) and dict(os.environ) == env_before
    assert {p.name for p in repo.iterdir()} - before_repo == set()
    assert not (repo / "output").exists()
    assert _snapshot(home_logs) == before_home, "PyPTO wrote log files under ~/ascend"
    scratch = interpreter.scratch_dir()
    assert [p.name for p in scratch.iterdir() if p.name.startswith("run-")] == [], "per-run folder not removed"
