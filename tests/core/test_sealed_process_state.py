"""Process state beyond torch's flags that an in-process backend can change: each change fails
its own cell, naming it, and is undone before the goldens or the next backend run."""
from __future__ import annotations

import io
import signal
import sys
import warnings

import pytest
import torch

from cases.spec import CaseSpec, make_inputs
from kernels.registry import Backend
from kernels.runner import run_backend
from kernels.sealed_state import capture, changes
from operators.swiglu_backward.kernels.torch_autograd import torch_eager
from operators.swiglu_backward import OPERATOR as SWIGLU

INPUTS = make_inputs(CaseSpec(2, 96, 200, "unit", 0))


def _then(change):
    def kernel(**inputs):
        out = torch_eager(**inputs)
        change()
        return out
    return kernel


def _bf16_fp32_matmuls():
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"


def _stdout():
    sys.stdout = io.StringIO()


HOSTILE = {
    "fp32 matmuls in bf16": (_bf16_fp32_matmuls, "fp32_precision"),
    "default device": (lambda: torch.set_default_device("meta"), "default_device"),
    "warnings as errors": (lambda: warnings.simplefilter("error"), "warnings filters that raise changed"),
    "an alarm pending": (lambda: signal.alarm(100), "pending_alarm"),
    "SIGTERM ignored": (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN), "SIGTERM replaced"),
    "stdout replaced": (_stdout, "sys.stdout replaced"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_process_state_change_fails_its_cell_and_is_undone(name):
    change, named = HOSTILE[name]
    before = capture()
    run = run_backend(SWIGLU, Backend(f"hostile:{name}", _then(change)), INPUTS)
    after = capture()
    assert run.error is not None and named in run.error, run.error
    assert not changes(before, after), changes(before, after)
    assert run_backend(SWIGLU, Backend("torch-eager", torch_eager), INPUTS).error is None


def _patch_matmul():
    real = torch.matmul
    torch.matmul = lambda a, b, **kw: real(a, b, **kw) * 1.05
    torch.Tensor.__matmul__ = lambda a, b: real(a, b) * 1.05


def _patch_gate():
    import accuracy.gate
    import cases.evaluate
    accuracy.gate.gated_verdicts = cases.evaluate.gated_verdicts = lambda *a, **kw: {}


@pytest.mark.parametrize("patch, named", [(_patch_matmul, "torch.matmul"), (_patch_gate, "accuracy.gate.gated_verdicts")])
def test_a_replaced_function_fails_its_cell_and_the_original_is_back(patch, named):
    import accuracy.gate
    import cases.evaluate
    originals = (torch.matmul, torch.Tensor.__matmul__, accuracy.gate.gated_verdicts, cases.evaluate.gated_verdicts)
    run = run_backend(SWIGLU, Backend("hostile:patch", _then(patch)), INPUTS)
    assert run.error is not None and named in run.error, run.error
    assert (torch.matmul, torch.Tensor.__matmul__, accuracy.gate.gated_verdicts,
            cases.evaluate.gated_verdicts) == originals


def _push_mode():
    from torch.overrides import TorchFunctionMode

    class Scales(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out * 1.05 if func is torch.matmul else out
    Scales().__enter__()


def test_a_mode_left_pushed_fails_its_cell_and_is_popped():
    depth = torch._C._len_torch_function_stack()
    run = run_backend(SWIGLU, Backend("hostile:mode", _then(_push_mode)), INPUTS)
    assert run.error is not None and "TorchFunctionMode Scales" in run.error, run.error
    assert torch._C._len_torch_function_stack() == depth


def test_no_environment_variable_chooses_the_operator(monkeypatch):
    """A backend setting $ACCURACY_OPERATOR once made every later cell of its process resolve
    another operator (found by benchmarks/hostile_sweep). The operator is now the case's own value:
    the variable, set by a backend or by the user, changes nothing."""
    import os
    from cases.evaluate import evaluate_case
    from cases.spec import CaseSpec
    from kernels.registry import resolve
    monkeypatch.setenv("ACCURACY_OPERATOR", "rmsnorm_backward")

    def sets_the_variable(**inputs):
        os.environ["ACCURACY_OPERATOR"] = "nosuchop"
        return torch_eager(**inputs)

    outcome = evaluate_case(CaseSpec(64, 96, 200, "unit", 0), [Backend("hostile:env", sets_the_variable),
                                                              resolve(SWIGLU, "torch-eager")], benchmark=None)
    assert outcome.error is None
    for name in ("hostile:env", "torch-eager"):
        assert list(outcome.verdicts[name]) == list(SWIGLU.output_names)
        assert all(v.passed for v in outcome.verdicts[name].values()), name


def _zeros(gen, m, k, n):
    return {name: torch.zeros(shape) for name, shape in SWIGLU.input_shapes({"M": m, "K": k, "N": n}).items()}


def _swap_the_declaration():
    """A copy of the SwiGLU declaration whose every scale profile draws zeros, put in the registry:
    every later case of this process would check nothing (found by an adversarial review with
    --no-isolation)."""
    import dataclasses

    import operators
    operators._loaded["swiglu_backward"] = dataclasses.replace(SWIGLU, scales={s: _zeros for s in SWIGLU.scales})


def test_a_declaration_cannot_be_changed_and_a_swapped_one_is_put_back():
    import operators
    from cases.evaluate import evaluate_case
    from kernels.registry import resolve
    operators.get("swiglu_backward")
    # the declaration's mappings are read-only: an attempt fails the backend's own cell
    def set_a_profile():
        SWIGLU.scales["unit"] = _zeros
    run = run_backend(SWIGLU, Backend("hostile:scales", _then(set_a_profile)), INPUTS)
    assert run.error is not None and "does not support item assignment" in run.error, run.error
    # a declaration swapped in the registry: the cell fails naming it, the registry is put back
    run = run_backend(SWIGLU, Backend("hostile:registry", _then(_swap_the_declaration)), INPUTS)
    assert run.error is not None and "operator registry's declarations changed (swiglu_backward" in run.error
    assert operators.get("swiglu_backward") is SWIGLU
    outcome = evaluate_case(CaseSpec(1024, 96, 200, "unit", 0), [resolve(SWIGLU, "torch-eager")], benchmark=None)
    assert outcome.checks_nothing is None and all(v.passed for v in outcome.verdicts["torch-eager"].values())


def _patch_derived_gate_class():
    from accuracy import derived
    derived._Gate.row_allowance = lambda self, *a, **kw: None


def _patch_derived_gate_instance():
    from operators.bias_gelu_backward import DERIVED
    DERIVED.gate.row_allowance = lambda *a, **kw: None


def test_a_derived_gate_cannot_be_replaced_from_a_backend():
    """An operator written as its math is judged by objects of ``accuracy.derived``: a backend that
    replaces their class's function fails its cell and the function is back; one that sets an
    attribute on the gate itself is refused (the objects are read-only)."""
    from accuracy import derived
    from operators.bias_gelu_backward import DERIVED
    original = derived._Gate.row_allowance
    run = run_backend(SWIGLU, Backend("hostile:derived-class", _then(_patch_derived_gate_class)), INPUTS)
    assert run.error is not None and "accuracy.derived._Gate.row_allowance" in run.error, run.error
    assert derived._Gate.row_allowance is original
    # put back as it was stored (a staticmethod), or every later call would pass the gate as self
    assert isinstance(vars(derived._Gate)["row_allowance"], staticmethod)
    run = run_backend(SWIGLU, Backend("hostile:derived-instance", _then(_patch_derived_gate_instance)), INPUTS)
    assert run.error is not None and "read-only" in run.error, run.error
    assert "row_allowance" not in vars(DERIVED.gate)


def _swap_gate_code():
    import accuracy.gate

    def passes(metrics):
        return True, True
    accuracy.gate.aggregate_checks.__code__ = passes.__code__      # the same function object


def _loosen_the_acceptance():
    import accuracy.tolerances
    accuracy.tolerances.ACCEPTANCE = accuracy.tolerances.Tolerance(0.5, 1.0)


@pytest.mark.parametrize("patch, named", [(_swap_gate_code, "accuracy.gate.aggregate_checks"),
                                          (_loosen_the_acceptance, "accuracy.tolerances.ACCEPTANCE")])
def test_a_function_changed_in_place_or_a_constant_rebound_fails_its_cell_and_is_put_back(patch, named):
    """Swapping a function's ``__code__`` keeps its identity, and rebinding a module constant
    replaces no function: both moved the gate for every later backend of an in-process run
    (found by an adversarial sweep) until the seal checked code and upper-case constants too."""
    import accuracy.gate
    import accuracy.tolerances
    code, acceptance = accuracy.gate.aggregate_checks.__code__, accuracy.tolerances.ACCEPTANCE
    run = run_backend(SWIGLU, Backend("hostile:in-place", _then(patch)), INPUTS)
    assert run.error is not None and named in run.error, run.error
    assert accuracy.gate.aggregate_checks.__code__ is code
    assert accuracy.tolerances.ACCEPTANCE is acceptance


IMPORT_PATCH = """
import accuracy.gate
_real = accuracy.gate.verdict
accuracy.gate.verdict = lambda *a, **kw: _real(*a, **kw)
def kernel(**inputs):
    raise AssertionError("never called")
"""


@pytest.mark.parametrize("then, says", [("", r"importing 'patches_on_import' replaced accuracy\.gate\.verdict"),
                                        ("raise ImportError('no toolchain')", "ImportError: no toolchain")])
def test_a_module_that_patches_the_gate_as_it_imports_is_refused(tmp_path, monkeypatch, then, says):
    """The call's seal compares against the table taken at the call: a replacement made while the
    backend's module imported was its baseline, and a wrong kernel beside it passed (found by an
    adversarial sweep). Importing is checked like a call, and what it replaced is put back when the
    import then fails too."""
    import accuracy.gate
    from kernels.registry import BackendNotFound, resolve_path
    (tmp_path / "patches_on_import.py").write_text(IMPORT_PATCH + then + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    original = accuracy.gate.verdict
    with pytest.raises(BackendNotFound, match=says):
        resolve_path("mine", "patches_on_import:kernel")
    assert accuracy.gate.verdict is original
    sys.modules.pop("patches_on_import", None)


# the hanging import waits out the whole start limit: 6 s, where a child that exits must start
# (import torch and the framework) before its exit is seen, 20 s under a loaded CI machine
@pytest.mark.parametrize("body, start_seconds, says", [("import os\nos._exit(0)\n", 20, "exited with code 0"),
                                                       ("import time\ntime.sleep(10 ** 6)\n", 6, "did not start in 6 s")])
def test_a_module_that_exits_or_hangs_as_it_imports_stops_in_a_child(tmp_path, monkeypatch, body, start_seconds, says):
    """Imported in the framework's process, such a module ended the run with exit code 0 and no
    record, or hung it past --cell-timeout (found by an adversarial sweep); the plugin imports it
    in a child first, which reports why it did not load."""
    from kernels import isolated
    (tmp_path / "bad_import.py").write_text(body + "def kernel(**inputs):\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(isolated, "START_SECONDS", start_seconds)
    with pytest.raises(isolated.ChildStartError, match=says):
        isolated.check_import("mine", "bad_import:kernel")
    assert "bad_import" not in sys.modules


def test_a_closure_changed_in_place_fails_its_cell_and_is_put_back(monkeypatch):
    """A closure's cell rebound (the function the same object, its body another value) and a
    default replaced by a tensor (whose ``==`` is no answer): named, and put back as they were."""
    import accuracy.gate

    def make():
        limit = 0.5

        def within(x, scale=1.0):
            return x <= limit * scale
        return within
    monkeypatch.setattr(accuracy.gate, "_within", make(), raising=False)

    def loosen():
        accuracy.gate._within.__closure__[0].cell_contents = 1e30
        accuracy.gate._within.__defaults__ = (torch.ones(2),)
    run = run_backend(SWIGLU, Backend("hostile:closure", _then(loosen)), INPUTS)
    assert run.error is not None and "accuracy.gate._within" in run.error, run.error
    assert accuracy.gate._within(0.4) and not accuracy.gate._within(0.6)
