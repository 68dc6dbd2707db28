"""The accuracy matrix: one test per case x backend, gated against the BF16-faithful golden.

A cell passes when every output is inside the gate; fails with a message that
names the case, backend, output, golden, worst element and the error's source;
xfails when every failure is a known, explained one (``cases/expectations/``);
and fails when a known failure has gone away, so that file stays true.
"""
from __future__ import annotations

import pytest

from accuracy.gate import AccuracyError
from cases import expectations
from cases.evaluate import evaluate_case, golden_records, records_for
from cases.plugin import CELLS, _worker, platform_facts, shard_dir
from accuracy.results import write_cell

_OUTCOMES: dict = {}       # case id -> CaseOutcome, per worker process
_PENDING: dict = {}        # case id -> backends still to report
_EXPECTATIONS = expectations.load()


def _outcome(config, spec):
    if spec.id not in _OUTCOMES:
        backends = config.stash[CELLS][spec.id]
        outcome = evaluate_case(spec, backends, device=config.getoption("--device"),
                                chunk_rows=config.getoption("--chunk-rows"),
                                isolate=not config.getoption("--no-isolation"),
                                cell_timeout=config.getoption("--cell-timeout"),
                                repeats=config.getoption("--repeats"))
        _OUTCOMES[spec.id] = outcome
        _PENDING[spec.id] = {b.name for b in backends}
        write_cell(shard_dir(config), _worker(config), f"{spec.id}--goldens", golden_records(outcome))
    return _OUTCOMES[spec.id]


def _release(spec, backend):
    _PENDING[spec.id].discard(backend)
    if not _PENDING[spec.id]:
        del _OUTCOMES[spec.id], _PENDING[spec.id]


def rerun_command(config, spec, backend: str) -> str:
    """One command that reruns this cell alone (its inputs regenerate from the case id)."""
    import shlex
    args = ["pytest", "cases/", "-p", "no:xdist", "--backend", backend, "-k", f"{spec.id}-{backend}"]
    if config.getoption("--profile") != "quick":
        args += ["--profile", config.getoption("--profile")]
    if spec.seed > 0:
        args += ["--seeds", str(spec.seed + 1)]
    if config.getoption("--device") != "cpu":
        args += ["--device", config.getoption("--device")]
    if config.getoption("--repeats") > 1:
        args += ["--repeats", str(config.getoption("--repeats"))]
    return "Rerun this cell alone: " + " ".join(shlex.quote(a) for a in args)


def test_cell(cell, request):
    __tracebackhide__ = True
    spec, backend = cell
    config = request.config
    outcome = _outcome(config, spec)
    try:
        device, facts = config.getoption("--device"), platform_facts(config)

        def judge(output, golden, passed, metrics):
            return expectations.judge_output(_EXPECTATIONS, backend.name, spec.id, output, golden, passed,
                                             metrics, device=device, facts=facts)

        records = records_for(outcome, backend.name, judge)
        rerun = rerun_command(config, spec, backend.name)
        for r in records:
            r["rerun"] = rerun
        write_cell(shard_dir(config), _worker(config), f"{spec.id}--{backend.name}", records)
        run = outcome.runs.get(backend.name)
        if run is not None and run.skipped:
            pytest.skip(run.skipped)
        if outcome.error:
            pytest.fail(outcome.error, pytrace=False)
        if run is not None and run.error:
            pytest.fail(f"case {spec.id}: {run.error}\n\n{rerun}", pytrace=False)

        gated = [r for r in records if r.get("gated")]
        unexpected = [r for r in gated if r["status"] == "fail"]   # beyond the gate, or beyond a known failure's bound
        fixed = [r for r in gated if r["status"] == "unexpected_pass"]
        known = [r for r in gated if r["status"] == "expected_failure"]
        problems = []
        if unexpected:
            problems.append("\n\n".join(r["message"] for r in unexpected))
        if fixed:
            problems.append("\n".join(
                f"Known failure no longer fails: case {spec.id}, backend {backend.name!r}, output {r['output']!r} "
                f"(expected because: {r['expected_reason']}). Remove or narrow its entry in cases/expectations/."
                for r in fixed))
        if problems:
            raise AccuracyError("\n\n".join(problems) + "\n\n" + rerun)
        if known:
            pytest.xfail("; ".join(f"{r['output']}: {r['expected_reason']}" for r in known))
    finally:
        _release(spec, backend.name)
