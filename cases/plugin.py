"""pytest plugin of the case matrix: options, parametrisation, per-worker case cache, merge.

Options: --operator NAME (an operator under test, repeatable; default the SwiGLU backward), --backend
NAME|package.module:callable (repeatable), --profile quick|full|none, --case SIZES,SCALE[,SEED]
and --inputs FILE.safetensors (repeatable), --seeds N, --results-dir DIR, --device cpu|cuda,
--chunk-rows N, --failed-only RESULTS, --resume RUN (``runs.resume``), --save-failing DIR
(``cases.save_failing``).
Every cell of a case is scheduled to one xdist worker (``cases.scheduling``) so the case's
goldens are computed once, in one pass shared by its backends, and no worker waits on another.

The operators are looked up here, at the edge, once per process (``run_operators``), and reach
everything below as values: each case carries the name of its operator.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import pytest

import operators
from accuracy.dual import DEFAULT_BENCHMARK
from cases.devices import describe as describe_devices
from cases.devices import worker_device
from cases.evaluate import ScheduleError, declared_schedule
from cases.loop_drift import applies as loop_drift_applies
from cases.matrix import LARGE_M, CaseSyntaxError, acceptance_case
from cases import progress
from cases.scheduling import CaseScheduling, add_group_suffixes, cell_param
from cases.matrix import planned_cases as plan
from cases.shards import assignment
from cases.spec import InputsFileError
from runs.summary import cell_verdicts, summary_lines
from kernels.isolated import ChildStartError, check_import
from kernels.sealed_state import FRAMEWORK_PACKAGES
from kernels.registry import BackendNotFound, current_path, resolve
from goldens.heap import keep_freed_memory
from runs.idle_threads import sleep_while_waiting
from runs.manifest import build as build_manifest
from runs.manifest import source_digest
from runs.output_paths import OutputPathError, output_folder, probe_writable
from runs.results import (DRIFT_STUDIES, ResultsNotFound, load_records, load_results, merge, point_latest,
                          prune_finished, run_dir, write_started)
from runs.resume import ResumedRun, carry_over, load_resumed, manifest_mismatch


def pytest_addoption(parser):
    group = parser.getgroup("accuracy", "accuracy matrix of a fused BF16 operator")
    group.addoption("--operator", action="append", default=None, metavar="NAME",
                    help=f"an operator under test: a registered name ({', '.join(sorted(operators.OPERATORS))}) "
                         f"or the import path of a package with an OPERATOR; repeatable: one run, one results "
                         f"file and one report for all of them (default: {operators.DEFAULT})")
    group.addoption("--backend", action="append", default=None, metavar="NAME",
                    help="backend to validate: a name the operator registers (SwiGLU: torch-eager, torch-compile, "
                         "pypto, pypto-hardened, triton, triton-atomic, tiled-emulation) or "
                         "package.module:callable; repeatable (default: the operator's default backends; "
                         "SwiGLU: pypto, torch-eager)")
    group.addoption("--profile", choices=("quick", "full", "none"), default="quick",
                    help="quick: every M edge and scale at least once (CI); full: the cross product; "
                         "none: only the --case cases")
    group.addoption("--case", action="append", default=[], metavar="[OPERATOR:]SIZES,SCALE[,SEED]",
                    help="add a case (repeatable): the operator's dimension sizes in its order, a scale profile "
                         "and a seed, e.g. a production SwiGLU shape: --case 8192,4096,11008,unit (M,K,N); "
                         "gated and reported like the matrix's own; in a run of several operators, prefix it with one "
                         "(--case rmsnorm_backward:1025,1024,unit) or it applies to each")
    group.addoption("--inputs", action="append", default=[], metavar="FILE.safetensors",
                    help="add a case whose inputs are this file's tensors (the operator's input names, BF16; "
                         "e.g. activations captured in a model); repeatable")
    group.addoption("--seeds", type=int, default=1, metavar="N", help="run each case over N seeds")
    group.addoption("--results-dir", default="results", metavar="DIR",
                    help="results directory: each run writes runs/<run>/ (shards, results.json) and points "
                         "'latest' at it when it ends (default: results)")
    group.addoption("--report-dir", default=None, metavar="DIR",
                    help="write the HTML report (index.html + PNG plots) of this session's results here")
    group.addoption("--baseline", default=None, metavar="DIR",
                    help="a previous --results-dir: the report lists new/fixed failures and worse metrics")
    group.addoption("--failed-only", default=None, metavar="RESULTS",
                    help="run only the cells (case, backend) that did not pass in that run (failed, errored, "
                         "crashed, timed out, or a known failure that passed): a results directory, run folder "
                         "or results file; the other options plan the matrix as usual")
    group.addoption("--resume", default=None, metavar="RUN",
                    help="continue a run that did not finish (its controller killed): run only the cells "
                         "(case, backend) RUN has no record for, and write a new run holding RUN's records and "
                         "the new ones; RUN: a results directory (its newest run, finished or not), a run folder "
                         "or results file; its manifest must match this run's (operators, profile, selection, "
                         "framework commit)")
    group.addoption("--save-failing", default=None, metavar="DIR",
                    help="for every failing cell (a gated output failed, errored, crashed or timed out) write "
                         "DIR/<case id>/<backend>/: the case's inputs and the backend's outputs as safetensors, the "
                         "cell's records and rerun.sh, its verdict again from those files with --inputs; DIR must "
                         "not be a results directory or run folder")
    group.addoption("--device", default="cpu", help="device the inputs, backends and goldens run on (cpu, cuda)")
    group.addoption("--cell-timeout", type=float, default=1800.0, metavar="SECONDS",
                    help="longest a backend call may take before its process is killed and the cell recorded "
                         "timed_out (default 1800: the pypto CPU interpreter needs ~9 min at M=220000)")
    group.addoption("--progress-after", type=float, default=progress.QUIET_SECONDS, metavar="SECONDS",
                    help="a case's evaluation running longer than this reports its stages and rows done, elapsed "
                         "and left, in RUN/progress.log and on the terminal (default %(default)s)")
    group.addoption("--repeats", type=int, default=1, metavar="N",
                    help="run each backend N times per case: records bit-identity and spread, and an output "
                         "passes only if every repeat passes (default 1)")
    group.addoption("--no-isolation", action="store_true",
                    help="run backends in the worker process instead of a child process each (a crash then "
                         "takes the worker down)")
    group.addoption("--chunk-rows", type=int, default=None, metavar="N",
                    help="rows per streaming chunk of the goldens, rounded up to whole 1024-row blocks "
                         "(default 2048, the fastest and smallest measured at the article's case; fewer "
                         "for row outputs wider than 4096: goldens/stream.py)")
    group.addoption("--benchmark", default=DEFAULT_BENCHMARK, metavar="NAME",
                    help="the trusted backend of the dual-benchmark verdict (msprobe's error ratios); it runs at "
                         "every case even when not listed with --backend; 'none' turns the dual verdict off "
                         "(default: torch-eager)")
    group.addoption("--num-shards", type=int, default=1, metavar="N",
                    help="split the matrix into N deterministic shards by case (cases/shards.py); with --shard-id")
    group.addoption("--shard-id", type=int, default=0, metavar="I",
                    help="run shard I of --num-shards (0-based): every cell of its cases, nothing else")
    group.addoption("--shard-durations", default=None, metavar="RESULTS",
                    help="balance the shards by the case durations of a previous run (a results directory, "
                         "run folder or results file) instead of by hash")
    group.addoption("--gate", choices=("absolute", "dual", "both"), default="absolute",
                    help="the verdict a cell is gated on: absolute (the operator's rtol/atol criterion with the "
                         "allowance of its legitimate choices), dual (msprobe's ratios to --benchmark), or both "
                         "(default: absolute)")
    group.addoption("--drift-seeds", type=int, default=DRIFT_SEEDS, metavar="N",
                    help="seeds of the drift study a run with --report-dir makes beside its cells for the "
                         f"report's drift figure (default {DRIFT_SEEDS}; 0: none)")


# The drift study a report gets from its own run: every M of the operator's study grid at its
# acceptance profile, 3 seeds (34 s of one core for SwiGLU at K=64, N=128). Its crossings are
# those of the 20-seed study within its bracket of M or the next (db 48,662 against 44,935;
# dw 39,478 against 31,737, docs/drift/drift.md): bands over 3 seeds are their extremes.
DRIFT_SEEDS = 3

# Upper bounds of the numeric options, each far above any real use and low enough that a typo
# (an extra zero or ten) is refused instead of planning for hours or days:
MAX_SEEDS = 10_000                # the false-alarm studies use 200; 10^4 seeds x the quick profile is days
MAX_REPEATS = 1_000
MAX_CELL_TIMEOUT = 7 * 24 * 3600.0    # a week
MAX_CHUNK_ROWS = 1 << 20          # 2^20 rows of a [M, 11008] FP64 chunk is 92 GB
MAX_SHARDS = 100_000
MAX_CELLS = 1_000_000             # planned case x backend cells of one run


def _check_range(option: str, value, low, high) -> None:
    if value is None:
        return
    if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
        raise pytest.UsageError(f"{option} must be >= {low:g} and at most {high:g} (finite), got {value!r}")


def pytest_configure(config):
    run_operators(config)
    failed_cells(config)           # an unreadable --failed-only run stops here, naming it
    resumed_run(config)            # so does an unreadable --resume run
    if os.environ.get("ACCURACY_OPERATOR") and not hasattr(config, "workerinput"):
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            "$ACCURACY_OPERATOR is no longer read: name the operators with --operator (repeatable)"), stacklevel=2)
    _check_range("--seeds", config.getoption("--seeds", default=1), 1, MAX_SEEDS)
    _check_range("--repeats", config.getoption("--repeats", default=1), 1, MAX_REPEATS)
    _check_range("--drift-seeds", config.getoption("--drift-seeds", default=DRIFT_SEEDS), 0, MAX_SEEDS)
    timeout = config.getoption("--cell-timeout", default=1800.0)
    if not (math.isfinite(timeout) and timeout > 0):
        raise pytest.UsageError(f"--cell-timeout must be a finite number of seconds > 0, got {timeout!r}")
    _check_range("--cell-timeout", timeout, 0, MAX_CELL_TIMEOUT)
    _check_range("--chunk-rows", config.getoption("--chunk-rows", default=None), 1, MAX_CHUNK_ROWS)
    _check_range("--progress-after", config.getoption("--progress-after", default=progress.QUIET_SECONDS), 0,
                 MAX_CELL_TIMEOUT)
    shards, shard_id = config.getoption("--num-shards", default=1), config.getoption("--shard-id", default=0)
    _check_range("--num-shards", shards, 1, MAX_SHARDS)
    if not 0 <= shard_id < shards:
        raise pytest.UsageError(f"--shard-id must be in [0, --num-shards) and --num-shards >= 1, got "
                                f"--shard-id {shard_id} --num-shards {shards}")
    durations = config.getoption("--shard-durations", default=None)
    if durations is not None and not Path(durations).exists():
        raise pytest.UsageError(f"--shard-durations {durations}: no such results directory, run folder or file")
    if config.getoption("--profile", default="quick") == "none" and not (
            config.getoption("--case", default=None) or config.getoption("--inputs", default=None)):
        raise pytest.UsageError("--profile none plans only the --case and --inputs cases, and none was given")
    if config.getoption("--gate", default="absolute") != "absolute" and benchmark_name(config) is None:
        raise pytest.UsageError(f"--gate {config.getoption('--gate')} needs a benchmark; --benchmark none turns it off")
    # every process that streams goldens (the controller without xdist, each xdist worker)
    keep_freed_memory()
    # group cells of one case on one worker (``pytest_xdist_make_scheduler``); harmless without xdist
    if hasattr(config.option, "dist") and config.option.dist in ("load", "no") and getattr(
            config.option, "numprocesses", None):
        config.option.dist = "loadgroup"
    if not hasattr(config, "workerinput"):
        # before xdist starts the workers: they inherit it (``runs.idle_threads``)
        workers = getattr(config.option, "numprocesses", None)
        sleep_while_waiting(workers if isinstance(workers, int) else 0)
    if getattr(config, "workerinput", {}).get("swiglu_loadgroup"):
        # a worker decided from its own command line, before this hook, that it is no loadgroup
        # worker (xdist's ``setup_config``); its controller says otherwise
        config.option.loadgroup = True
    if not hasattr(config, "workerinput"):
        _check_device(config.getoption("--device"))
        for operator in run_operators(config):
            _check_imports_apart(config, operator)
            for backend in selected_backends(config, operator):   # bad import paths and schedules stop the run here
                try:
                    declared_schedule(operator, backend)
                except ScheduleError as exc:
                    raise pytest.UsageError(str(exc)) from exc
        config.stash[RESULTS_ROOT] = _writable_root(config.getoption("--results-dir"))
        baseline = config.getoption("--baseline")
        if baseline and Path(baseline).resolve() == config.stash[RESULTS_ROOT]:
            raise pytest.UsageError(f"--baseline {baseline} is this run's own --results-dir: a run compared "
                                    f"with itself shows no change; give a previous run's results directory")
        _check_report_paths(config)
        _check_resume(config)
        config.stash[SAVE_FAILING] = _save_failing_folder(config)


def _check_report_paths(config) -> None:
    """--report-dir and --baseline before any case runs: a report that cannot be written or a
    baseline that cannot be read would otherwise be found out only at the end of the run."""
    report_dir = config.getoption("--report-dir")
    if report_dir:
        try:
            output_folder(report_dir, "--report-dir")
        except OutputPathError as exc:
            raise pytest.UsageError(str(exc)) from exc
    baseline = config.getoption("--baseline")
    if baseline:
        if not report_dir:
            raise pytest.UsageError("--baseline needs --report-dir: the diff is a section of the report")
        try:
            load_results(baseline)
        except ResultsNotFound as exc:
            raise pytest.UsageError(f"--baseline {baseline}: {exc}") from exc


def _check_resume(config) -> None:
    """The run being resumed must have been planned and judged as this one will be."""
    resumed = resumed_run(config)
    if resumed is None:
        return
    mismatch = manifest_mismatch(resumed.manifest, run_manifest(config))
    if mismatch is not None:
        raise pytest.UsageError(f"--resume {config.getoption('--resume')} ({resumed.source}): {mismatch}")


def _save_failing_folder(config) -> Path | None:
    """--save-failing DIR, absolute, checked before any case runs: never a run's folder or results."""
    option = config.getoption("--save-failing", default=None)
    if option is None:
        return None
    folder = Path(option).resolve()
    if folder == config.stash[RESULTS_ROOT]:
        raise pytest.UsageError(f"--save-failing {option}: is this run's --results-dir; give a folder of its own")
    try:
        output_folder(folder, "--save-failing")
    except OutputPathError as exc:
        raise pytest.UsageError(str(exc)) from exc
    return folder


SAVE_FAILING = pytest.StashKey[object]()


def save_failing_root(config) -> Path | None:
    """Where failing cells are saved (``cases.save_failing``), in the controller and every worker."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        root = workerinput.get("swiglu_save_failing")
        return None if root is None else Path(root)
    return config.stash.get(SAVE_FAILING, None)


OPERATORS = pytest.StashKey[list]()


def run_operators(config) -> list:
    """The run's operators (``contract.operator.Operator`` values), in --operator order, each once;
    the SwiGLU backward when none is named. An unknown name stops the run, naming it."""
    if OPERATORS not in config.stash:
        names = list(dict.fromkeys(config.getoption("--operator", default=None) or [operators.DEFAULT]))
        try:
            config.stash[OPERATORS] = [operators.get(name) for name in names]
        except operators.OperatorNotFound as exc:
            raise pytest.UsageError(f"--operator: {exc}") from exc
    return config.stash[OPERATORS]


def operator_keys(config) -> list[str]:
    """The names the run's operators are found by (``operators.key``)."""
    return [operators.key(op) for op in run_operators(config)]


def _check_device(device: str) -> None:
    kind = device.split(":")[0]
    if kind == "cpu":
        return
    if kind == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise pytest.UsageError(f"--device {device}: no CUDA device is present on this machine")
        return
    if kind == "npu":
        try:
            import torch
            import torch_npu  # noqa: F401  (registers torch.npu)
            if torch.npu.is_available():
                return
        except ImportError as exc:
            raise pytest.UsageError(f"--device {device}: torch_npu does not import ({exc})") from exc
        raise pytest.UsageError(f"--device {device}: no NPU is present on this machine")
    raise pytest.UsageError(f"--device {device}: unknown device kind {kind!r} (cpu, cuda, npu)")


def _writable_root(path: str) -> Path:
    root = Path(path).resolve()    # absolute now: a backend that changes directory cannot move it
    try:
        probe_writable(root)
    except OSError as exc:
        raise pytest.UsageError(f"--results-dir {path}: not a writable directory ({exc})") from exc
    return root


RESULTS_ROOT = pytest.StashKey[Path]()


def benchmark_name(config) -> str | None:
    """The dual verdict's benchmark backend, or None (``--benchmark none``)."""
    name = config.getoption("--benchmark", default=DEFAULT_BENCHMARK)
    return None if name in (None, "none") else name


def gate_line(config) -> str:
    """Which verdict the cells were gated on, and by which benchmark."""
    gate, bench = config.getoption("--gate", default="absolute"), benchmark_name(config)
    if gate == "absolute":
        return ("gate: absolute (the operator's rtol/atol criterion with its allowance)"
                + (f"; dual-benchmark ratios to {bench!r} recorded, not gated" if bench else ""))
    return (f"gate: {gate} ({'both the absolute gate and ' if gate == 'both' else ''}msprobe's ratios to the "
            f"benchmark {bench!r}); {bench!r} itself is judged by the absolute gate alone")


def backend_names(config, operator=None) -> list[str]:
    """The backends of every case of ``operator`` (default: the run's first): the selected ones,
    else the operator's defaults, then the benchmark if it is not among them."""
    operator = operator or run_operators(config)[0]
    names = list(dict.fromkeys(config.getoption("--backend") or list(operator.default_backends)))
    bench = benchmark_name(config)
    return names + [bench] if bench is not None and bench not in names else names


def acceptance_backend_names(config, operator) -> list[str]:
    """The backends a run without --backend adds at ``operator``'s acceptance case alone
    (``Operator.acceptance_backends``: its reference schedules' emulations)."""
    if config.getoption("--backend", default=None):
        return []
    chosen = backend_names(config, operator)
    return [n for n in operator.acceptance_backends if n not in chosen]


def case_backend_names(config, spec) -> list[str]:
    """The backends of one case: the run's, and at its operator's acceptance case the additions."""
    operator = spec.declaration
    extra = acceptance_backend_names(config, operator) if spec == acceptance_case(operator) else []
    return backend_names(config, operator) + extra


def all_backend_names(config) -> list[str]:
    """Every operator's backend names, each once, in run order."""
    return list(dict.fromkeys(n for op in run_operators(config) for n in backend_names(config, op)))


def selected_backends(config, operator, names=None):
    """The backends ``names`` (default: the run's for every case of ``operator``), resolved."""
    try:
        return [resolve(operator, n) for n in (backend_names(config, operator) if names is None else names)]
    except BackendNotFound as exc:
        raise pytest.UsageError(str(exc)) from exc


PROJECT_PACKAGES = FRAMEWORK_PACKAGES + ("kernels",)     # the registered backends live here


def _check_imports_apart(config, operator) -> None:
    """Each backend module this process does not hold yet imported in a child first, when cells run
    isolated: one that exits, hangs or crashes as it imports stops the run with its reason, not
    the run itself without a record (``kernels.isolated.check_import``)."""
    if config.getoption("--no-isolation") or str(config.getoption("--device")).split(":")[0] != "cpu":
        return
    for name in backend_names(config, operator):
        path = current_path(operator.backends.get(name, name))
        module = path.partition(":")[0]
        if ":" not in path or not module or module in sys.modules or module.split(".")[0] in PROJECT_PACKAGES:
            continue
        try:
            check_import(name, path)
        except ChildStartError as exc:
            raise pytest.UsageError(str(exc)) from exc


PLANNED_CASES = pytest.StashKey[list]()


def planned_cases(config) -> list:
    """The run's cases: the profile's, every --case and every --inputs file (a malformed one stops
    the run, naming it); planned once per process (a file is read and hashed once)."""
    if PLANNED_CASES not in config.stash:
        config.stash[PLANNED_CASES] = _plan_cases(config)
    return config.stash[PLANNED_CASES]


def _plan_cases(config) -> list:
    cases, cells, seen = [], 0, {}
    for operator in run_operators(config):
        try:
            mine = plan(operator, config.getoption("--profile"), config.getoption("--seeds"),
                        _addressed_to(config, operator, "--case"), _addressed_to(config, operator, "--inputs"))
        except (CaseSyntaxError, InputsFileError) as exc:
            prefix = f"--operator {operator.name}: " if len(run_operators(config)) > 1 else ""
            raise pytest.UsageError(prefix + str(exc)) from exc
        for spec in mine:       # a record is found by its case id: one id, one operator
            if spec.id in seen:
                raise pytest.UsageError(f"case {spec.id} is planned for operators {seen[spec.id]!r} and "
                                        f"{operator.name!r}: a run's case ids must name one operator each")
            seen[spec.id] = operator.name
        cases += mine
        cells += sum(len(case_backend_names(config, spec)) for spec in mine)
    if cells > MAX_CELLS:
        raise pytest.UsageError(f"the plan has {cells} cells ({len(cases)} cases x their backends), more than "
                                f"{MAX_CELLS}: fewer --seeds or a smaller profile")
    return cases


def _addressed_to(config, operator, option: str) -> tuple[str, ...]:
    """The values of ``option`` (--case, --inputs) for ``operator``: those prefixed with its name
    (``rmsnorm_backward:1025,1024,unit``) and the unprefixed ones (every operator of the run)."""
    names = {n for op in run_operators(config) for n in (op.name, operators.key(op))}
    mine = []
    for text in config.getoption(option, default=None) or ():
        prefix, sep, rest = text.partition(":")
        if sep and prefix in names:
            if prefix in (operator.name, operators.key(operator)):
                mine.append(rest)
        elif sep and option == "--case":
            raise pytest.UsageError(f"--case {text!r}: {prefix!r} is not an operator of this run "
                                    f"({', '.join(sorted(names))})")
        else:
            mine.append(text)
    return tuple(mine)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    """The drift studies (``cases/test_drift_figure.py``) are made for a report: a run without
    --report-dir, or with --drift-seeds 0, does not collect them."""
    if name in ("test_drift_study", "test_loop_drift_study") and collector.name == "test_drift_figure.py":
        config = collector.config
        if not config.getoption("--report-dir", default=None) or not config.getoption("--drift-seeds", default=0):
            return []
        # the loop study only for a run with an operator it applies to (attention), not as an empty skip
        if name == "test_loop_drift_study" and not any(loop_drift_applies(op.one_head) for op in run_operators(config)):
            return []
    return None


def pytest_generate_tests(metafunc):
    if "study_operator" in metafunc.fixturenames:
        # an operator over heads shares its one-head operator's study (drift is per head)
        keys = list(dict.fromkeys(operators.key(op.one_head) for op in run_operators(metafunc.config)
                                  if op.reduction_outputs))
        metafunc.parametrize("study_operator", [pytest.param(k, id=k, marks=pytest.mark.xdist_group(f"drift-{k}"))
                                                for k in keys])
    if "loop_operator" in metafunc.fixturenames:
        keys = list(dict.fromkeys(operators.key(op.one_head) for op in run_operators(metafunc.config)
                                  if loop_drift_applies(op.one_head)))
        metafunc.parametrize("loop_operator", [pytest.param(k, id=k, marks=pytest.mark.xdist_group(f"loop-drift-{k}"))
                                               for k in keys])
    if "cell" not in metafunc.fixturenames:
        return
    config = metafunc.config
    cases = planned_cases(config)
    params = []
    for spec in cases:
        operator = spec.declaration
        marks = [pytest.mark.xdist_group(spec.id), pytest.mark.matrix]
        if spec.m >= LARGE_M:
            marks.append(pytest.mark.large)
        if spec == acceptance_case(operator):
            marks.append(pytest.mark.seed_case)
        if spec.m in operator.m_edges:
            marks.append(pytest.mark.edge)
        for b in selected_backends(config, operator, case_backend_names(config, spec)):
            params.append(pytest.param((spec, b), id=f"{spec.id}-{b.name}", marks=marks))
    metafunc.parametrize("cell", params)


def _cell_of(item) -> tuple[str, str] | None:
    """(case id, backend name) of a cell of the matrix; None for any other test."""
    callspec = getattr(item, "callspec", None)
    if callspec and "cell" in callspec.params:
        spec, backend = callspec.params["cell"]
        return spec.id, backend.name
    return None


def _case_of(item) -> str | None:
    cell = _cell_of(item)
    return None if cell is None else cell[0]


def _keep(config, items: list, wanted) -> None:
    """Deselect the items ``wanted(item)`` refuses, in place."""
    keep, dropped = [], []
    for it in items:
        (keep if wanted(it) else dropped).append(it)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def shard_assignment(config, case_ids) -> dict[str, int] | None:
    """Case id -> shard (``cases.shards``), or None when the run is not sharded."""
    shards = config.getoption("--num-shards", default=1)
    if shards <= 1:
        return None
    return assignment(case_ids, shards, config.getoption("--shard-durations", default=None))


FAILED_CELLS = pytest.StashKey[object]()
# a cell's statuses (its worst output's, ``runs.summary.cell_verdicts``) that --failed-only reruns
NOT_PASSED = ("fail", "error", "unexpected_pass", "crashed", "timed_out")


def failed_cells(config) -> set[tuple[str, str]] | None:
    """The (case id, backend) cells that did not pass in the --failed-only run; None without the option."""
    if FAILED_CELLS not in config.stash:
        source = config.getoption("--failed-only", default=None)
        cells = None
        if source is not None:
            try:
                records = load_records(source)
            except ResultsNotFound as exc:
                raise pytest.UsageError(f"--failed-only {source}: {exc}") from exc
            cells = {key for key, status in cell_verdicts(records).items() if status in NOT_PASSED}
        config.stash[FAILED_CELLS] = cells
    return config.stash[FAILED_CELLS]


RESUMED = pytest.StashKey[object]()


def resumed_run(config) -> ResumedRun | None:
    """The --resume run, read once per process (workers read the run the controller resolved, so a
    results directory's newest run is the same one everywhere); None without the option."""
    if RESUMED not in config.stash:
        workerinput = getattr(config, "workerinput", None)
        source = (workerinput.get("swiglu_resume") if workerinput is not None
                  else config.getoption("--resume", default=None))
        run = None
        if source is not None:
            try:
                run = load_resumed(source)
            except ResultsNotFound as exc:
                raise pytest.UsageError(f"--resume {source}: {exc}") from exc
        config.stash[RESUMED] = run
    return config.stash[RESUMED]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if hasattr(config, "workerinput") and config.getvalue("loadgroup"):
        # a matrix cell keeps its plain id (what a user copies to rerun it): the scheduler finds
        # its case from the id itself
        add_group_suffixes([item for item in items if _cell_of(item) is None])
    # this shard's cases (the same assignment on every worker and machine: it depends on the ids)
    assignment = shard_assignment(config, [c for c in map(_case_of, items) if c is not None])
    if assignment is not None:
        mine = config.getoption("--shard-id")
        # tests that are not cells of the matrix run once, in shard 0
        _keep(config, items, lambda it: assignment.get(_case_of(it), 0) == mine)
    failed = failed_cells(config)
    if failed is not None:      # the cells that did not pass in that run (tests that are not cells stay)
        _keep(config, items, lambda it: (cell := _cell_of(it)) is None or cell in failed)
    resumed = resumed_run(config)
    if resumed is not None:     # the cells the resumed run has no record for
        _keep(config, items, lambda it: (cell := _cell_of(it)) is None or cell not in resumed.done)
    # which backends each case will run on this session, after -k / -m deselection (trylast)
    if not hasattr(config, "workerinput"):
        _record_planned(config, [item.nodeid for item in items])
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
    """The run's manifest (``runs.manifest``), built once by the controller and handed to
    xdist workers, so every cell's expectations are judged on the same measured facts."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "swiglu_manifest" in workerinput:
        return workerinput["swiglu_manifest"]
    if MANIFEST not in config.stash:
        manifest = build_manifest(config.getoption("--device"))
        manifest["selection"] = run_selection(config)
        manifest["devices"] = describe_devices(config.getoption("--device"))
        config.stash[MANIFEST] = manifest
    return config.stash[MANIFEST]


def kernel_sources(config) -> dict[str, str | None]:
    """Each backend of the run by the digest of the file that defines it (``runs.manifest.source_digest``):
    a kernel edited between a run and its --resume, or between shards, is refused by name."""
    sources = {}
    for spec in planned_cases(config):
        for b in selected_backends(config, spec.declaration, case_backend_names(config, spec)):
            if b.name not in sources:
                named = (b.path or "").partition(":")[0]
                sources[b.name] = source_digest([m for m in (named, getattr(b.fn, "__module__", None)) if m])
    return sources


def run_selection(config) -> dict:
    """What decides the run's plan: a merge of shards checks that every shard agrees on it."""
    keys = operator_keys(config)
    several = {"case_operators": {c.id: c.operator for c in planned_cases(config)}} if len(keys) > 1 else {}
    return {**several, "operator": keys[0] if len(keys) == 1 else keys, "profile": config.getoption("--profile"), "seeds": config.getoption("--seeds"),
            "cases": list(config.getoption("--case", default=None) or ()),
            "inputs": [c.id for c in planned_cases(config) if c.inputs_file is not None],
            "backends": all_backend_names(config), "benchmark": benchmark_name(config),
            "kernel_sources": kernel_sources(config),
            "acceptance_backends": list(dict.fromkeys(n for op in run_operators(config)
                                                      for n in acceptance_backend_names(config, op))),
            "gate": config.getoption("--gate"), "failed_only": config.getoption("--failed-only", default=None),
            "repeats": config.getoption("--repeats", default=1),
            "resume": config.getoption("--resume", default=None),
            "markexpr": config.getoption("markexpr", default="") or "",
            "keyword": config.getoption("keyword", default="") or "",
            "shard": {"id": config.getoption("--shard-id"), "count": config.getoption("--num-shards"),
                      "durations": config.getoption("--shard-durations")}}


DEVICE = pytest.StashKey[str]()


def case_device(config) -> str:
    """This process's device for ``--device`` (``cases.devices``): one per xdist worker."""
    if DEVICE not in config.stash:
        config.stash[DEVICE] = worker_device(config.getoption("--device"), os.environ.get("PYTEST_XDIST_WORKER"))
    return config.stash[DEVICE]


def platform_facts(config) -> dict:
    return run_manifest(config)["facts"]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["swiglu_run_id"] = run_id(node.config)
    node.workerinput["swiglu_manifest"] = run_manifest(node.config)
    node.workerinput["swiglu_results_root"] = str(results_root(node.config))
    save_root = save_failing_root(node.config)
    node.workerinput["swiglu_save_failing"] = None if save_root is None else str(save_root)
    resumed = resumed_run(node.config)
    node.workerinput["swiglu_resume"] = None if resumed is None else str(resumed.source)
    node.workerinput["swiglu_loadgroup"] = node.config.option.dist == "loadgroup"


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        run_manifest(session.config)    # measured before any test can change the process
        if _distributed(session.config):
            # the workers' progress lines, on the controller's terminal as they come
            session.config.stash[FOLLOWER] = progress.Follower(run_folder(session.config) / progress.FILE,
                                                               _terminal_writer(session.config)).start()


FOLLOWER = pytest.StashKey[progress.Follower]()


def _distributed(config) -> bool:
    """Cells run in xdist workers, not in this process."""
    return getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "tx", None))


def _terminal_writer(config):
    """A line on the terminal, outside any test's captured output."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def line_alone(line: str) -> None:
        # a line of its own even after a line of progress dots, which the reporter does not track
        if getattr(terminal._tw, "width_of_current_line", 0):
            terminal._tw.line()
        terminal.write_line(line)

    def write(line: str) -> None:
        if terminal is None:
            return
        if capture is None:
            line_alone(line)
            return
        with capture.global_and_fixture_disabled():
            line_alone(line)
    return write


def case_progress(config, case: str) -> progress.CaseProgress:
    """A case's progress lines: appended to the run folder's ``progress.log`` (by any process), and
    on the terminal where this process runs the cells itself."""
    path = run_folder(config) / progress.FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    to_file = progress.to_file(path)
    quiet = config.getoption("--progress-after")
    if hasattr(config, "workerinput") or _distributed(config):
        return progress.CaseProgress(case, to_file, quiet=quiet)
    terminal = _terminal_writer(config)

    def both(line: str) -> None:
        to_file(line)
        terminal(f"progress: {line}")
    return progress.CaseProgress(case, both, quiet=quiet)


def results_root(config) -> Path:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return Path(workerinput["swiglu_results_root"])
    return config.stash[RESULTS_ROOT]


def run_folder(config) -> Path:
    return run_dir(results_root(config), run_id(config))


def shard_dir(config) -> Path:
    return run_folder(config) / "shards"


PLANNED = pytest.StashKey[list]()


def _param_cells(config) -> dict[str, tuple[str, str]]:
    """Test parameter id -> (case id, backend name), for every cell the options can produce."""
    cases = planned_cases(config)
    return {f"{spec.id}-{b}": (spec.id, b) for spec in cases for b in case_backend_names(config, spec)}


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """``loadgroup`` scheduling that keeps a case's cells together (``cases.scheduling``)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    cells = _param_cells(config)
    return CaseScheduling(config, log, case_of=lambda param: cells[param][0] if param in cells else None)


def _record_planned(config, nodeids) -> None:
    cells = _param_cells(config)
    resumed = resumed_run(config)
    # a resumed run plans the cells its source has records for too: the new run is the whole run
    planned = [c for c in cells.values() if c in resumed.done] if resumed is not None else []
    for nodeid in nodeids:
        param = cell_param(nodeid)
        if param in cells:
            planned.append(cells[param])
    if config.option.collectonly:
        return      # a listing of the cells runs none: no run folder, nothing missing
    config.stash[PLANNED] = planned
    if planned:
        _start_run(config, planned)


def _start_run(config, planned) -> None:
    """Before any cell runs: the manifest and plan in the run folder (all a killed run would
    otherwise lack to be resumed), and the resumed run's records carried into its shards."""
    folder = run_folder(config)
    write_started(folder, manifest=run_manifest(config), planned=planned)
    resumed = resumed_run(config)
    if resumed is not None:
        carry_over(resumed.records, shard_dir(config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    if PLANNED not in node.config.stash:     # every worker collects the same cells
        _record_planned(node.config, ids)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):
        return   # workers write shards; the controller merges once
    if FOLLOWER in config.stash:
        config.stash[FOLLOWER].stop()
    planned = config.stash.get(PLANNED, [])
    folder = run_folder(config)
    sharded = config.getoption("--num-shards", default=1) > 1
    if not planned and not (folder / "shards").exists():
        if not sharded:
            return   # this session ran no cell of the matrix
        # a shard the hash gave no case: an empty run, so that merging every shard's run completes
        (folder / "shards").mkdir(parents=True, exist_ok=True)
        if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK
    merged = merge(folder, manifest=run_manifest(config), planned=planned)
    point_latest(results_root(config), folder.name)
    prune_finished(results_root(config))
    config.stash[MERGED] = (folder / "results.json", merged["missing"], merged["unreadable_shards"])
    config.stash[SUMMARY] = summary_lines(merged["records"],
                                          (run_manifest(config).get("selection") or {}).get("case_operators"),
                                          {operators.key(op): op.acceptance_case_id for op in run_operators(config) if op.acceptance_case},
                                          _run_studies(folder), merged["missing"])
    if merged["missing"] or merged["unreadable_shards"]:
        session.exitstatus = max(int(session.exitstatus), int(pytest.ExitCode.TESTS_FAILED))
    _resumed_exit_status(session, merged["records"])
    report_dir = config.getoption("--report-dir")
    if report_dir:
        try:
            from reports import render
            config.stash[REPORT] = str(render(folder, report_dir, baseline=config.getoption("--baseline")))
        except Exception as exc:   # the verdicts stand; say loudly that the page is missing
            config.stash[REPORT] = f"FAILED to render the report: {type(exc).__name__}: {exc}"


def _resumed_exit_status(session, records) -> None:
    """A resumed run's status is the whole run's: a carried cell that did not pass fails it, as it
    failed its own run; a resume with nothing left to run is no empty session."""
    resumed = resumed_run(session.config)
    if resumed is None:
        return
    carried = {cell: status for cell, status in cell_verdicts(records).items() if cell in resumed.done}
    failing = sum(status in NOT_PASSED for status in carried.values())
    if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK
    if failing:
        session.exitstatus = max(int(session.exitstatus), int(pytest.ExitCode.TESTS_FAILED))
    ran = len(session.config.stash.get(PLANNED, [])) - len(carried)
    session.config.stash[RESUMED_LINE] = (f"resumed {resumed.source}: {len(carried)} cells carried over "
                                          f"({failing} failing: failed, errors, crashes, timeouts, known failures that "
                                          f"passed), {ran} run now")


RESUMED_LINE = pytest.StashKey[str]()
def _run_studies(folder: Path) -> dict[str, dict]:
    """The drift studies this run made (``cases/test_drift_figure.py``), by operator key."""
    studies = {}
    for path in sorted((folder / DRIFT_STUDIES).glob("*/drift.json")):
        try:
            studies[path.parent.name] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue     # a study cut short: the report says none is there
    return studies


MERGED = pytest.StashKey[tuple]()
SUMMARY = pytest.StashKey[list]()
REPORT = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    manifest = config.stash.get(MANIFEST, None)
    if manifest is not None:
        facts = ", ".join(f"{k}={v}" for k, v in manifest["facts"].items())
        terminalreporter.write_sep("-", f"platform facts: {facts}")
    summary = config.stash.get(SUMMARY, None)
    if summary:
        terminalreporter.write_sep("-", "accuracy summary")
        for line in summary:
            terminalreporter.write_line(line)
    merged = config.stash.get(MERGED, None)
    if merged is not None:
        terminalreporter.write_line(gate_line(config))
        if RESUMED_LINE in config.stash:
            terminalreporter.write_line(config.stash[RESUMED_LINE])
        path, missing, unreadable = merged
        for cell in missing:
            terminalreporter.write_line(f"MISSING: case {cell['case']}, backend {cell['backend']!r}: planned, "
                                        f"but no record (a crashed or killed worker?)", red=True)
        for shard in unreadable:
            terminalreporter.write_line(f"UNREADABLE shard skipped: {shard}", red=True)
        tail = f" ({len(missing)} planned cells without a record)" if missing else ""
        terminalreporter.write_sep("-", f"accuracy results: {path}{tail}")
    report = config.stash.get(REPORT, None)
    if report is not None:
        terminalreporter.write_sep("-", f"accuracy report: {report}")
