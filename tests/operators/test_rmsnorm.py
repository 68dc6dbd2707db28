"""The RMSNorm backward, the framework's second operator: PyTorch's eager and compiled autograd
and the tiled emulation pass; every wrong kernel of ``operators.rmsnorm_backward.mutants`` fails
by the output it names, at the case that exposes it."""
from __future__ import annotations

from operators.rmsnorm_backward import mutants
from tests.operators.matrix_run import run_matrix, verdicts

CORRECT = ("torch-eager", "torch-compile", "tiled-emulation", "operators.rmsnorm_backward.mutants:reference")


def test_wrong_kernels_fail_by_their_output_and_correct_ones_pass(tmp_path):
    cases = sorted({case for _, case in mutants.KILLS.values()} | set(mutants.UNCAUGHT.values()))
    args = ["--profile", "none"]
    for case in cases:
        args += ["--case", case]
    for name in (*CORRECT, *(f"operators.rmsnorm_backward.mutants:{m}" for m in (*mutants.KILLS, *mutants.UNCAUGHT))):
        args += ["--backend", name]
    proc, results = run_matrix(tmp_path, "rmsnorm_backward", *args)
    cells = verdicts(results["records"])
    assert cells, proc.stdout[-3000:] + proc.stderr[-3000:]
    for (backend, case), outputs in cells.items():
        name = backend.rsplit(":", 1)[-1]
        if backend in CORRECT:
            assert set(outputs.values()) == {"pass"}, (backend, case, outputs)
        elif name in mutants.KILLS:
            output, kill_case = mutants.KILLS[name]
            if case.startswith("M{}-N{}-{}-".format(*kill_case.split(","))):
                assert outputs[output] == "fail", (name, case, outputs)
    for name, case in mutants.UNCAUGHT.items():      # the gate's stated blind spot: still within it
        m, n, scale = case.split(",")[:3]
        assert set(cells[(f"operators.rmsnorm_backward.mutants:{name}", f"M{m}-N{n}-{scale}-s0")].values()) == {"pass"}
