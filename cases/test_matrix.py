"""The accuracy matrix: one test per case x backend, gated against the BF16-faithful golden.

A cell passes when every output is inside the gate; fails with a message that
names the case, backend, output, golden, worst element and the error's source;
xfails when every failure is a known, explained one (the operator's ``expectations/``);
and fails when a known failure has gone away, so that file stays true.
"""
from __future__ import annotations

import fcntl
import json
import shlex

import pytest

import operators
from accuracy.dual import DEFAULT_BENCHMARK
from accuracy.gate import AccuracyError
from runs.results import _safe, cell_path, to_json, write_atomic, write_cell
from runs.resume import CARRIED, GOLDENS
from cases import expectations
from cases.devices import golden_device
from cases.evaluate import evaluate_case, golden_records, records_for
from cases.matrix import PROFILES
from cases.plugin import (CELLS, _worker, benchmark_name, case_device, case_progress, platform_facts, run_folder,
                          save_failing_root, shard_dir)
from cases.save_failing import is_failing, save_failing_cell
from cases.spec import make_inputs
from kernels.registry import resolve

_CASES: dict = {}          # case id -> the case's evaluated cells (JSON), per worker process
_PENDING: dict = {}        # case id -> backends this process has still to report
_EXPECTATIONS: dict = {}   # operator name -> its known failures, read once per process


def _expectations(operator) -> list:
    if operator.name not in _EXPECTATIONS:
        _EXPECTATIONS[operator.name] = expectations.load(operator)
    return _EXPECTATIONS[operator.name]


def _evaluate(config, spec) -> dict:
    """Evaluate one case (every backend, one golden pass) and judge every backend's outputs."""
    operator = spec.declaration
    backends = list(config.stash[CELLS][spec.id])
    bench = benchmark_name(config)
    if bench is not None and bench not in [b.name for b in backends]:
        # its outputs are the dual verdict's denominator even where its own cells were deselected
        backends.append(resolve(operator, bench))
    device, facts = case_device(config), platform_facts(config)
    save_root = save_failing_root(config)
    golden_dev = golden_device(device)
    outcome = evaluate_case(spec, backends, device=device, golden_device=golden_dev,
                            chunk_rows=config.getoption("--chunk-rows"),
                            isolate=not config.getoption("--no-isolation"),
                            cell_timeout=config.getoption("--cell-timeout"), repeats=config.getoption("--repeats"),
                            benchmark=bench, keep_outputs=save_root is not None,
                            progress=case_progress(config, spec.id))
    if not cell_path(shard_dir(config), CARRIED, f"{spec.id}--{GOLDENS}").exists():
        # a resumed run keeps its source's goldens of a case: those of the whole case, where this
        # evaluation may hold only the backends that had no record there
        write_cell(shard_dir(config), _worker(config), f"{spec.id}--{GOLDENS}", golden_records(outcome))
    cells = {}
    selected = {b.name for b in config.stash[CELLS][spec.id]}     # not the benchmark run for the dual verdict alone
    for b in backends:
        def judge(output, golden, passed, metrics, name=b.name):
            return expectations.judge_output(_expectations(operator), name, spec.id, output, golden, passed,
                                             metrics, device=device, facts=facts)
        run = outcome.runs.get(b.name)
        records = records_for(outcome, b.name, judge, gate=config.getoption("--gate"))
        for r in records:
            r.update(device=device, golden_device=golden_dev)
        cells[b.name] = {"records": records,
                         "skipped": run.skipped if run else None, "error": run.error if run else None}
        if save_root is not None and b.name in selected and is_failing(records):
            rerun = rerun_command(config, spec, b.name)
            save_failing_cell(save_root, case=spec.id, backend=b.name, inputs=make_inputs(spec),
                              outputs=run.outputs if run else None,
                              records=to_json([{**r, "rerun": rerun} for r in records]),
                              verdict_options=verdict_options(config, spec))
    for run in outcome.runs.values():
        run.outputs = None
    return to_json({"error": outcome.error, "cells": cells})


def _case(config, spec) -> dict:
    """The case's cells, evaluated exactly once per run whatever the xdist scheduling: the first
    worker to reach the case evaluates it under a lock in the run folder, the others read its result."""
    if spec.id not in _CASES:
        folder = run_folder(config) / "cases"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{_safe(spec.id)}.json"
        with open(folder / f"{_safe(spec.id)}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.exists():
                write_atomic(path, _evaluate(config, spec))
            _CASES[spec.id] = json.loads(path.read_text())
        _PENDING[spec.id] = set(_CASES[spec.id]["cells"])
    return _CASES[spec.id]


def _release(spec, backend):
    _PENDING[spec.id].discard(backend)
    if not _PENDING[spec.id]:
        del _CASES[spec.id], _PENDING[spec.id]


def verdict_options(config, spec) -> list[str]:
    """The options besides the case and backend that decide a cell's verdict, as this run gave them."""
    args = ["--operator", spec.operator] if spec.operator != operators.DEFAULT else []
    if case_device(config) != "cpu":
        args += ["--device", case_device(config)]      # the worker's own device, gw<i> -> cuda:<i mod n>
    if config.getoption("--repeats") > 1:
        args += ["--repeats", str(config.getoption("--repeats"))]
    if config.getoption("--gate") != "absolute":
        args += ["--gate", config.getoption("--gate")]
    if config.getoption("--benchmark") != DEFAULT_BENCHMARK:
        args += ["--benchmark", config.getoption("--benchmark")]
    return args


def rerun_command(config, spec, backend: str) -> str:
    """One command that reruns this cell alone (its inputs regenerate from the case id)."""
    args = ["pytest", "cases/", "-p", "no:xdist", "--backend", backend, "-k", f"{spec.id}-{backend}"]
    profile = config.getoption("--profile")
    if spec.inputs_file is not None:                                   # an --inputs file
        args += ["--profile", "none", "--inputs", spec.inputs_file]
    elif spec not in PROFILES[profile](spec.declaration, config.getoption("--seeds")):   # a --case: itself, alone
        args += ["--profile", "none", "--case", ",".join(map(str, (*spec.sizes, spec.scale, spec.seed)))]
    else:
        if profile != "quick":
            args += ["--profile", profile]
        if spec.seed > 0:
            args += ["--seeds", str(spec.seed + 1)]
    args += verdict_options(config, spec)
    return "Rerun this cell alone: " + " ".join(shlex.quote(a) for a in args)


def test_cell(cell, request):
    __tracebackhide__ = True
    spec, backend = cell
    config = request.config
    case = _case(config, spec)
    try:
        cell = case["cells"][backend.name]
        records = cell["records"]
        rerun = rerun_command(config, spec, backend.name)
        for r in records:
            r["rerun"] = rerun
        write_cell(shard_dir(config), _worker(config), f"{spec.id}--{backend.name}", records)
        if cell["skipped"]:
            pytest.skip(cell["skipped"])
        if case["error"]:
            pytest.fail(case["error"], pytrace=False)
        if cell["error"]:
            pytest.fail(f"case {spec.id}: {cell['error']}\n\n{rerun}", pytrace=False)

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
                f"(expected because: {r['expected_reason']}). Remove or narrow its entry in {spec.declaration.expectations}."
                for r in fixed))
        if problems:
            raise AccuracyError("\n\n".join(problems) + "\n\n" + rerun)
        if known:
            pytest.xfail("; ".join(f"{r['output']}: {r['expected_reason']}" for r in known))
    finally:
        _release(spec, backend.name)
