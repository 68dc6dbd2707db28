"""An operator added from this folder alone (``tests/operators/toy``) runs its whole quick matrix
with the framework's code, in this process beside the SwiGLU backward: its case ids, contract,
goldens, gate and verdicts are its own."""
from __future__ import annotations

import operators
from cases.evaluate import evaluate_case
from cases.matrix import quick_cases
from kernels.registry import resolve
from tests.operators.matrix_run import in_process, run_matrix, verdicts

WRONG = "tests.operators.toy.backends:first_row_dropped"


def test_toy_operator_runs_its_quick_matrix_in_process():
    toy = operators.get("tests.operators.toy")
    cases = quick_cases(toy)
    # the quick profile over the toy's own axes: its 4 M edges (2 shapes, 2 scales) plus its acceptance case
    assert sorted(c.id for c in cases) == sorted(["M1-N8-unit-s0", "M3-N33-tiny-s0", "M1024-N8-unit-s0",
                                                  "M1500-N33-tiny-s0", "M1-N33-unit-s0", "M1500-N33-unit-s0"])
    backends = [resolve(toy, n) for n in ("torch-eager", "tiled-emulation", WRONG)]
    cells = verdicts(in_process(cases, backends))
    assert len(cells) == len(cases) * len(backends)
    for (backend, case), outputs in cells.items():
        assert set(outputs) == {"y", "z"}, (backend, case, outputs)
        if backend == WRONG:
            assert outputs["z"] == "fail" and outputs["y"] == "pass", (case, outputs)
        else:
            assert set(outputs.values()) == {"pass"}, (backend, case, outputs)
    # the SwiGLU backward in the same process afterwards keeps its own outputs
    swiglu = operators.get("swiglu_backward")
    outcome = evaluate_case(quick_cases(swiglu)[0], [resolve(swiglu, "torch-eager")], benchmark=None)
    assert list(outcome.verdicts["torch-eager"]) == list(swiglu.output_names)


def test_unknown_operator_stops_before_any_case(tmp_path):
    proc, results = run_matrix(tmp_path, "tests.operators.no_such_operator")
    assert proc.returncode == 4 and not results["records"]
    assert "operator 'tests.operators.no_such_operator'" in proc.stderr + proc.stdout
