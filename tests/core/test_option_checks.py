"""Options and plans that cannot work are refused before any case runs, in one line (exit 4);
a shard the hash gives no case still writes a run that merges."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ONE = ["--profile", "none", "--case", "2,96,200,unit", "--backend", "torch-eager"]


def _pytest(*args, env=None, cwd=ROOT):
    import os
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:randomly", "cases/", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args, env, says", [
    (["--profile", "none", "--backend", "torch-eager"], None, "--profile none plans only"),
    ([*ONE, "--seeds", "1000000000000"], None, "--seeds must be"),
    ([*ONE, "--cell-timeout", "nan"], None, "--cell-timeout must be"),
    ([*ONE, "--cell-timeout", "inf"], None, "--cell-timeout must be"),
    ([*ONE, "--chunk-rows", "1000000000000000"], None, "--chunk-rows must be"),
    ([*ONE, "--num-shards", "2", "--shard-durations", "/nonexistent/results"], None, "--shard-durations"),
    (["--profile", "none", "--case", "1" * 30 + ",96,200,unit", "--backend", "torch-eager"], None, "at most"),
    (["--profile", "none", "--case", "4000000000,96,200,unit"], None, "at most"),
    ([*ONE, "--backend", ":"], None, "expected 'package.module:callable'"),
    ([*ONE, "--operator", "./operators/swiglu_backward"], None, "not a file path"),
    ([*ONE, "--operator", "nosuchop"], None, "--operator: operator 'nosuchop'"),
    ([*ONE, "--case", "rmsnorm_backward:1025,256,unit"], None, "'rmsnorm_backward' is not an operator of this run"),
    ([*ONE, "--operator", "swiglu_backward", "--operator", "tests.operators.toy", "--case", "2049,8,unit"], None,
     "--operator swiglu_backward: --case '2049,8,unit'"),
])
def test_a_wrong_option_is_one_line_and_exit_4(args, env, says, tmp_path):
    proc = _pytest(*args, "--results-dir", str(tmp_path / "r"), env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 4, text[-2000:]
    assert says in text and "Traceback" not in text and "INTERNALERROR" not in text, text[-2000:]


def test_an_operator_module_that_raises_or_does_not_parse_is_a_usage_error(tmp_path):
    for name, body in (("raises_op", "raise RuntimeError('boom')\n"), ("syntax_op", "def (:\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
        proc = _pytest(*ONE, "--operator", name, "--results-dir", str(tmp_path / "r"),
                       env={"PYTHONPATH": f"{ROOT}:{tmp_path}"})
        assert proc.returncode == 4 and "INTERNALERROR" not in proc.stdout + proc.stderr, proc.stdout[-2000:]


def test_two_inputs_files_with_the_same_bytes_are_refused(tmp_path):
    import torch
    from safetensors.torch import save_file
    from operators.swiglu_backward import OPERATOR as SWIGLU
    gen = torch.Generator().manual_seed(0)
    tensors = {n: torch.randn(s, generator=gen).to(torch.bfloat16)
               for n, s in SWIGLU.input_shapes({"M": 4, "K": 96, "N": 200}).items()}
    for name in ("a.safetensors", "b.safetensors"):
        save_file(tensors, str(tmp_path / name))
    proc = _pytest("--profile", "none", "--inputs", str(tmp_path / "a.safetensors"), "--inputs",
                   str(tmp_path / "b.safetensors"), "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 4 and "planned twice" in proc.stdout + proc.stderr, proc.stdout[-2000:]


def test_a_shard_without_a_case_writes_an_empty_run_that_merges(tmp_path):
    runs = []
    for shard in (0, 1):        # the one case hashes to shard 1 of 2
        out = tmp_path / f"shard{shard}"
        proc = _pytest(*ONE, "--num-shards", "2", "--shard-id", str(shard), "--results-dir", str(out))
        assert proc.returncode == 0, proc.stdout[-2000:]
        runs.append(out)
    empty = json.loads(next((runs[0] / "runs").iterdir()).joinpath("results.json").read_text())
    assert empty["records"] == [] and empty["missing"] == []
    merged = subprocess.run([sys.executable, "-m", "accuracy", "merge", *map(str, runs), "-o", str(tmp_path / "m")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert merged.returncode == 0, merged.stdout + merged.stderr


def test_listing_the_cells_runs_none_and_starts_no_run(tmp_path):
    """``--collect-only`` listed the cells, then reported each as planned but missing and left a
    run folder behind (found by an adversarial sweep)."""
    out = _pytest("--collect-only", "--results-dir", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "MISSING" not in out.stdout and "test_cell[" in out.stdout
    assert not (tmp_path / "runs").exists() and not (tmp_path / "latest").exists()
