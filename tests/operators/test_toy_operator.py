"""An operator added from this folder alone (``tests/operators/toy``) runs its whole quick matrix
with the framework's code: its case ids, contract, goldens, gate and verdicts are its own."""
from __future__ import annotations

from tests.operators.matrix_run import run_matrix, verdicts

WRONG = "tests.operators.toy.backends:first_row_dropped"


def test_toy_operator_runs_its_quick_matrix(tmp_path):
    proc, results = run_matrix(tmp_path, "tests.operators.toy", "--backend", "torch-eager",
                               "--backend", "tiled-emulation", "--backend", WRONG)
    records = results["records"]
    assert records, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = verdicts(records)
    cases = sorted({case for _, case in cells})
    # the quick profile over the toy's own axes: its 4 M edges (2 shapes, 2 scales) plus its acceptance case
    assert cases == sorted(["M1-N8-unit-s0", "M3-N33-tiny-s0", "M1024-N8-unit-s0", "M1500-N33-tiny-s0",
                            "M1-N33-unit-s0", "M1500-N33-unit-s0"]), cases
    for (backend, case), outputs in cells.items():
        assert set(outputs) == {"y", "z"}, (backend, case, outputs)
        if backend == WRONG:
            assert outputs["z"] == "fail" and outputs["y"] == "pass", (case, outputs)
        else:
            assert set(outputs.values()) == {"pass"}, (backend, case, outputs)
    assert results["manifest"]["selection"]["operator"] == "tests.operators.toy"
    assert proc.returncode == 1     # the wrong kernel's cells fail the run
    assert "first_row_dropped" in proc.stdout and "output 'z'" in proc.stdout


def test_unknown_operator_stops_before_any_case(tmp_path):
    proc, results = run_matrix(tmp_path, "tests.operators.no_such_operator")
    assert proc.returncode == 4 and not results["records"]
    assert "operator 'tests.operators.no_such_operator'" in proc.stderr + proc.stdout
