"""``--save-failing DIR``: a folder for each failing cell only (a wrong kernel's; a crashed call's,
inputs only), its inputs bit-identical to the case's, its records the run's, and its rerun.sh fails
the same outputs from those files alone; DIR may not be a results directory or run folder."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cases.save_failing import FAILING, cell_folder
from cases.spec import CaseSpec, make_inputs
from cases.summary import cell_verdicts
from operators.swiglu_backward import OPERATOR as SWIGLU
from runs.record_diff import diff_records

ROOT = Path(__file__).resolve().parents[2]
WRONG = "operators.swiglu_backward.kernels.plain:round_up_stores"
DYING = "tests.core.dying_kernels:die_at_m2"     # its child process exits at M=2: a crashed cell
ARGS = ["--profile", "none", "--case", "2,96,200,unit", "--case", "1025,96,200,unit",
        "--backend", "torch-eager", "--backend", WRONG, "--backend", DYING]


def _pytest(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "cases/", "-p", "no:xdist", "-p", "no:cacheprovider",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _records(results: Path) -> list[dict]:
    [path] = sorted(results.glob("runs/*/results.json"))
    return json.loads(path.read_text())["records"]


def _failed_outputs(records) -> set[str]:
    return {r["output"] for r in records if r.get("gated") and r["status"] == "fail"}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("save")
    proc = _pytest(*ARGS, "--results-dir", str(tmp / "results"), "--save-failing", str(tmp / "saved"))
    assert proc.returncode == 1, proc.stdout[-3000:]
    return tmp / "saved", _records(tmp / "results")


def test_only_failing_cells_are_saved(saved):
    root, records = saved
    verdicts = cell_verdicts(records)
    failing = {cell for cell, status in verdicts.items() if status in FAILING}
    assert {b for _, b in failing} == {WRONG, DYING} and any(b == "torch-eager" for _, b in verdicts)
    folders = {p.parent for p in root.glob("*/*/record.json")}
    assert folders == {cell_folder(root, case, backend) for case, backend in failing}
    for case, backend in failing:
        folder = cell_folder(root, case, backend)
        crashed = verdicts[(case, backend)] == "crashed"
        assert (folder / "outputs.safetensors").exists() != crashed, folder
        saved_records = json.loads((folder / "record.json").read_text())["records"]
        theirs = [r for r in records if (r["case"], r["backend"]) == (case, backend)]
        assert diff_records(theirs, saved_records).same
    assert any(status == "crashed" for cell, status in verdicts.items() if cell in failing)


def test_saved_inputs_are_the_case_inputs_bit_for_bit(saved):
    root, records = saved
    for path in root.glob("*/*/inputs.safetensors"):
        spec = json.loads((path.parent / "record.json").read_text())["records"][0]["case_spec"]
        case = CaseSpec(spec["m"], spec["k"], spec["n"], spec["scale"], spec["seed"])
        tensors, expected = load_file(str(path)), make_inputs(case)
        assert sorted(tensors) == sorted(SWIGLU.input_names)
        assert all(torch.equal(_bits(tensors[n]), _bits(expected[n])) for n in SWIGLU.input_names), path


def test_the_rerun_script_fails_the_same_outputs(saved, tmp_path):
    root, records = saved
    folders = [p.parent for p in root.glob("*/*/outputs.safetensors")]
    assert folders
    for folder in folders:
        saved_records = json.loads((folder / "record.json").read_text())["records"]
        proc = subprocess.run(["sh", str(folder / "rerun.sh"), "-q", "-p", "no:cacheprovider",
                               "--results-dir", str(tmp_path / folder.parent.name)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 1 and "--inputs" in proc.stdout, proc.stdout[-3000:]
        again = [r for r in _records(tmp_path / folder.parent.name) if r["backend"] == saved_records[0]["backend"]]
        assert _failed_outputs(again) == _failed_outputs(saved_records) != set()


def test_a_results_directory_or_run_folder_is_refused(saved, tmp_path):
    results = saved[0].parent / "results"
    [run] = (results / "runs").iterdir()
    for target in (results, run, run / "saved", tmp_path / "r"):
        proc = _pytest(*ARGS, "--results-dir", str(tmp_path / "r"), "--save-failing", str(target))
        text = proc.stdout + proc.stderr
        assert proc.returncode == 4 and "--save-failing" in text and "Traceback" not in text, text[-2000:]
