"""``--save-failing DIR``: a folder for each failing cell only (a wrong kernel's; a crashed call's,
inputs only), its inputs bit-identical to the case's, its records the run's, and its rerun.sh fails
the same outputs from those files alone; ``rerun.sh --saved-outputs`` on another CPU kind
(oneDNN capped below BF16 instructions) gives the saved outputs the run's records bit for bit;
DIR may not be a results directory or run folder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cases.save_failing import FAILING, SAVED_OUTPUTS_BACKEND, SAVED_OUTPUTS_DIR, cell_folder, saved_outputs
from cases.spec import CaseSpec, make_inputs
from runs.summary import cell_verdicts
from operators.swiglu_backward import OPERATOR as SWIGLU
from runs.record_diff import diff_records


ROOT = Path(__file__).resolve().parents[2]
# the module fixtures run the matrix in subprocesses (20-50 s each): made once, on one worker
pytestmark = pytest.mark.xdist_group("save-failing")
WRONG = "operators.swiglu_backward.kernels.plain:round_up_stores"
DYING = "tests.core.dying_kernels:die_at_m2"     # its child process exits at M=2: a crashed cell
# another CPU kind on this machine: oneDNN without avx512_bf16 and AMX, so torch's BF16 GEMM converts
# to FP32 (its subnormal handling changes where the CPU has them: the run's measured platform fact)
OTHER_ISA = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
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
    # the M=1025 folder reruns on another CPU kind below
    folders = [p.parent for p in root.glob("*/*/outputs.safetensors") if not p.parent.parent.name.startswith("M1025-")]
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


def _judged(records, backend: str) -> dict:
    """(output, golden) -> (status, metrics) of ``backend``'s records: what the verdict read."""
    return {(r["output"], r["golden"]): (r["status"], r.get("metrics")) for r in records if r["backend"] == backend}


def _run_manifest(results: Path) -> dict:
    [path] = sorted(results.glob("runs/*/results.json"))
    return json.loads(path.read_text())["manifest"]


@pytest.fixture(scope="module")
def other_isa(saved, tmp_path_factory):
    """The M=1025 cell's folder rerun on the other CPU kind, judging its saved outputs and calling
    its backend again: (folder, results of the saved outputs, results of the backend)."""
    root, _ = saved
    [folder] = [p.parent for p in root.glob("M1025-*/*/outputs.safetensors")]
    tmp = tmp_path_factory.mktemp("isa")
    for mode, name in (["--saved-outputs"], "outputs"), ([], "backend"):
        proc = subprocess.run(["sh", str(folder / "rerun.sh"), *mode, "-q", "-p", "no:cacheprovider",
                               "--results-dir", str(tmp / name)], cwd=tmp, capture_output=True, text=True,
                              timeout=600, env={**os.environ, **OTHER_ISA})
        assert proc.returncode == 1, proc.stdout[-3000:]
    return folder, tmp / "outputs", tmp / "backend"


def test_saved_outputs_are_judged_bit_for_bit_on_another_cpu_kind(other_isa):
    folder, outputs, backend = other_isa
    saved_records = json.loads((folder / "record.json").read_text())["records"]
    name = saved_records[0]["backend"]
    expected = _judged(saved_records, name)
    assert any(status == "fail" for status, _ in expected.values())
    # the very bits saved: every record's status and metrics as the run wrote them
    assert _judged(_records(outputs), SAVED_OUTPUTS_BACKEND) == expected
    # the backend called again on the saved inputs: the same outputs fail (its own arithmetic may
    # use the CPU's BF16 instructions, so its numbers may differ in their last bits)
    assert _failed_outputs(r for r in _records(backend) if r["backend"] == name) == _failed_outputs(saved_records)


def test_the_other_cpu_kind_is_another_platform(saved, other_isa):
    """The cap changes the platform fact the expectations condition on, where this CPU has BF16 instructions."""
    root, _ = saved
    here = _run_manifest(root.parent / "results")["facts"]
    there = _run_manifest(other_isa[1])["facts"]
    assert there["bf16_gemm_keeps_subnormals"] is True, there
    if here["bf16_gemm_keeps_subnormals"] is True:
        pytest.skip("this CPU's BF16 GEMM keeps subnormals without the cap (no avx512_bf16 or AMX in use): "
                    "the capped rerun is the same CPU kind here")
    assert here != there


def test_saved_outputs_belong_to_their_inputs(saved, monkeypatch):
    root, _ = saved
    [folder] = [p.parent for p in root.glob("M1025-*/*/outputs.safetensors")]
    monkeypatch.delenv(SAVED_OUTPUTS_DIR, raising=False)
    with pytest.raises(ValueError, match=SAVED_OUTPUTS_DIR):
        saved_outputs()
    monkeypatch.setenv(SAVED_OUTPUTS_DIR, str(folder))
    inputs = load_file(str(folder / "inputs.safetensors"))
    got = saved_outputs(**inputs)
    assert sorted(got) == sorted(load_file(str(folder / "outputs.safetensors")))
    nudged = dict(inputs, dy=inputs["dy"].clone())
    nudged["dy"].view(torch.int16)[0, 0] ^= 1
    with pytest.raises(ValueError, match=r"\['dy'\]"):
        saved_outputs(**nudged)


def test_a_crashed_cell_has_no_outputs_to_judge(saved, tmp_path):
    root, records = saved
    crashed = [cell for cell, status in cell_verdicts(records).items() if status == "crashed"]
    for case, backend in crashed:
        proc = subprocess.run(["sh", str(cell_folder(root, case, backend) / "rerun.sh"), "--saved-outputs"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "no outputs were saved" in proc.stderr, proc.stderr
    assert crashed
