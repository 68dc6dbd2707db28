"""Run the case matrix of an operator in a fresh pytest process and read back its records, or
evaluate cases in this process (``in_process``); the cells' verdicts from records."""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import operators
from cases import expectations
from cases.evaluate import evaluate_case, records_for
from runs import platform_facts

ROOT = Path(__file__).resolve().parents[2]


def run_matrix(results: Path, operator: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The process and its merged results (``records``, ``manifest``; empty when it wrote none)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "cases/", "-p", "no:xdist", "-p", "no:cacheprovider",
                           "--operator", operator, "--results-dir", str(results), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    files = sorted(results.glob("runs/*/results.json"))
    return proc, (json.loads(files[-1].read_text()) if files else {"records": [], "manifest": {}})


def in_process(cases, backends, device: str = "cpu") -> list[dict]:
    """The records of ``backends`` at ``cases``, evaluated in this process as the matrix does: a
    gated output's status judged with the operator's known failures on this platform's measured
    facts (``expected_failure`` where an entry that holds here covers it)."""
    records = []
    facts = _facts(device)
    for spec in cases:
        outcome = evaluate_case(spec, backends, device=device)
        assert outcome.error is None, outcome.error
        entries = expectations.load(operators.get(spec.operator))
        for b in backends:
            def judge_of(output, golden, passed, metrics, name=b.name):
                return expectations.judge_output(entries, name, spec.id, output, golden, passed, metrics,
                                                 device=device, facts=facts)
            records += records_for(outcome, b.name, judge_of)
    return records


@functools.cache
def _facts(device: str) -> dict:
    return platform_facts.measure(device)


def verdicts(records: list[dict]) -> dict[tuple[str, str], dict[str, str]]:
    """(backend, case) -> {output: status} of the gated records."""
    out: dict = {}
    for r in records:
        if r.get("golden") == "reference":
            out.setdefault((r["backend"], r["case"]), {})[r["output"]] = r["status"]
    return out


def interpreted_defaults(op, cases) -> dict[tuple[str, str], dict[str, str]]:
    """The verdicts of every default backend of ``op`` at ``cases``, the Triton kernel in triton's
    interpreter (a skip saying why without triton)."""
    import pytest
    pytest.importorskip("triton", reason="the triton-flash backend needs triton (pip install -e '.[triton]')")
    from kernels.registry import resolve
    backends = [resolve(op, n) for n in op.default_backends]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        return verdicts(in_process(cases, backends))


def wrong_and_right(op_name: str, case: str, wrong_path: str, right: str = "flash-emulation") -> tuple[dict, dict]:
    """The output verdicts of the wrong kernel ``wrong_path`` and of the correct backend ``right``
    at one case (the operator's sizes and scale, as ``--case`` takes them)."""
    from cases.matrix import parse_case
    from kernels.registry import resolve
    op = operators.get(op_name)
    spec = parse_case(op, case)
    wrong, good = resolve(op, wrong_path), resolve(op, right)
    cells = verdicts(in_process([spec], [wrong, good]))
    return cells[(wrong.name, spec.id)], cells[(good.name, spec.id)]
