"""``python -m accuracy mutate KERNEL``: hand-written kernels of the toy operator (``tests.operators.toy``,
y = a * b * s and z = sum over M of a * b) whose every mutant's verdict can be reasoned out, judged
at one 3 x 8 case (about 0.1 s a mutant after a child process's 3 s start)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import operators
from cases.mutation.__main__ import main
from cases.mutation.mutator import mutants, plan_for
from cases.mutation.source import read_kernel

TOY = "tests.operators.toy"
CASE = "M3-N8-unit-s0"
HEADER = """\
import torch

from tests.operators.toy import TORCH_BF16


def _outputs(p, s):
    return {"y": (p.float() * s.float()).to(torch.bfloat16), "z": p.float().sum(0, keepdim=True).to(torch.bfloat16)}
"""
FOOTER = "\n\nkernel.schedule = TORCH_BF16\n"


def _kernel(tmp_path, body: str, name: str = "kernel.py") -> str:
    path = tmp_path / name
    path.write_text(HEADER + "\n\n" + textwrap.dedent(body) + FOOTER)
    return f"{path}:kernel"


def _run(capsys, address: str, *extra: str) -> dict:
    out = capsys.readouterr().out   # nothing before
    path = address.partition(":")[0] + ".json"
    assert main([address, "--operator", TOY, "--cases", CASE, "--json", path, *extra]) == 0
    out = capsys.readouterr().out
    result = json.loads(open(path).read())
    result["markdown"] = out
    return result


def _verdicts(result: dict) -> dict[str, str]:
    return {m["edit"]: m["verdict"] for m in result["population"]}


def test_counts_of_a_kernel_whose_every_edit_is_known(tmp_path, capsys):
    """The product a * b in FP32, stored in BF16 (the toy's legitimate choice, declared by its
    schedule): dropping the store or storing in FP16 instead is closer to FP64 (equivalent); a
    .float() dropped or a BF16 input staged through FP16 changes no bit at unit scale (equivalent);
    the four edits of the product and the two swaps of a and b are killed by the gate."""
    address = _kernel(tmp_path, """\
        def kernel(*, a, b, s):
            return _outputs((a.float() * b.float()).to(torch.bfloat16), s)
        """)
    result = _run(capsys, address)
    verdicts = _verdicts(result)
    assert verdicts[".to(...) dropped"] == verdicts[".to(bfloat16) -> .half()"] == "equivalent"
    fp64_or_better = [m for m in result["population"] if m["detail"].startswith("FP64-or-better")]
    assert [m["edit"] for m in fp64_or_better] == [".to(...) dropped", ".to(bfloat16) -> .half()"]
    killed = {"Mult -> Div", "Mult -> Add", "Mult: right operand dropped (b.float())",
              "Mult: left operand dropped (a.float())", "a -> b", "b -> a"}
    assert {e for e, v in verdicts.items() if v == "gate"} == killed
    assert (result["mutants"], result["contract"], result["gate"], result["equivalent"], result["survived"]) == \
        (13, 0, 6, 7, 0)
    assert result["score"] == 1.0 and result["kills_per_case"] == {CASE: 6}
    assert all(m["killed_at"] == CASE for m in result["population"] if m["verdict"] == "gate")
    assert "| 0 | 6 | 7 | 0 | 100.0% |" in result["markdown"]


def test_a_mutant_that_raises_or_hangs_is_killed_and_the_tool_finishes(tmp_path, capsys):
    """``left`` is an int: staging it through FP16 raises AttributeError; ``left + 1`` never ends the loop."""
    address = _kernel(tmp_path, """\
        def kernel(*, a, b, s):
            left = 1
            while left > 0:
                left = left - 1
            return _outputs((a.float() * b.float()).to(torch.bfloat16), s)
        """)
    kernel = read_kernel(address)
    edits = [e.edit for e in mutants(kernel.function, plan_for(operators.get(TOY), kernel.function, kernel.globals))]
    hang = edits.index("Sub -> Add")
    result = _run(capsys, address, "--timeout", "3", "--limit", str(hang + 2))
    by_edit = {(m["line"], m["edit"]): m for m in result["population"]}
    raised = by_edit[(12, "left -> left staged through FP16")]
    assert raised["verdict"] == "contract" and "AttributeError" in raised["detail"]
    # ``left = left + 1`` and then ``left = left``: two hangs in a row, the second in the restarted process
    hung = result["population"][hang:]
    assert [m["edit"] for m in hung] == ["Sub -> Add", "Sub: right operand dropped (1)"]
    assert all(m["verdict"] == "contract" and "ran past its 3 s timeout" in m["detail"] for m in hung)
    assert all("timeout" not in m["detail"] for m in result["population"][:hang])
    assert by_edit[(11, "left negated")]["verdict"] == "equivalent"     # the loop never runs: same bits


def test_a_wrong_unmutated_kernel_is_reported_and_only_new_failures_kill(tmp_path, capsys):
    """z sums from row 1 (the first row dropped): the unmutated kernel fails z, so an edit of z
    alone (sum -> mean) cannot be killed by it, while an edit of y is."""
    address = _kernel(tmp_path, """\
        def kernel(*, a, b, s):
            p = (a.float() * b.float()).to(torch.bfloat16)
            return {"y": (p.float() * s.float()).to(torch.bfloat16),
                    "z": p[1:].float().sum(0, keepdim=True).to(torch.bfloat16)}
        """)
    result = _run(capsys, address)
    assert result["baseline_failures"] == {CASE: "fails z"}
    assert "fails its baseline" in result["markdown"]
    verdicts = _verdicts(result)
    assert verdicts["sum -> mean"] == "survived"
    y_edits = [m for m in result["population"] if m["line"] == 12 and m["edit"] == "Mult -> Div"]
    assert y_edits and all(m["verdict"] == "gate" and m["detail"].endswith(": y") for m in y_edits)


@pytest.mark.parametrize("address", ["no_such_module_for_mutate:kernel", "missing_dir/kernel.py:kernel",
                                     "tests.operators.toy.backends:no_such_function", "no-colon"])
def test_an_address_that_does_not_resolve_exits_2_with_one_line(address, capsys):
    assert main([address, "--operator", TOY, "--cases", CASE]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1


def test_python_m_accuracy_mutate_reaches_the_command():
    proc = subprocess.run([sys.executable, "-m", "accuracy", "mutate", "no_such_module_for_mutate:kernel"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "no_such_module_for_mutate" in proc.stderr


def test_an_edit_legitimate_in_one_kernel_is_equivalent_there_only():
    """A surviving edit is a miss unless the operator or the kernel at hand declares it legitimate:
    the same judged results triage as survived without the kernel's declaration and as equivalent
    with it; a killed mutant stays killed whatever is declared."""
    from cases.mutation.judge import Judged
    from cases.mutation.mutator import Edit
    from cases.mutation.score import triage
    from cases.mutation.worker import BASELINE, CaseResult

    case = "M2-K96-N200-unit-s0"
    edits = [Edit(1, 10, "@ as a BF16 GEMM, rounded to BF16", ""), Edit(2, 11, "@ as a BF16 GEMM, rounded to BF16", "")]
    judged = Judged(results={BASELINE: {case: CaseResult()},
                             1: {case: CaseResult(ulp_from_baseline=0.5)},
                             2: {case: CaseResult(failed=("dx",), ulp_from_baseline=9.0)}})
    plain = triage(edits, judged, [case], {}, fp64_or_better=False)
    declared = triage(edits, judged, [case], {"@ as a BF16 GEMM, rounded to BF16": "BF16 operands"},
                      fp64_or_better=False)
    assert [v.verdict for v in plain] == ["survived", "gate"]
    assert [v.verdict for v in declared] == ["equivalent", "gate"]
    assert "BF16 operands" in declared[0].detail


def test_survivors_alone_are_judged_again_at_the_later_cases(tmp_path):
    """``survivors_at``: a mutant that no small case tells apart is judged again at a later case,
    where it may die (the product's BF16 store made an FP16 one survives the unit case and
    underflows at the tiny one, a x 2^-120); equivalent mutants stay equivalent."""
    from cases.mutation.score import score_kernel
    from cases.spec import CaseSpec

    address = _kernel(tmp_path, """\
        def kernel(*, a, b, s):
            return _outputs((a.float() * b.float()).to(torch.bfloat16), s)
        """)
    unit, tiny = (CaseSpec(3, 8, scale, 0, operator=TOY) for scale in ("unit", "tiny"))
    op = operators.get(TOY)

    def verdicts(**kw):
        result = score_kernel(address, op, [unit], fp64_or_better=False, progress=False, timeout=120, **kw)
        return {m.edit: m for m in result.mutants}, result

    before, _ = verdicts()
    after, result = verdicts(survivors_at=[tiny])
    half = ".to(bfloat16) -> .half()"
    assert before[half].verdict == "survived"
    assert after[half].verdict == "gate" and after[half].killed_at == tiny.id
    assert result.cases == [unit.id, tiny.id]
    for edit, m in before.items():
        if m.verdict == "equivalent":
            assert after[edit].verdict == "equivalent" and after[edit].killed_at is None
