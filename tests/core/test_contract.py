"""Bad input and broken backends get clear errors naming the tensor; nothing deep in torch."""
import pytest
import torch

from kernels.contract import ContractError, validate_inputs, validate_outputs
from kernels.registry import Backend, BackendNotFound, resolve
from kernels.runner import run_backend
from operators.swiglu_backward.kernels.torch_autograd import torch_eager
from tests.core.helpers import tiny_inputs
from operators.swiglu_backward import OPERATOR as SWIGLU


def test_valid_inputs_give_dims():
    assert validate_inputs(SWIGLU, tiny_inputs(5, 3, 4)) == (5, 3, 4)


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.update(x=d["x"].float()), "input 'x' has dtype torch.float32"),
    (lambda d: d.update(dy=d["dy"][:, :2]), r"input 'dy' has shape \(5, 2\), expected \(5, 4\)"),
    (lambda d: d.update(g=d["g"].reshape(-1)), "input 'g' has shape"),
    (lambda d: d.pop("fc"), r"missing \['fc'\]"),
    (lambda d: d.__setitem__("w_g", [1, 2]), "input 'w_g' is list"),
])
def test_bad_inputs_are_named(mutate, match):
    inputs = tiny_inputs()
    mutate(inputs)
    with pytest.raises(ContractError, match=match):
        validate_inputs(SWIGLU, inputs)


def test_m_zero_is_a_clear_error():
    inputs = {k: v[:0] if k in ("x", "dy", "g", "fc") else v for k, v in tiny_inputs().items()}
    with pytest.raises(ContractError, match="M = 0"):
        validate_inputs(SWIGLU, inputs)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nonfinite_inputs_are_rejected_with_their_index(value):
    inputs = tiny_inputs()
    inputs["fc"][2, 1] = value
    with pytest.raises(ContractError, match=r"input 'fc' holds 1 non-finite values \(first at index \(2, 1\)"):
        validate_inputs(SWIGLU, inputs)


def test_outputs_checked_by_name_shape_dtype():
    inputs = tiny_inputs()
    good = torch_eager(**inputs)
    with pytest.raises(ContractError, match=r"backend 'k' did not return \['dx'\]"):
        validate_outputs(SWIGLU, "k", {n: t for n, t in good.items() if n != "dx"}, inputs)
    with pytest.raises(ContractError, match=r"backend 'k' output 'db_g' has shape \(4,\), expected \(1, 4\)"):
        validate_outputs(SWIGLU, "k", {**good, "db_g": good["db_g"].reshape(-1)}, inputs)
    with pytest.raises(ContractError, match="backend 'k' output 'dw_g' has dtype torch.float16"):
        validate_outputs(SWIGLU, "k", {**good, "dw_g": good["dw_g"].half()}, inputs)
    with pytest.raises(ContractError, match="backend 'k' returned tuple"):
        validate_outputs(SWIGLU, "k", tuple(good.values()), inputs)


def _raising(**_):
    raise RuntimeError("kernel launch failed: out of tiles")


def _mutating(**inputs):
    out = torch_eager(**inputs)
    inputs["dy"].mul_(2)   # writes its gradient into its input, as Liger's SwiGLU backward does
    return out


def test_runner_keeps_a_raising_backend_as_data():
    run = run_backend(SWIGLU, Backend("boom", _raising), tiny_inputs())
    assert not run.ok and "backend 'boom' raised RuntimeError: kernel launch failed" in run.error


def test_runner_detects_input_mutation_and_protects_the_originals():
    inputs = tiny_inputs()
    before = inputs["dy"].clone()
    run = run_backend(SWIGLU, Backend("mut", _mutating), inputs)
    assert not run.ok and "wrote into its inputs ['dy']" in run.error
    assert torch.equal(inputs["dy"], before)


def _flips_one_bit(**inputs):
    out = torch_eager(**inputs)
    inputs["w_fc"].view(torch.int16)[2, 1] ^= 1     # the smallest write there is: one bit
    return out


@pytest.mark.parametrize("fn, name", [(_mutating, "dy"), (_flips_one_bit, "w_fc")])
def test_private_inputs_are_checked_by_digest_without_a_copy(fn, name):
    """The isolated child's mode: no clones, a write still named (the inputs are discarded after)."""
    run = run_backend(SWIGLU, Backend("mut", fn), tiny_inputs(), private_inputs=True)
    assert not run.ok and f"wrote into its inputs ['{name}']" in run.error
    assert run_backend(SWIGLU, Backend("ok", torch_eager), tiny_inputs(), private_inputs=True).ok


def test_registry_resolves_names_and_import_paths():
    assert resolve(SWIGLU, "torch-eager").fn is torch_eager
    assert resolve(SWIGLU, "operators.swiglu_backward.kernels.torch_autograd:torch_eager").fn is torch_eager
    with pytest.raises(BackendNotFound, match="not registered"):
        resolve(SWIGLU, "no-such-backend")
    with pytest.raises(BackendNotFound, match="cannot import module"):
        resolve(SWIGLU, "no_such_pkg.mod:fn")
    with pytest.raises(BackendNotFound, match="has no attribute"):
        resolve(SWIGLU, "operators.swiglu_backward.kernels.torch_autograd:nope")
    # a module named golden would give records the summaries and --resume take for the goldens'
    with pytest.raises(BackendNotFound, match="names starting with 'golden:' are the goldens' records"):
        resolve(SWIGLU, "golden:torch_eager")
