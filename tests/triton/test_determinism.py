"""accuracy.determinism: bit-identical runs are reported as such, a nondeterministic
backend's differences are counted and sized, and nothing raises."""
from __future__ import annotations

import itertools
import json

import torch

from accuracy.determinism import compare_runs, determinism, ordinal
from kernels.contract import BackendUnsupported
from operators.swiglu_backward.kernels.torch_autograd import torch_eager
from tests.triton.test_backend_interpreter import make_inputs

_calls = itertools.count(1)


def shuffled_sum_backend(*, x, w_g, w_fc, dy, g, fc):
    """A toy with an atomic kernel's flaw, exaggerated: db_g summed row by row into a BF16
    running value in an order that changes on every call (a fresh permutation of the
    rows, seeded by a call counter), so its last bits vary run to run; every other
    output is torch's and deterministic."""
    out = dict(torch_eager(x=x, w_g=w_g, w_fc=w_fc, dy=dy, g=g, fc=fc))
    perm = torch.randperm(dy.shape[0], generator=torch.Generator().manual_seed(next(_calls)))
    terms = (dy.float() * fc.float())[perm]
    acc = torch.zeros(terms.shape[1], dtype=torch.bfloat16)
    for row in terms:                            # BF16 adds in a shuffled order
        acc = (acc.float() + row).to(torch.bfloat16)
    out["db_g"] = acc[None, :]
    return out


def test_deterministic_backend_is_bit_identical():
    rec = determinism(torch_eager, make_inputs(300, 16, 48, seed=1), repeats=3)
    assert rec["status"] == "ok" and rec["bit_identical"] is True
    assert all(o["differing_elements"] == 0 and o["max_ulp_spread"] == 0 for o in rec["outputs"].values())
    assert rec["mutated_inputs"] == []
    json.dumps(rec)


def test_triton_deterministic_is_bit_identical(interpreter):
    from operators.swiglu_backward.kernels.triton.backend import triton_deterministic
    rec = determinism(triton_deterministic, make_inputs(2049, 32, 64, seed=2), repeats=3)
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["bit_identical"] is True, {k: v for k, v in rec["outputs"].items() if not v["bit_identical"]}


def test_nondeterministic_toy_is_reported():
    # 512 unit-scale rows summed in BF16: each add rounds at the running sum's spacing
    # (~0.06-0.125 at |sum| ~ 20), so the order changes most of the 64 results
    rec = determinism(shuffled_sum_backend, make_inputs(512, 8, 64, seed=3), repeats=4)
    assert rec["status"] == "ok"
    assert rec["bit_identical"] is False
    db = rec["outputs"]["db_g"]
    assert not db["bit_identical"] and 0 < db["differing_elements"] <= db["numel"]
    assert db["max_ulp_spread"] >= 1 and db["max_abs_spread"] > 0
    assert rec["outputs"]["dx"]["bit_identical"] is True
    json.dumps(rec)


def test_unsupported_and_failing_backends_are_data():
    def unsupported(**_):
        raise BackendUnsupported("needs a GPU")

    def broken(**_):
        raise RuntimeError("kernel crashed")

    inputs = make_inputs(4, 4, 4, seed=0)
    assert determinism(unsupported, inputs)["status"] == "unsupported"
    rec = determinism(broken, inputs)
    assert rec["status"] == "error" and "kernel crashed" in rec["reason"]
    assert determinism(torch_eager, inputs, repeats=1)["status"] == "error"
    json.dumps(rec)


def test_compare_runs_counts_ulps_and_nans():
    a = torch.tensor([1.0, 2.0, -0.0, float("nan"), 5.0], dtype=torch.bfloat16)
    b = a.clone()
    b[0] = torch.tensor(1.0 + 2 ** -7, dtype=torch.bfloat16)     # the next BF16 above 1.0: 1 ULP
    b[1] = torch.tensor(2.0 + 3 * 2 ** -6, dtype=torch.bfloat16)  # 3 ULPs above 2.0
    b[2] = 0.0                                                     # -0 vs +0: different bits, 0 ULP
    b[4] = float("nan")                                            # NaN in one run only
    rec = compare_runs([{"t": a}, {"t": b}, {"t": a}])["outputs"]["t"]
    assert rec["differing_elements"] == 4
    assert rec["max_ulp_spread"] == 3
    assert rec["max_abs_spread"] == 3 * 2 ** -6
    assert rec["nan_mismatch"] == 1
    assert rec["worst_ulp_index"] == [1]


def test_ordinal_is_monotone_through_zero():
    v = torch.tensor([-2.0, -1e-40, -0.0, 0.0, 1e-40, 2.0], dtype=torch.float32)
    o = ordinal(v)
    assert o.tolist() == sorted(o.tolist()) and o[2] == o[3] == 0
