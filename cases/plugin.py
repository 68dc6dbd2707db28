"""pytest plugin of the case matrix: options, parametrisation, per-worker case cache, merge.

Options: --backend NAME|package.module:callable (repeatable), --profile quick|full,
--seeds N, --results-dir DIR, --device cpu|cuda, --chunk-rows N.
Every cell of a case is pinned to one xdist worker (``xdist_group``) so the case's
goldens are computed once, in one pass shared by its backends.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

DEFAULT_BACKENDS = ("pypto", "torch-eager")   # the operator under test beside PyTorch's own


def pytest_addoption(parser):
    group = parser.getgroup("swiglu", "fused SwiGLU backward accuracy matrix")
    group.addoption("--backend", action="append", default=None, metavar="NAME",
                    help="backend to validate: a registered name (torch-eager, torch-compile, pypto, "
                         "pypto-hardened, triton, triton-atomic, tiled-emulation) or package.module:callable; "
                         f"repeatable (default: {', '.join(DEFAULT_BACKENDS)})")
    group.addoption("--profile", choices=("quick", "full"), default="quick",
                    help="quick: every M edge and scale at least once (CI); full: the cross product")
    group.addoption("--seeds", type=int, default=1, metavar="N", help="run each case over N seeds")
    group.addoption("--results-dir", default="results", metavar="DIR",
                    help="where per-worker JSON shards and the merged results.json go (default: results)")
    group.addoption("--report-dir", default=None, metavar="DIR",
                    help="write the HTML report (index.html + PNG plots) of this session's results here")
    group.addoption("--baseline", default=None, metavar="DIR",
                    help="a previous --results-dir: the report lists new/fixed failures and worse metrics")
    group.addoption("--device", default="cpu", help="device the inputs, backends and goldens run on (cpu, cuda)")
    group.addoption("--chunk-rows", type=int, default=8192, metavar="N",
                    help="rows per streaming chunk of the goldens (memory vs. speed)")


def pytest_configure(config):
    if config.getoption("--seeds", default=1) < 1:
        raise pytest.UsageError("--seeds must be >= 1")
    # group cells of one case on one worker; harmless without xdist
    if hasattr(config.option, "dist") and config.option.dist in ("load", "no") and getattr(
            config.option, "numprocesses", None):
        config.option.dist = "loadgroup"


def selected_backends(config):
    from kernels.registry import BackendNotFound, resolve
    names = config.getoption("--backend") or list(DEFAULT_BACKENDS)
    try:
        return [resolve(n) for n in dict.fromkeys(names)]
    except BackendNotFound as exc:
        raise pytest.UsageError(str(exc)) from exc


def pytest_generate_tests(metafunc):
    if "cell" not in metafunc.fixturenames:
        return
    from cases.matrix import LARGE_M, M_EDGES, PROFILES, SEED_CASE
    config = metafunc.config
    backends = selected_backends(config)
    cases = PROFILES[config.getoption("--profile")](config.getoption("--seeds"))
    params = []
    for spec in cases:
        marks = [pytest.mark.xdist_group(spec.id), pytest.mark.matrix]
        if spec.m >= LARGE_M:
            marks.append(pytest.mark.large)
        if spec in (SEED_CASE,):
            marks.append(pytest.mark.seed_case)
        if spec.m in M_EDGES:
            marks.append(pytest.mark.edge)
        for b in backends:
            params.append(pytest.param((spec, b), id=f"{spec.id}-{b.name}", marks=marks))
    metafunc.parametrize("cell", params)


def pytest_collection_modifyitems(session, config, items):
    # which backends each case will run on this session, after -k / deselection
    cells: dict[str, list] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec and "cell" in callspec.params:
            spec, backend = callspec.params["cell"]
            cells.setdefault(spec.id, []).append(backend)
    config.stash[CELLS] = cells


CELLS = pytest.StashKey[dict]()


def _worker(config) -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def run_id(config) -> str:
    """One id per session, shared with xdist workers, so shards of older runs never mix in."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return workerinput["swiglu_run_id"]
    if RUN_ID not in config.stash:
        config.stash[RUN_ID] = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    return config.stash[RUN_ID]


RUN_ID = pytest.StashKey[str]()


MANIFEST = pytest.StashKey[dict]()


def run_manifest(config) -> dict:
    """The run's manifest (``accuracy.manifest``), built once by the controller and handed to
    xdist workers, so every cell's expectations are judged on the same measured facts."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "swiglu_manifest" in workerinput:
        return workerinput["swiglu_manifest"]
    if MANIFEST not in config.stash:
        from accuracy.manifest import build
        config.stash[MANIFEST] = build(config.getoption("--device"))
    return config.stash[MANIFEST]


def platform_facts(config) -> dict:
    return run_manifest(config)["facts"]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["swiglu_run_id"] = run_id(node.config)
    node.workerinput["swiglu_manifest"] = run_manifest(node.config)


def shard_dir(config) -> Path:
    return Path(config.getoption("--results-dir")) / "shards" / run_id(config)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):
        return   # workers write shards; the controller merges once
    shards = shard_dir(config)
    if shards.exists():
        from accuracy.results import merge
        config.stash[MERGED] = merge(shards, Path(config.getoption("--results-dir")) / "results.json",
                                     manifest=run_manifest(config))
        report_dir = config.getoption("--report-dir")
        if report_dir:
            try:
                from reports import render
                config.stash[REPORT] = str(render(config.getoption("--results-dir"), report_dir,
                                                  baseline=config.getoption("--baseline")))
            except Exception as exc:   # the verdicts stand; say loudly that the page is missing
                config.stash[REPORT] = f"FAILED to render the report: {type(exc).__name__}: {exc}"
        for old in shards.parent.iterdir():
            if old != shards:
                shutil.rmtree(old, ignore_errors=True)


MERGED = pytest.StashKey[Path]()
REPORT = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    manifest = config.stash.get(MANIFEST, None)
    if manifest is not None:
        facts = ", ".join(f"{k}={v}" for k, v in manifest["facts"].items())
        terminalreporter.write_sep("-", f"platform facts: {facts}")
    path = config.stash.get(MERGED, None)
    if path is not None:
        terminalreporter.write_sep("-", f"accuracy results: {path}")
    report = config.stash.get(REPORT, None)
    if report is not None:
        terminalreporter.write_sep("-", f"accuracy report: {report}")
