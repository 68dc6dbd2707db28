"""The article's kernels through PyPTO's interpreter: dynamic-M tails against an
independent torch model of the same arithmetic (tests/pypto/reference.py).

Where the arithmetic is the same operation for operation (dg, dfc, db, dx: elementwise
FP32 math, per-tile torch sums, BF16 stores and BF16 / FP32 accumulation in the same
order) the interpreter must agree bit for bit. dw and dx go through the interpreter's
matmul, which splits the contraction into cube-tile K steps: a different FP32 summation
order than one torch matmul, so they may differ by a BF16 rounding flip (per partial, for
dw). Their bound: 1 BF16 ulp of the value plus 2^-7 of the sum of |terms| (e.g.
|x|^T |dg|) -- what an FP32 reordering can move a result by, with room -- and fewer than
0.1% of the elements more than 1 ulp apart.
"""
from __future__ import annotations

import pytest
import torch

from kernels.contract import validate_outputs
from tests.pypto.reference import kernel_math, ulp_distance
from operators.swiglu_backward import OPERATOR as SWIGLU

EXACT = ("dg", "dfc", "db_g", "db_fc")


def make_inputs(m, k, n, seed=0, g_scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=gen) * sc).to(torch.bfloat16)  # noqa: E731
    return dict(x=r(m, k), w_g=r(k, n), w_fc=r(k, n), dy=r(m, n), g=r(m, n, sc=g_scale), fc=r(m, n))


def check_against_reference(out, inputs, **ref_kwargs):
    ref = kernel_math(**inputs, **ref_kwargs)
    for name in EXACT:
        d = ulp_distance(out[name], ref[name])
        assert int(d.max()) == 0, f"{name}: {int((d > 0).sum())} elements differ, up to {int(d.max())} ulp"
    a = {name: t.float().abs() for name, t in {**inputs, "dg": ref["dg"], "dfc": ref["dfc"]}.items()}
    scales = {"dw_g": a["x"].T @ a["dg"], "dw_fc": a["x"].T @ a["dfc"],
              "dx": a["dg"] @ a["w_g"].T + a["dfc"] @ a["w_fc"].T}
    for name, scale in scales.items():
        diff = (out[name].float() - ref[name].float()).abs()
        ulp = ref[name].float().abs().clamp_min(2.0 ** -126) * 2.0 ** -7
        bad = diff > ulp + scale * 2.0 ** -7
        assert not bool(bad.any()), (f"{name}: {int(bad.sum())} elements beyond the reordering bound, "
                                     f"max diff {float(diff.max()):.3g}")
        assert float((ulp_distance(out[name], ref[name]) > 1).float().mean()) < 1e-3


@pytest.mark.parametrize("m", [1, 1023, 1025, 3000])
def test_article_dynamic_m_tail(pypto_cpu, m):
    from operators.swiglu_backward.kernels.pypto.backend import pypto_article

    inputs = make_inputs(m, 96, 200, seed=m)
    out = validate_outputs(SWIGLU, "pypto", pypto_article(**inputs), inputs)
    check_against_reference(out, inputs)


@pytest.mark.parametrize("m", [1, 3000])
def test_hardened_dynamic_m_tail(pypto_cpu, m):
    from operators.swiglu_backward.kernels.pypto.backend import pypto_hardened

    inputs = make_inputs(m, 96, 200, seed=m + 1)
    out = validate_outputs(SWIGLU, "pypto-hardened", pypto_hardened(**inputs), inputs)
    check_against_reference(out, inputs, acc_dtype=torch.float32, sigmoid_form="stable")


def test_article_seed_shape(pypto_cpu):
    """K, N of the seed case with a tail tile (M=1025: b and x run 2 tiles, w one)."""
    from operators.swiglu_backward.kernels.pypto.backend import pypto_article

    inputs = make_inputs(1025, 512, 1024, seed=7)
    check_against_reference(pypto_article(**inputs), inputs)


def test_saturating_g_article_nan_hardened_finite(pypto_cpu):
    """g = 100 > 88.7: exp(g) = inf and inf/inf = NaN in the article's sigmoid."""
    from operators.swiglu_backward.kernels.pypto.backend import pypto_article, pypto_hardened

    inputs = make_inputs(40, 16, 32, seed=3)
    inputs["g"][5, 7] = 100.0
    inputs["g"][6, 8] = -100.0
    art, hard = pypto_article(**inputs), pypto_hardened(**inputs)
    assert torch.isnan(art["dg"][5, 7]) and torch.isnan(art["dfc"][5, 7])
    assert torch.isnan(art["db_g"][0, 7]) and torch.isnan(art["dw_g"][:, 7]).all()
    assert torch.isnan(art["dx"][5]).all()
    assert not torch.isnan(art["dg"][6, 8])  # g = -100: exp -> 0, sigmoid 0 / 1 = 0
    for name, t in hard.items():
        assert torch.isfinite(t).all(), name
    check_against_reference(hard, inputs, acc_dtype=torch.float32, sigmoid_form="stable")


def test_cpu_chunking_is_bit_identical(pypto_cpu, monkeypatch):
    """Row blocks of whole tiles: the same operations in the same order as one call."""
    from operators.swiglu_backward.kernels.pypto.backend import pypto_article, pypto_hardened

    inputs = make_inputs(2100, 96, 200, seed=11)
    for fn in (pypto_article, pypto_hardened):
        monkeypatch.setenv("SWIGLU_PYPTO_CPU_CHUNK_ROWS", "1000000")
        whole = fn(**inputs)
        monkeypatch.setenv("SWIGLU_PYPTO_CPU_CHUNK_ROWS", "1")  # one tile per call
        chunked = fn(**inputs)
        for name in whole:
            assert torch.equal(whole[name].view(torch.int16), chunked[name].view(torch.int16)), (fn.__name__, name)


def test_widened_matmul_inputs_are_bit_identical(pypto_cpu):
    """The article's FP32 casts before pypto.matmul vs BF16 operands: same bits."""
    import pypto

    from operators.swiglu_backward.kernels.pypto import interpreter
    from operators.swiglu_backward.kernels.pypto import kernels as pk
    from operators.swiglu_backward.schedule import ARTICLE

    m, k, n = 2100, 64, 96
    inputs = make_inputs(m, k, n, seed=5)
    results = []
    for widen in (True, False):
        _, _, w, x = pk.build(k, n, ARTICLE, pypto.RunMode.SIM.value, widen_matmul_inputs=widen)
        dw_g, dw_fc = torch.zeros(k, n, dtype=torch.bfloat16), torch.zeros(k, n, dtype=torch.bfloat16)
        dx = torch.zeros(m, k, dtype=torch.bfloat16)
        interpreter.run(w, inputs["x"], inputs["dy"], inputs["fc"], dw_g, dw_fc)
        interpreter.run(x, inputs["dy"], inputs["fc"], inputs["w_g"], inputs["w_fc"], dx)
        results.append((dw_g, dw_fc, dx))
    for a, b in zip(*results):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_too_large_m_is_unsupported_with_numbers(pypto_cpu, monkeypatch):
    from kernels.contract import BackendUnsupported
    from operators.swiglu_backward.kernels.pypto.backend import pypto_article

    monkeypatch.setenv("SWIGLU_PYPTO_CPU_MAX_M", "100")
    inputs = make_inputs(101, 8, 16)
    with pytest.raises(BackendUnsupported, match=r"M=101 .*M<=100"):
        pypto_article(**inputs)


def test_npu_requested_without_npu_fails(monkeypatch):
    from operators.swiglu_backward.kernels.pypto import backend

    monkeypatch.setenv("SWIGLU_PYPTO_TARGET", "npu")
    monkeypatch.setattr(backend, "_npu_count", lambda: 0)
    with pytest.raises(backend.PyptoTargetError, match="no NPU is usable"):
        backend.pypto_article(**make_inputs(2, 4, 8))


def test_target_resolution(monkeypatch):
    from operators.swiglu_backward.kernels.pypto import backend

    monkeypatch.setattr(backend, "_npu_count", lambda: 0)
    monkeypatch.delenv("SWIGLU_PYPTO_TARGET", raising=False)
    assert backend.resolve_target() == "cpu"
    monkeypatch.setattr(backend, "_npu_count", lambda: 8)
    assert backend.resolve_target() == "npu"
    monkeypatch.setenv("SWIGLU_PYPTO_TARGET", "cpu")
    assert backend.resolve_target() == "cpu"
    monkeypatch.setenv("SWIGLU_PYPTO_TARGET", "gpu")
    with pytest.raises(backend.PyptoTargetError):
        backend.resolve_target()


def test_xdist_workers_take_their_own_npu(monkeypatch):
    from operators.swiglu_backward.kernels.pypto.backend import PyptoTargetError, npu_device_index

    monkeypatch.delenv("TILE_FWK_DEVICE_ID", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert npu_device_index(8) == 0
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw10")
    assert npu_device_index(8) == 2
    monkeypatch.setenv("TILE_FWK_DEVICE_ID", "3")
    assert npu_device_index(8) == 3
    monkeypatch.setenv("TILE_FWK_DEVICE_ID", "9")
    with pytest.raises(PyptoTargetError):
        npu_device_index(8)


def test_x_kernel_vec_tile_branch(pypto_cpu):
    from operators.swiglu_backward.kernels.pypto import kernels as pk

    assert pk.x_vec_tile("DAV_3510") == (128, 256)
    assert pk.x_vec_tile("DAV_2201") == (128, 128)
