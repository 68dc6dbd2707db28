"""Run folders: no run destroys another's data, nothing planned goes missing silently,
a killed writer or a corrupt shard costs only its own cell, bad options stop before any case."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runs import results as R

ROOT = Path(__file__).resolve().parents[2]
SMALL = "M1-K96-N200-saturating-s0 or M2-K96-N200-unit-s0"


def _pytest(*args, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=env, **kw)


def test_temp_and_corrupt_shards_are_skipped_and_named(tmp_path):
    run = R.run_dir(tmp_path, "r1")
    R.write_cell(run / "shards", "gw0", "A--b", [{"case": "A", "backend": "b", "status": "pass"}])
    (run / "shards" / "gw0" / ".tmp-abc.json").write_text('{"records": [{"case": "half')
    (run / "shards" / "gw1").mkdir(parents=True)
    (run / "shards" / "gw1" / "B--b.json").write_text("{not json")
    merged = R.merge(run, planned=[("A", "b"), ("B", "b")])
    assert [r["case"] for r in merged["records"]] == ["A"]
    assert merged["missing"] == [{"case": "B", "backend": "b"}]
    assert len(merged["unreadable_shards"]) == 1 and "B--b.json" in merged["unreadable_shards"][0]


def test_cell_file_names_never_collide():
    assert R._safe("a:_b") != R._safe("a_:b")


def test_readers_resolve_latest_run_folder_and_file(tmp_path):
    for run, case in (("r1", "A"), ("r2", "B")):
        R.write_cell(R.run_dir(tmp_path, run) / "shards", "main", f"{case}--b", [{"case": case, "backend": "b"}])
        R.merge(R.run_dir(tmp_path, run), planned=[(case, "b")])
    R.point_latest(tmp_path, "r1")
    assert [r["case"] for r in R.load_records(tmp_path)] == ["A"]
    assert [r["case"] for r in R.load_records(R.run_dir(tmp_path, "r2"))] == ["B"]
    assert [r["case"] for r in R.load_records(R.run_dir(tmp_path, "r2") / "results.json")] == ["B"]
    with pytest.raises(R.ResultsNotFound, match="no finished run"):
        R.load_records(tmp_path / "runs")
    (tmp_path / "bad.json").write_text("")
    with pytest.raises(R.ResultsNotFound, match="not valid JSON"):
        R.load_records(tmp_path / "bad.json")


def test_pruning_keeps_unfinished_runs_and_latest(tmp_path):
    for i in range(5):
        folder = R.run_dir(tmp_path, f"r{i}")
        R.write_cell(folder / "shards", "main", "A--b", [{"case": "A", "backend": "b"}])
        if i != 1:            # r1 is still being written: no results.json yet
            R.merge(folder)
            os.utime(folder / "results.json", (i, i))
    R.point_latest(tmp_path, "r0")
    doomed = R.prune_finished(tmp_path, keep=2)
    assert sorted(p.name for p in doomed) == ["r2"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["r0", "r1", "r3", "r4"]


def test_two_concurrent_runs_keep_their_own_records(tmp_path):
    """Two pytest sessions on one --results-dir at once: each run folder holds exactly its own cells."""
    results = tmp_path / "results"
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "cases/", "--backend",
                               "torch-eager", "-k", case, "--results-dir", str(results)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for case in ("M1-K96-N200-saturating-s0", "M2-K96-N200-unit-s0")]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    runs = {}
    for folder in (results / "runs").iterdir():
        data = json.loads((folder / "results.json").read_text())
        runs[folder.name] = {r["case"] for r in data["records"]}
        assert data["missing"] == []
    assert sorted(map(sorted, runs.values())) == [["M1-K96-N200-saturating-s0"], ["M2-K96-N200-unit-s0"]]
    assert (results / "latest").read_text().strip() in runs


HOSTILE = """
import ctypes, os, time
from operators.swiglu_backward.kernels.torch_autograd import torch_eager
def kill(**inputs):
    if inputs["x"].shape[0] == 2:
        os._exit(7)
    return torch_eager(**inputs)
def segfault(**inputs):
    if inputs["x"].shape[0] == 2:
        ctypes.string_at(0)
    return torch_eager(**inputs)
def hang(**inputs):
    if inputs["x"].shape[0] == 2:
        time.sleep(600)
    return torch_eager(**inputs)
for f in (kill, segfault, hang):
    f.schedule = torch_eager.schedule
"""


def _hostile_env(tmp_path):
    (tmp_path / "hostile_kernels.py").write_text(HOSTILE)
    return {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _statuses(results):
    return {(r["case"], r["backend"]): r["status"] for r in R.load_records(results)
            if r.get("gated", True) and r["status"] != "info" and not r["backend"].startswith("golden")
            and r.get("output") in ("dx", "*")}


@pytest.mark.parametrize("name, death", [("kill", "exited with code 7"), ("segfault", "signal SIGSEGV"),
                                         ("hang", "timed out: no result after 20 s")])
def test_a_backend_that_kills_or_hangs_its_process_costs_only_its_own_cell(tmp_path, name, death):
    """Under -n 2, at M=2: the cell is recorded crashed/timed_out with the exit code, signal or
    timeout; torch-eager at the same case and the same backend at the next case get their verdicts."""
    backend = f"hostile_kernels:{name}"
    proc = _pytest("-n", "2", "cases/", "--backend", backend, "--backend", "torch-eager", "-k", SMALL,
                   "--cell-timeout", "20", "--results-dir", str(tmp_path / "results"), env=_hostile_env(tmp_path))
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert death in proc.stdout, proc.stdout[-3000:]
    assert (f"Rerun this cell alone: pytest cases/ -p no:xdist --backend {backend} "
            f"-k M2-K96-N200-unit-s0-{backend}") in proc.stdout, proc.stdout[-3000:]
    statuses = _statuses(tmp_path / "results")
    assert statuses[("M2-K96-N200-unit-s0", backend)] == ("timed_out" if name == "hang" else "crashed")
    assert statuses[("M2-K96-N200-unit-s0", "torch-eager")] == "pass"
    assert statuses[("M1-K96-N200-saturating-s0", backend)] == "pass"
    assert R.load_results(tmp_path / "results")["missing"] == []


def test_without_isolation_a_killed_worker_leaves_its_cells_listed_as_missing(tmp_path):
    """--no-isolation: the backend's os._exit takes the xdist worker down; the run then says which
    planned cells have no record, in the terminal, in results.json and with a non-zero exit status."""
    # --benchmark none: only the killing backend's cells. With torch-eager's cells beside them on the
    # dying workers, pytest-xdist 3.8's loadscope scheduler was seen to fail on a replacement worker
    # (internal KeyError in _assign_work_unit) before the session's end hooks ran.
    proc = _pytest("-n", "2", "cases/", "--no-isolation", "--backend", "hostile_kernels:kill", "-k", SMALL,
                   "--benchmark", "none", "--results-dir", str(tmp_path / "results"), env=_hostile_env(tmp_path))
    assert proc.returncode != 0
    assert "MISSING: case M2-K96-N200-unit-s0, backend 'hostile_kernels:kill'" in proc.stdout, proc.stdout[-3000:]
    data = R.load_results(tmp_path / "results")
    assert {"case": "M2-K96-N200-unit-s0", "backend": "hostile_kernels:kill"} in data["missing"]


@pytest.mark.parametrize("args, message", [
    (["--chunk-rows", "0"], "--chunk-rows must be >= 1"),
    (["--device", "tpu"], "unknown device kind 'tpu'"),
    (["--device", "cuda"], "no CUDA device"),
    (["--results-dir", "README.md"], "not a writable directory"),
    (["--results-dir", "results-x", "--baseline", "results-x"], "compared with itself"),
    (["--backend", "no_such_module:fn"], "cannot import module 'no_such_module'"),
    (["--case", "8192,4096,unit"], "--case '8192,4096,unit': expected M,K,N,SCALE[,SEED]"),
    (["--case", "0,96,200,unit"], "--case '0,96,200,unit': expected M,K,N,SCALE[,SEED] with M, K, N >= 1"),
    (["--case", "3,5,7,gaussian"], "SCALE one of seed, unit, saturating"),
])
def test_bad_options_stop_before_any_case(args, message):
    if "cuda" in args:
        import torch
        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA: --device cuda is valid here")
    proc = _pytest("cases/", "-k", SMALL, *args)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stderr + proc.stdout
    assert "passed" not in proc.stdout and "failed" not in proc.stdout


def test_each_case_is_evaluated_once_per_run_whatever_the_scheduling(tmp_path):
    """Under -n 2 with two backends, each case's goldens (written once per evaluation) appear once,
    both backends of every case have their records, and every cell of a case ran on the worker
    that evaluated it (no worker waits on another's evaluation)."""
    results = tmp_path / "results"
    proc = _pytest("-n", "2", "-rA", "cases/", "--backend", "torch-eager", "--backend", "tiled-emulation", "-k",
                   "M1-K or M2-K or M1023", "--results-dir", str(results))
    assert proc.returncode in (0, 1), proc.stdout[-3000:]
    run = R.run_dir(results, (results / "latest").read_text().strip())
    goldens = [p.name for p in (run / "shards").glob("*/*--goldens.json")]
    assert sorted(goldens) == sorted(set(goldens)) and len(goldens) == 4, goldens
    cells = {(r["case"], r["backend"]) for r in R.load_records(results) if not r["backend"].startswith("golden")}
    assert len(cells) == 8
    workers_of_case: dict[str, set] = {}
    for shard in (run / "shards").glob("*/*.json"):
        workers_of_case.setdefault(shard.name.split("--")[0], set()).add(shard.parent.name)
    assert len(workers_of_case) == 4 and all(len(w) == 1 for w in workers_of_case.values()), workers_of_case
    # a cell's test id stays the one a user copies to rerun it (-rA: every test's id in the summary)
    ids = [line for line in proc.stdout.splitlines() if "test_cell[" in line]
    assert len(ids) >= 8 and not any("]@" in line for line in ids), ids


def test_a_case_from_the_command_line_is_gated_and_recorded_like_the_matrix(tmp_path):
    """--profile none --case M,K,N,SCALE: only that case runs, each backend gets its verdict (a
    correct kernel passes, an all-zero one fails every output) and the run's records and
    manifest name it; the rerun command of its failure reproduces it alone."""
    (tmp_path / "zero_kernel.py").write_text("from operators.swiglu_backward.kernels.mutants import MUTANTS\nzeros = MUTANTS['all_zero']\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = _pytest("cases/", "-p", "no:xdist", "--profile", "none", "--case", "3,5,7,unit,2",
                   "--backend", "torch-eager", "--backend", "zero_kernel:zeros", "--benchmark", "none",
                   "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-3000:]
    assert "--profile none --case 3,5,7,unit,2" in proc.stdout
    data = R.load_results(tmp_path / "results")
    by_backend = {}
    for r in data["records"]:
        if r.get("gated"):
            by_backend.setdefault(r["backend"], []).append((r["case"], r["status"]))
    assert {c for recs in by_backend.values() for c, _ in recs} == {"M3-K5-N7-unit-s2"}
    assert {s for _, s in by_backend["torch-eager"]} == {"pass"}
    assert {s for _, s in by_backend["zero_kernel:zeros"]} == {"fail"}
    assert data["manifest"]["selection"]["cases"] == ["3,5,7,unit,2"]


def _save_inputs(path, spec, **override):
    from safetensors.torch import save_file

    from cases.spec import make_inputs
    tensors = {**make_inputs(spec), **override}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))


def test_inputs_from_a_safetensors_file_are_a_case_named_by_their_bits(tmp_path):
    """--inputs FILE: the file's tensors are the case's inputs (its id carries the file's SHA-256);
    the verdicts equal those of the generated case with the same bits, and a file that changed
    after planning, or that breaks the contract, stops with a message naming it."""
    from cases.spec import CaseSpec, InputsFileError, inputs_case, make_inputs
    base = CaseSpec(3, 5, 7, "unit", 2)
    path = tmp_path / "captured.safetensors"
    _save_inputs(path, base)
    spec = inputs_case(str(path))
    assert (spec.m, spec.k, spec.n, spec.seed) == (3, 5, 7, 0) and spec.scale.startswith("file_")
    loaded, generated = make_inputs(spec), make_inputs(base)
    assert all(torch_equal(loaded[n], generated[n]) for n in generated)
    proc = _pytest("cases/", "-p", "no:xdist", "--profile", "none", "--inputs", str(path),
                   "--backend", "torch-eager", "--benchmark", "none", "--results-dir", str(tmp_path / "results"))
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:]
    data = R.load_results(tmp_path / "results")
    assert {r["case"] for r in data["records"]} == {spec.id}
    assert data["manifest"]["selection"]["inputs"] == [spec.id]

    _save_inputs(path, CaseSpec(3, 5, 7, "unit", 3))          # the file changes after planning
    with pytest.raises(InputsFileError, match="no longer the file the case was planned from"):
        make_inputs(spec)
    _save_inputs(path, base, dy=make_inputs(base)["dy"].float())
    with pytest.raises(InputsFileError, match="input 'dy' has dtype torch.float32"):
        inputs_case(str(path))
    (tmp_path / "pickle.pt").write_bytes(b"\x80\x04not safetensors")
    proc = _pytest("cases/", "--profile", "none", "--inputs", str(tmp_path / "pickle.pt"))
    assert proc.returncode == 4 and "not a readable safetensors file" in proc.stdout + proc.stderr


def torch_equal(a, b) -> bool:
    import torch
    return a.dtype == b.dtype and torch.equal(a.view(torch.int16), b.view(torch.int16))


GROUPED_MODULE = '''
import os
import pytest

pytestmark = pytest.mark.xdist_group("{name}")


@pytest.mark.parametrize("i", range(6))
def test_where(i, tmp_path_factory):
    with open({log!r}, "a") as f:
        f.write("{name} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
'''


def test_the_tests_of_one_xdist_group_run_on_one_worker(tmp_path):
    """A module marked ``xdist_group`` runs on one worker under -n 2 (its module fixtures and
    caches made once), with this project's plugin: pytest 9.2 ignores the group suffix xdist 3.8
    writes, ``cases.scheduling`` writes it where pytest reads it."""
    log = tmp_path / "workers.log"
    for name in ("alpha", "beta"):
        (tmp_path / f"test_{name}.py").write_text(GROUPED_MODULE.format(name=name, log=str(log)))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "cases.plugin", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "12 passed" in proc.stdout, proc.stdout[-2000:]
    workers: dict[str, set] = {}
    for line in log.read_text().splitlines():
        name, worker = line.split()
        workers.setdefault(name, set()).add(worker)
    assert {name: len(w) for name, w in workers.items()} == {"alpha": 1, "beta": 1}, workers
