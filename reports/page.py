"""Render a results directory into one self-contained HTML page with PNG plots.

    render(results_dir, out_dir, baseline=None) -> Path of out_dir/index.html

The page is ``index.html`` plus ``plots/*.png`` next to it, linked relatively:
no network resource, it works from the file system and moved to another
machine. HTML comes from Jinja2 templates (the page and a block per panel, ``reports.panels``)
with autoescaping on, so every string from the results (case ids, backend import paths) is escaped.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

import operators
from contract.records import records_of
from reports import data as D
from reports import plots as P
from reports.panels import PLOTS, Context, PlotJob, order
from runs.results import load_records, load_results, write_text_atomic

TEMPLATES = Path(__file__).parent / "templates"


# --------------------------------------------------------------------------- loading

def load(results: str | os.PathLike) -> list[dict]:
    """Records of a results file, a run folder, or a results directory's latest run
    (``runs.results.resolve_results``)."""
    path = Path(results)
    if not path.exists():
        raise FileNotFoundError(f"results directory {path} does not exist")
    return [r for r in load_records(path) if isinstance(r, Mapping)]


# --------------------------------------------------------------------------- formatting filters

def fmt_num(v, digits: int = 3) -> str:
    x = D.num(v)
    if x is None:
        return "–"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if x == int(x) and abs(x) < 1e6:
        return str(int(x))
    return f"{x:.{digits}g}"


def fmt_pct(v) -> str:
    x = D.num(v)
    if x is None:
        return "–"
    if x == 0:
        return "0"
    return f"{100 * x:.3g}%"


def fmt_index(v) -> str:
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(str(i) for i in v) + ")"
    return "–" if v is None else str(v)


def environment() -> Environment:
    # keep_trailing_newline: a panel's block renders line for line as its file reads, its last newline
    # included, so the blocks join into the page as whole lines
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(num=fmt_num, pct=fmt_pct, idx=fmt_index)
    return env


# --------------------------------------------------------------------------- helpers

def _title(op) -> str:
    return f"{op.title or op.name}: accuracy report"


def _plot_job(job: PlotJob) -> None:
    name, args, path = job
    getattr(P, name)(*args, path)


PARALLEL_MIN_JOBS = 12   # below this, starting worker processes costs more than it saves
# this process draws one chunk itself while the workers draw the others: a second core pays off
# (the main command's report on 2 cores: 43 plots, 16.5 s in one process)
PARALLEL_MIN_CPUS = 2


def _run_plot_jobs(jobs: list[PlotJob], processes: int | None) -> int:
    """Run the plot jobs; returns the number of processes used. In parallel, this process draws the
    first chunk and each other chunk's worker is a fresh ``python -m reports.plots JOBFILE`` (no fork
    of a process holding torch's threads, no re-import of the caller's ``__main__``); a chunk whose
    worker fails is redone here."""
    if processes is None:
        cpus = os.cpu_count() or 1
        processes = min(8, cpus) if len(jobs) >= PARALLEL_MIN_JOBS and cpus >= PARALLEL_MIN_CPUS else 1
    processes = max(1, min(processes, len(jobs)))
    if processes == 1:
        for job in jobs:
            _plot_job(job)
        return 1
    import pickle
    import subprocess
    import sys
    biggest_first = sorted(jobs, key=lambda j: j[0] != "drift")      # dealt round-robin
    chunks = [biggest_first[i::processes] for i in range(processes)]
    with tempfile.TemporaryDirectory(prefix="report-plots-") as tmp:
        procs = []
        for i, chunk in enumerate(chunks[1:], 1):
            job_file = Path(tmp) / f"jobs-{i}.pickle"
            job_file.write_bytes(pickle.dumps(chunk))
            procs.append((chunk, subprocess.Popen([sys.executable, "-m", "reports.plots", str(job_file)],
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
        for job in chunks[0]:
            _plot_job(job)
        for chunk, proc in procs:
            _, err = proc.communicate()
            if proc.returncode != 0:
                for job in chunk:
                    _plot_job(job)
    return processes


# --------------------------------------------------------------------------- render

def render(results_dir: str | os.PathLike, out_dir: str | os.PathLike, baseline: str | os.PathLike | None = None,
           *, heatmap: bool = True, title: str | None = None, processes: int | None = None,
           drift_study: str | os.PathLike | None = None) -> Path:
    """Render ``results_dir`` (a results directory or a results JSON file) into ``out_dir/index.html``
    (+ ``out_dir/plots/*.png``); ``baseline``: a previous results directory to diff against.
    ``heatmap``: the per-tile drift of the operator's default schedule at the largest case whose
    records carry it (``reports.tile_drift``; recorded by the golden pass, nothing is recomputed).
    ``processes``: plot in that many processes (default: up to 8 when there are >= 12 plots and >= 2 CPUs, this process drawing one share;
    1: serially). ``drift_study``: the directory of a drift study (``python -m cases.drift_study -o DIR``);
    default ``out_dir/drift`` when it holds one. Its figures and crossing table head the drift section."""
    t_start = time.perf_counter()
    if not Path(results_dir).exists():
        raise FileNotFoundError(f"results directory {results_dir} does not exist")
    data = load_results(results_dir)          # read once: records, manifest and run facts
    # the run's own operators (its manifest's selection): their outputs, schedules and titles
    selection = (data.get("manifest") or {}).get("selection") or {}
    chosen = selection.get("operator") or operators.DEFAULT
    options = dict(heatmap=heatmap, title=title, processes=processes, drift_study=drift_study)
    if isinstance(chosen, str):
        path, _, _ = _render_operator(data, operators.get(chosen), Path(out_dir), results_dir, baseline,
                                      None if baseline is None else load(baseline), t_start,
                                      study_strict=drift_study is not None, **options)
        return path
    return _render_sections(data, chosen, selection.get("case_operators") or {}, Path(out_dir), results_dir,
                            baseline, **options)


def _render_sections(data: dict, keys: list, case_operators: Mapping, out: Path, results_dir, baseline,
                     **options) -> Path:
    """A run of several operators: one page per operator (``OUT/<operator>/index.html``, its records
    alone) and ``OUT/index.html`` with a section per operator: its verdict counts and its page. A
    drift study (``OUT/drift`` or the one named) heads the page of its own operator."""
    previous = load(baseline) if baseline is not None else None
    if options["drift_study"] is None and (out / "drift" / "drift.json").is_file():
        options = {**options, "drift_study": out / "drift"}
    sections = []
    for key in keys:
        op = operators.get(key)
        mine = records_of(data["records"], case_operators, key)
        base = None if previous is None else records_of(previous, case_operators, key)
        # its own planned cells without a record (the run's list holds every operator's)
        lost = [c for c in data.get("missing") or [] if case_operators.get(c["case"]) == key]
        _, idx, counts = _render_operator({**data, "records": mine, "missing": lost}, op, out / op.name, results_dir,
                                          baseline, base, time.perf_counter(), study_strict=False, **options)
        sections.append({"name": op.name, "title": op.title or op.name, "href": f"{op.name}/index.html",
                         "cases": len(idx.cases), "backends": list(counts), "counts": counts})
    html = environment().get_template("operators.html.j2").render(
        title=options.get("title") or "accuracy report: " + ", ".join(s["title"] for s in sections),
        results_dir=str(results_dir), sections=sections,
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    path = out / "index.html"
    write_text_atomic(path, html)
    return path


def _render_operator(data: dict, op, out: Path, results_dir, baseline, baseline_records: list | None,
                     t_start: float, *, study_strict: bool, heatmap: bool = True, title: str | None = None,
                     processes: int | None = None, drift_study=None) -> tuple[Path, D.Index, dict]:
    """One operator's page from its records (``data``: the loaded results, its records only;
    ``baseline_records``: the baseline's records of the same operator, named ``baseline``): every
    panel of ``reports.panels.order`` computes its data and names its plots, the plots of all panels
    are drawn in one pool, and the page shows each panel's block in order.
    Returns the page, the records' index and the verdict counts per backend."""
    cpu_start = time.process_time()
    timings: dict[str, float] = {}
    plots = out / PLOTS
    plots.mkdir(parents=True, exist_ok=True)
    for old in plots.glob("*.png"):
        old.unlink()
    t0 = time.perf_counter()
    records = [r for r in data["records"] if isinstance(r, Mapping)]
    context = Context(idx=D.index(records, op), op=op, results=data, out=out,
                      baseline=baseline, baseline_records=baseline_records, heatmap=heatmap,
                      drift_study=drift_study, study_strict=study_strict)
    panels = [(panel, panel.data(context)) for panel in order.PANELS]
    # what a panel drew itself is listed on its own after the page's phases, not counted as data
    timings["data"] = time.perf_counter() - t0 - sum(context.timings.values())

    t0, c0 = time.perf_counter(), time.process_time()
    jobs = [job for panel, panel_data in panels for job in panel.plots(context, panel_data)]
    timings["plot workers"] = _run_plot_jobs(jobs, processes)
    timings["plots"] = time.perf_counter() - t0
    timings["plots CPU"] = time.process_time() - c0
    timings.update(context.timings)

    t0 = time.perf_counter()
    idx = context.idx
    html = environment().get_template("report.html.j2").render(
        title=title or _title(op), results_dir=str(results_dir), baseline_dir=None if baseline is None else str(baseline),
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), n_records=idx.n_records,
        cases=idx.case_list(), backends=idx.backends, run_info=context.run_info, platform=context.platform,
        timings=timings, panels=panels, data_of={panel.name: panel_data for panel, panel_data in panels})
    timings["html"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    timings["total CPU"] = time.process_time() - cpu_start
    html = html.replace("@@RENDER_SECONDS@@", f"{timings['total']:.1f}")
    path = out / "index.html"
    write_text_atomic(path, html)
    return path, idx, context.counts
