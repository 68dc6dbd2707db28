"""Platform facts are measured, not assumed, and every run records them in its manifest."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from runs import idle_threads, manifest, platform_facts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def flushing():
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot set flush-to-zero / denormals-are-zero (torch.set_flush_denormal)")
    with platform_facts.flushing_subnormals():
        yield
    assert platform_facts.fp32_keeps_subnormals("cpu"), "the flushing region leaked into the process"


def test_a_pool_started_under_ftz_is_measured_as_flushing_after_it_is_unset():
    """The leak the probe must see: run in a fresh process, whose worker threads start under FTZ/DAZ."""
    code = ("import torch; from runs import platform_facts as p; torch.set_flush_denormal(True); "
            "torch.ones(1 << 20).sum(); torch.set_flush_denormal(False); print(p.measure())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "'fp32_keeps_subnormals': False" in out.stdout, out.stdout + out.stderr


def test_a_flushing_process_is_measured_as_flushing(flushing):
    """FTZ+DAZ is what avx512_bf16/AMX dot products do to subnormals; the probe sees it, with a
    reference that stays exact in a flushing process (built from integer mantissas)."""
    assert platform_facts.measure("cpu") == {"bf16_gemm_keeps_subnormals": False, "fp32_keeps_subnormals": False,
                                             "bf16_gelu_keeps_subnormals": False}
    errors = [platform_facts._gemm_error_rms(m, k, n, "cpu") for m, k, n in platform_facts.PROBE_SHAPES]
    assert all(e > 10 * platform_facts.FLUSH_ERROR_RMS for e in errors), errors


def test_fp32_subnormals_are_kept_outside_a_flushing_region():
    assert platform_facts.fp32_keeps_subnormals("cpu") is True


def test_a_gemm_that_keeps_subnormals_errs_by_bf16_rounding_only():
    """Where torch's GEMM keeps subnormals (this CPU unless it has BF16 instructions) its error is
    a BF16 rounding, an order of magnitude under the threshold; either way the fact is a bool."""
    value = platform_facts.bf16_gemm_keeps_subnormals("cpu")
    assert value in platform_facts.FACT_VALUES["bf16_gemm_keeps_subnormals"]
    if value is True:
        errors = [platform_facts._gemm_error_rms(m, k, n, "cpu") for m, k, n in platform_facts.PROBE_SHAPES]
        assert max(errors) < platform_facts.FLUSH_ERROR_RMS / 3, errors


def test_bf16_values_decode_exactly_from_their_bits():
    values = torch.tensor([0.0, -0.0, 1.0, -3.5, 2.0 ** -126, 2.0 ** -133, -(2.0 ** -130) * 3, 3.0e38],
                          dtype=torch.bfloat16)
    decoded = platform_facts._bf16_in_units(values) * 2.0 ** -133
    assert decoded.tolist() == values.double().tolist()


def test_the_manifest_is_plain_json_with_the_facts():
    m = manifest.build("cpu")
    text = json.dumps(m, allow_nan=False)    # raises on anything that is not plain JSON
    assert set(m["facts"]) == set(platform_facts.FACTS)
    assert m["omp_wait_policy"] == idle_threads.state()
    assert m["versions"]["torch"] and m["cpu"]["cores"] >= 1 and "precision_flags" in m
    assert json.loads(text)["framework"]["name"] == "swiglu-accuracy"


def test_a_matrix_run_writes_its_manifest_to_results_and_report(tmp_path):
    """Through an xdist worker (-n 1): the controller measures once and hands the manifest over."""
    results, report = tmp_path / "results", tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "1", "cases/", "--backend", "torch-eager",
         "-k", "M1-K96-N200-saturating-s0", "--results-dir", str(results), "--report-dir", str(report),
         "--drift-seeds", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "platform facts: bf16_gemm_keeps_subnormals=" in proc.stdout
    from runs.results import load_results
    data = load_results(results)
    assert data["manifest"]["facts"] == platform_facts.measure("cpu")
    assert data["manifest"]["device"] == "cpu"
    html = (report / "index.html").read_text()
    assert "bf16_gemm_keeps_subnormals=" in html and 'id="platform"' in html


def test_a_gelu_that_flushes_subnormal_results_is_measured_as_flushing():
    """oneDNN's BF16 GELU flushes on a CPU with BF16 instructions, PyTorch's own kernel (oneDNN
    disabled) keeps them on every CPU: the probe tells the two apart wherever it runs."""
    with torch.backends.mkldnn.flags(enabled=False):
        assert platform_facts.bf16_gelu_keeps_subnormals("cpu") is True
        shares = [platform_facts._gelu_flushed_share(m, n, "cpu") for m, n in platform_facts.GELU_PROBE_SHAPES]
        assert max(shares) < 0.05, shares
    real_gelu = torch.nn.functional.gelu

    def flushing_gelu(x, *args, **kwargs):      # the gradient it returns has every subnormal zeroed
        return real_gelu(_FlushGrad.apply(x) if x.dtype == torch.bfloat16 else x, *args, **kwargs)

    try:
        torch.nn.functional.gelu = flushing_gelu
        with torch.backends.mkldnn.flags(enabled=False):
            assert platform_facts.bf16_gelu_keeps_subnormals("cpu") is False
    finally:
        torch.nn.functional.gelu = real_gelu


class _FlushGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad):
        return torch.where(grad.float().abs() < 2.0 ** -126, torch.zeros_like(grad), grad)
